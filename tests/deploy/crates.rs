//! The workspace's dependency rule, read from the manifests: services depend on library crates,
//! never on each other; only push and the edge link the session layer.

use std::collections::BTreeSet;

use super::root;

const SERVICES: [&str; 5] = ["live", "push", "edge", "api", "stats"];

/// The `pmw*` packages a crate's `[dependencies]` (not dev-dependencies) name.
fn pmw_dependencies(dir: &str) -> BTreeSet<String> {
    let path = root().join("crates").join(dir).join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut in_deps = false;
    let mut out = BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
        } else if in_deps && line.starts_with("pmw") {
            let name = line.split(['.', ' ', '=']).next().unwrap_or_default();
            out.insert(name.to_string());
        }
    }
    out
}

#[test]
fn services_depend_on_library_crates_never_on_each_other() {
    let services: BTreeSet<String> = SERVICES.iter().map(|s| format!("pmw-{s}")).collect();
    for dir in SERVICES {
        let deps = pmw_dependencies(dir);
        assert!(deps.contains("pmw-core"), "pmw-{dir}: {deps:?}");
        let on_services: Vec<_> = deps.intersection(&services).collect();
        assert!(
            on_services.is_empty(),
            "pmw-{dir} depends on services {on_services:?}"
        );
        let session = deps.contains("pmw-session");
        assert_eq!(
            session,
            dir == "push" || dir == "edge",
            "pmw-{dir}: only push and the edge link pmw-session ({deps:?})"
        );
    }
    // pmw-core links neither the session layer nor the broker client.
    let core = pmw_dependencies("core");
    assert!(core.is_empty(), "pmw-core depends on {core:?}");
    let manifest = std::fs::read_to_string(root().join("crates/core/Cargo.toml")).unwrap();
    assert!(
        !manifest.contains("async-nats"),
        "pmw-core links the broker client"
    );
}

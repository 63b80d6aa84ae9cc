//! The units' sandbox (issue 30, item 13): `systemd-analyze security` scores every production
//! unit as deployed (User=pmw) under [`MAX_EXPOSURE`], and the units before the sandbox score
//! over it; a real systemd manager loads them with every [`SANDBOX`] property, runs every
//! service under it (the kernel's view of each process: no capability, seccomp filter, no new
//! privileges, umask 0077) and each serves; a name resolves inside the sandbox (no AF_NETLINK).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::services::Host;
use crate::systemd::{Systemd, UNITS};

/// The highest `systemd-analyze security` exposure a unit may have (0 safe … 10 exposed). The
/// units before the sandbox scored 8.5.
pub const MAX_EXPOSURE: f64 = 2.0;

/// The sandbox as systemd's effective properties (`systemctl show`).
pub const SANDBOX: &[(&str, &str)] = &[
    ("NoNewPrivileges", "yes"),
    ("CapabilityBoundingSet", ""),
    ("AmbientCapabilities", ""),
    ("UMask", "0077"),
    ("ProtectSystem", "strict"),
    ("ProtectHome", "yes"),
    ("PrivateTmp", "yes"),
    ("PrivateMounts", "yes"),
    ("PrivateDevices", "yes"),
    ("PrivateUsers", "yes"),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectKernelLogs", "yes"),
    ("ProtectControlGroups", "yes"),
    ("ProtectClock", "yes"),
    ("ProtectHostname", "yes"),
    ("ProtectProc", "invisible"),
    ("ProcSubset", "pid"),
    ("RemoveIPC", "yes"),
    ("RestrictSUIDSGID", "yes"),
    ("RestrictRealtime", "yes"),
    ("RestrictNamespaces", "yes"),
    ("LockPersonality", "yes"),
    ("MemoryDenyWriteExecute", "yes"),
    ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
    ("SystemCallArchitectures", "native"),
    ("SystemCallErrorNumber", "1"),
];

/// Where `props` break [`SANDBOX`], and the system call filter: an allow list (`@system-service`)
/// without `@privileged` calls.
pub fn sandbox_violations(props: &BTreeMap<String, String>) -> Vec<String> {
    let mut bad: Vec<String> = SANDBOX
        .iter()
        .filter(|(k, v)| props.get(*k).map(String::as_str) != Some(*v))
        .map(|(k, v)| format!("{k}={:?}, want {v:?}", props.get(*k)))
        .collect();
    let filter = props.get("SystemCallFilter").cloned().unwrap_or_default();
    let calls: Vec<&str> = filter.split_whitespace().collect();
    let allows = ["read", "write", "epoll_wait", "connect", "futex"]
        .iter()
        .all(|c| calls.contains(c));
    let privileged = [
        "mount",
        "reboot",
        "init_module",
        "setuid",
        "chroot",
        "kexec_load",
    ]
    .iter()
    .any(|c| calls.contains(c));
    if filter.starts_with('~') || !allows || privileged {
        bad.push(format!(
            "SystemCallFilter is not @system-service without @privileged: {filter:.120}"
        ));
    }
    bad
}

/// `systemd-analyze security` of a unit file as deployed (offline: the file, not a manager).
fn exposure_offline(dir: &Path, unit: &str) -> (f64, String) {
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager", unit])
        .current_dir(dir)
        .output()
        .expect("systemd-analyze (Debian systemd) is installed");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    (overall_exposure(&text, unit), text)
}

/// The `Overall exposure level for <unit>: 1.2 OK` figure.
fn overall_exposure(text: &str, unit: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level for"))
        .unwrap_or_else(|| panic!("{unit}: no overall exposure in {text}"));
    line.rsplit_once(": ")
        .and_then(|(_, v)| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{unit}: unreadable exposure line {line:?}"))
}

/// The production units as files (the templates as push@a and edge@a), `mutate`d.
fn stage_files(dir: &Path, mutate: impl Fn(String) -> String) -> Vec<String> {
    let mut names = Vec::new();
    for u in crate::units() {
        let name = u
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace("@.service", "@a.service");
        std::fs::write(
            dir.join(&name),
            mutate(std::fs::read_to_string(&u).unwrap()),
        )
        .unwrap();
        names.push(name);
    }
    names
}

/// A unit without the sandbox of issue 30: only the four settings the units had before.
fn without_sandbox(unit: String) -> String {
    let kept = [
        "NoNewPrivileges",
        "ProtectSystem",
        "ProtectHome",
        "PrivateTmp",
    ];
    unit.lines()
        .filter(|l| {
            let key = l.split('=').next().unwrap_or_default();
            let sandbox = key == "SystemCallFilter" || SANDBOX.iter().any(|(k, _)| *k == key);
            !sandbox || kept.contains(&key)
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn systemd_analyze_security_scores_every_unit_under_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let names = stage_files(dir.path(), |t| t);
    assert_eq!(names.len(), 5, "{names:?}");
    let mut figures = Vec::new();
    for name in &names {
        let (score, text) = exposure_offline(dir.path(), name);
        assert!(
            score <= MAX_EXPOSURE,
            "{name}: exposure {score} over {MAX_EXPOSURE}:\n{text}"
        );
        figures.push(format!("{} {score}", name.trim_end_matches(".service")));
    }
    // The check can fail: the units as they were before the sandbox score far over the bound.
    let old = tempfile::tempdir().unwrap();
    let mut before = Vec::new();
    for name in stage_files(old.path(), without_sandbox) {
        let (score, text) = exposure_offline(old.path(), &name);
        assert!(
            score > MAX_EXPOSURE,
            "{name} without the sandbox: exposure {score}:\n{text}"
        );
        before.push(format!("{} {score}", name.trim_end_matches(".service")));
    }
    let figures = format!(
        "`systemd-analyze security --offline=yes` (systemd 252) of the units as deployed (User=pmw): \
         {}; bound {MAX_EXPOSURE}; before the sandbox: {}",
        figures.join(", "),
        before.join(", ")
    );
    println!("hardening: {figures}");
    pmw_tools::record("systemd-hardening", &figures);
}

#[test]
fn systemd_loads_the_units_with_the_sandbox() {
    let sd = Systemd::start();
    sd.install_units();
    for unit in UNITS {
        let p = sd.show(unit);
        assert_eq!(p["LoadState"], "loaded", "{unit}: {}", sd.diagnostics());
        let bad = sandbox_violations(&p);
        assert!(bad.is_empty(), "{unit} is not sandboxed: {bad:?}");
    }
    // The check can fail: the API's unit without the sandbox breaks it on every property.
    let api =
        std::fs::read_to_string(crate::root().join("deploy/systemd/pmw-api.service")).unwrap();
    sd.write_unit("pmw-old.service", &without_sandbox(api));
    sd.ok(&["daemon-reload"]);
    let bad = sandbox_violations(&sd.show("pmw-old.service"));
    assert!(bad.len() >= SANDBOX.len() - 4, "{bad:?}");
}

/// A name resolves under the units' sandbox (glibc's getaddrinfo without AF_NETLINK): `getent`
/// in a transient unit with every sandbox line of pmw-api.service.
fn resolves_in_the_sandbox(sd: &Systemd) {
    let api =
        std::fs::read_to_string(crate::root().join("deploy/systemd/pmw-api.service")).unwrap();
    let mut args = vec![
        "--user".to_string(),
        "--wait".into(),
        "--pipe".into(),
        "--quiet".into(),
    ];
    for line in api.lines() {
        let key = line.split('=').next().unwrap_or_default();
        if SANDBOX.iter().any(|(k, _)| *k == key) || key == "SystemCallFilter" {
            args.extend(["-p".into(), line.to_string()]);
        }
    }
    args.extend([
        "/usr/bin/getent".into(),
        "ahosts".into(),
        "localhost".into(),
    ]);
    let out = Command::new("systemd-run")
        .args(&args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .env("HOME", sd.dir.path().join("home"))
        .env("XDG_RUNTIME_DIR", sd.dir.path().join("run"))
        .output()
        .expect("systemd-run");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("127.0.0.1"),
        "localhost does not resolve in the sandbox: {text}"
    );
}

/// One field of /proc/<pid>/status.
fn proc_status(pid: i64, field: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("pid {pid}: no {field} in /proc/{pid}/status"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_runs_every_service_in_the_sandbox() {
    let h = Host::start().await;
    for unit in [
        "pmw-live@a.service",
        "pmw-api.service",
        "pmw-stats@a.service",
        "pmw-edge@1.service",
    ] {
        h.serving(unit, h.state(unit).pid, 0).await;
    }
    let leader = h.leader().await;
    let standby = if leader == "push-a" { "b" } else { "a" };
    let standby = format!("pmw-push@{standby}.service");
    h.serving(&standby, h.state(&standby).pid, 0).await;
    for unit in UNITS {
        let pid = h.state(unit).pid;
        for (field, want) in [
            ("NoNewPrivs", "1"),
            ("Seccomp", "2"),
            ("CapBnd", "0000000000000000"),
            ("CapEff", "0000000000000000"),
            ("Umask", "0077"),
        ] {
            assert_eq!(
                proc_status(pid, field),
                want,
                "{unit} (pid {pid}): {field}: {}",
                h.sd.diagnostics()
            );
        }
        assert_eq!(
            h.state(unit).restarts,
            0,
            "{unit} restarted under the sandbox: {}",
            h.sd.diagnostics()
        );
    }
    resolves_in_the_sandbox(&h.sd);
}

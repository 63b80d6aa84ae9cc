//! The local stack as the project's scripts start it: read its environment, start it if needed.

use std::collections::HashMap;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// The `PMW_*` variables printed by `scripts/stack env`.
#[derive(Debug, Clone)]
pub struct StackEnv {
    pub vars: HashMap<String, String>,
}

impl StackEnv {
    /// The `export KEY=VALUE` lines `scripts/stack env` prints (bash's `printf %q`: a
    /// backslash escapes the next character, e.g. the commas of `PMW_NATS_URLS`).
    pub(crate) fn parse(printed: &str) -> StackEnv {
        let vars = printed
            .lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), unescape(v.trim_matches(['"', '\'']))))
            .collect();
        StackEnv { vars }
    }

    /// `role`'s (`push`, `edge`, `operator`) identity on this stack's locked NATS cluster.
    pub fn nats_role(&self, role: &str) -> NatsRole {
        let up = role.to_ascii_uppercase();
        NatsRole {
            user: self.get(&format!("PMW_NATS_{up}_USER")).to_string(),
            password: self.get(&format!("PMW_NATS_{up}_PASSWORD")).to_string(),
            ca: Some(self.get("PMW_NATS_CA"))
                .filter(|ca| !ca.is_empty())
                .map(PathBuf::from),
        }
    }

    pub fn get(&self, key: &str) -> &str {
        self.vars
            .get(key)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("scripts/stack env did not print {key}"))
    }
}

/// A role's user and password on the stack's NATS cluster (deploy/nats/nats.conf) and the CA
/// its servers' certificates are checked against.
#[derive(Debug, Clone)]
pub struct NatsRole {
    pub user: String,
    pub password: String,
    /// `None`: a cluster without TLS.
    pub ca: Option<PathBuf>,
}

impl NatsRole {
    /// A service's settings for this identity: `PMW_<SERVICE>_NATS_USER`, `_PASSWORD`, `_CA`
    /// (`service`: `PUSH`, `EDGE`).
    pub fn env(&self, service: &str) -> Vec<(String, String)> {
        let mut env = vec![
            (format!("PMW_{service}_NATS_USER"), self.user.clone()),
            (
                format!("PMW_{service}_NATS_PASSWORD"),
                self.password.clone(),
            ),
        ];
        if let Some(ca) = &self.ca {
            env.push((
                format!("PMW_{service}_NATS_CA"),
                ca.to_string_lossy().into_owned(),
            ));
        }
        env
    }
}

/// `printf %q`'s escapes undone: `\\x` is `x`.
fn unescape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

/// A binary of the workspace, built beside the running test binary (`cargo test --workspace` and
/// `cargo nextest run --workspace` build every workspace binary first).
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/<name>
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binary in target/<profile>/deps")
        .join(name);
    assert!(
        bin.exists(),
        "{} is missing: build the workspace binaries (cargo build --workspace)",
        bin.display()
    );
    bin
}

fn stack_script() -> PathBuf {
    repo_root().join("scripts/stack")
}

fn read_env() -> StackEnv {
    let out = Command::new(stack_script())
        .arg("env")
        .output()
        .expect("run scripts/stack env");
    assert!(
        out.status.success(),
        "scripts/stack env failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    StackEnv::parse(&String::from_utf8_lossy(&out.stdout))
}

/// `role`'s identity on the shared stack's NATS cluster ([`nats_urls`]).
pub fn nats_role(role: &str) -> NatsRole {
    nats_urls();
    stack_env().nats_role(role)
}

fn reachable(url_host_port: &str) -> bool {
    let hp = url_host_port
        .split("://")
        .nth(1)
        .unwrap_or(url_host_port)
        .rsplit('@')
        .next()
        .unwrap_or("")
        .split('/')
        .next()
        .unwrap_or("");
    hp.parse()
        .ok()
        .map(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
        .unwrap_or(false)
}

/// The stack's environment; starts Postgres, ClickHouse and anvil through `scripts/stack up`
/// when they are not reachable (the script serialises concurrent callers with a lock).
pub fn stack_env() -> &'static StackEnv {
    static ENV: OnceLock<StackEnv> = OnceLock::new();
    ENV.get_or_init(|| {
        let env = read_env();
        let up = ["PMW_POSTGRES_URL", "PMW_CLICKHOUSE_URL", "PMW_RPC_HTTP_URL"]
            .iter()
            .all(|k| reachable(env.get(k)));
        if !up {
            let status = Command::new(stack_script())
                .arg("up")
                .status()
                .expect("run scripts/stack up");
            assert!(status.success(), "scripts/stack up failed");
        }
        env
    })
}

/// The client URLs of the shared stack's 3-node NATS JetStream cluster (comma-separated, as
/// `PMW_NATS_URLS`); starts it through `scripts/stack up nats` when no node answers (a stack
/// brought up before NATS was part of it).
pub fn nats_urls() -> &'static str {
    static URLS: OnceLock<String> = OnceLock::new();
    URLS.get_or_init(|| {
        let urls = stack_env().get("PMW_NATS_URLS").to_string();
        if !urls.split(',').all(reachable) {
            let status = Command::new(stack_script())
                .args(["up", "nats"])
                .status()
                .expect("run scripts/stack up nats");
            assert!(status.success(), "scripts/stack up nats failed");
        }
        urls
    })
}

/// The opt-in Postgres HA stack's environment (`scripts/stack env ha`: `PMW_POSTGRES_URL` lists
/// both Patroni members), after `scripts/stack up ha` made sure every member runs and the
/// primary has a synchronous standby again (a previous test may have killed one). The HA stack
/// has ports and a state dir of its own; the shared stack's ClickHouse and anvil are started too.
pub fn ha_stack_env() -> StackEnv {
    stack_env();
    let status = Command::new(stack_script())
        .args(["up", "ha"])
        .status()
        .expect("run scripts/stack up ha");
    assert!(status.success(), "scripts/stack up ha failed");
    let out = Command::new(stack_script())
        .args(["env", "ha"])
        .output()
        .expect("run scripts/stack env ha");
    assert!(out.status.success(), "scripts/stack env ha failed");
    StackEnv::parse(&String::from_utf8_lossy(&out.stdout))
}

//! A private stack for drills that restart, stop or kill servers: the project's own
//! `scripts/stack`, run with a private state dir, data dir and ports, torn down on drop, so a
//! drill never disturbs the shared stack other tests use. Postgres + ClickHouse
//! ([`PrivateStack::start`]), or a 3-node NATS JetStream cluster
//! ([`PrivateStack::start_nats`]) whose nodes a test can kill -9 and bring back.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use crate::net::free_port;
use crate::stack::{repo_root, StackEnv};

/// A running private stack.
pub struct PrivateStack {
    pub env: StackEnv,
    vars: Vec<(String, String)>,
    dirs: Vec<PathBuf>,
    components: Vec<&'static str>,
}

impl PrivateStack {
    /// Start Postgres and ClickHouse on free ports in a private state dir.
    pub fn start() -> PrivateStack {
        PrivateStack::start_with(&["pg", "ch"])
    }

    /// Start a 3-node NATS JetStream cluster (file storage) on free ports in a private state
    /// dir; its client URLs are [`PrivateStack::nats_urls`].
    pub fn start_nats() -> PrivateStack {
        PrivateStack::start_with(&["nats"])
    }

    /// Start `components` (of `pg`, `ch`, `nats`) on free ports in a private state dir (the
    /// edge-mode checker: all three).
    pub fn start_with(components: &[&'static str]) -> PrivateStack {
        let tag = format!("{}-{:08x}", std::process::id(), rand::random::<u32>());
        let state = PathBuf::from(format!("/var/tmp/pmw-private-{tag}"));
        let ch_data = PathBuf::from(format!("/dev/shm/pmw-private-ch-{tag}"));
        let three = || {
            (0..3)
                .map(|_| free_port().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let vars: Vec<(String, String)> = vec![
            ("PMW_STACK_DIR".into(), state.to_string_lossy().into_owned()),
            ("PMW_CH_DATA".into(), ch_data.to_string_lossy().into_owned()),
            ("PMW_PG_PORT".into(), free_port().to_string()),
            ("PMW_CH_HTTP_PORT".into(), free_port().to_string()),
            ("PMW_CH_TCP_PORT".into(), free_port().to_string()),
            ("PMW_ANVIL_PORT".into(), free_port().to_string()),
            ("PMW_NATS_PORTS".into(), three()),
            ("PMW_NATS_CLUSTER_PORTS".into(), three()),
            ("PMW_NATS_HTTP_PORTS".into(), three()),
        ];
        let mut stack = PrivateStack {
            env: StackEnv {
                vars: HashMap::new(),
            },
            vars,
            dirs: vec![state, ch_data],
            components: components.to_vec(),
        };
        let mut up = vec!["up"];
        up.extend_from_slice(components);
        stack.run(&up);
        let out = Command::new(repo_root().join("scripts/stack"))
            .arg("env")
            .envs(stack.vars.iter().cloned())
            .output()
            .expect("scripts/stack env");
        stack.env = StackEnv::parse(&String::from_utf8_lossy(&out.stdout));
        stack
    }

    /// Run `scripts/stack ARGS` against this stack (e.g. `["pg-ctl", "restart", "-m", "fast"]`,
    /// `["down", "ch"]`, `["up", "ch"]`, `["up", "nats"]` to restart killed nodes); panics if
    /// it fails.
    pub fn run(&self, args: &[&str]) {
        let status = Command::new(repo_root().join("scripts/stack"))
            .args(args)
            .envs(self.vars.iter().cloned())
            .env("PMW_INSTALL_QUIET", "1")
            .status()
            .expect("scripts/stack");
        assert!(status.success(), "scripts/stack {args:?} failed");
    }

    /// The NATS cluster's client URLs, comma-separated (`PMW_NATS_URLS`).
    pub fn nats_urls(&self) -> &str {
        self.env.get("PMW_NATS_URLS")
    }

    /// The pid of NATS node `node` (1-3), from its pid file.
    pub fn nats_pid(&self, node: usize) -> u32 {
        let file = PathBuf::from(self.env.get("PMW_STACK_DIR")).join(format!("nats/n{node}.pid"));
        std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
            .trim()
            .parse()
            .expect("a pid")
    }

    /// SIGKILL NATS node `node` (1-3), as a crash; `run(&["up", "nats"])` brings it back.
    pub fn nats_kill(&self, node: usize) {
        let pid = self.nats_pid(node);
        let status = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -KILL {pid} (nats node {node})");
    }
}

impl Drop for PrivateStack {
    fn drop(&mut self) {
        let mut down = vec!["down"];
        down.extend_from_slice(&self.components);
        let _ = Command::new(repo_root().join("scripts/stack"))
            .args(&down)
            .envs(self.vars.iter().cloned())
            .status();
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

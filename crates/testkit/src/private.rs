//! A private Postgres + ClickHouse stack for drills that restart or stop servers: the project's
//! own `scripts/stack`, run with a private state dir, data dir and ports, torn down on drop, so a
//! drill never disturbs the shared stack other tests use.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use crate::net::free_port;
use crate::stack::{repo_root, StackEnv};

/// A running private stack (Postgres and ClickHouse).
pub struct PrivateStack {
    pub env: StackEnv,
    vars: Vec<(String, String)>,
    dirs: Vec<PathBuf>,
}

impl PrivateStack {
    /// Start Postgres and ClickHouse on free ports in a private state dir.
    pub fn start() -> PrivateStack {
        let tag = format!("{}-{:08x}", std::process::id(), rand::random::<u32>());
        let state = PathBuf::from(format!("/var/tmp/pmw-private-{tag}"));
        let ch_data = PathBuf::from(format!("/dev/shm/pmw-private-ch-{tag}"));
        let vars: Vec<(String, String)> = vec![
            ("PMW_STACK_DIR".into(), state.to_string_lossy().into_owned()),
            ("PMW_CH_DATA".into(), ch_data.to_string_lossy().into_owned()),
            ("PMW_PG_PORT".into(), free_port().to_string()),
            ("PMW_CH_HTTP_PORT".into(), free_port().to_string()),
            ("PMW_CH_TCP_PORT".into(), free_port().to_string()),
            ("PMW_ANVIL_PORT".into(), free_port().to_string()),
        ];
        let mut stack = PrivateStack {
            env: StackEnv {
                vars: HashMap::new(),
            },
            vars,
            dirs: vec![state, ch_data],
        };
        stack.run(&["up", "pg", "ch"]);
        let out = Command::new(repo_root().join("scripts/stack"))
            .arg("env")
            .envs(stack.vars.iter().cloned())
            .output()
            .expect("scripts/stack env");
        stack.env = StackEnv::parse(&String::from_utf8_lossy(&out.stdout));
        stack
    }

    /// Run `scripts/stack ARGS` against this stack (e.g. `["pg-ctl", "restart", "-m", "fast"]`,
    /// `["down", "ch"]`, `["up", "ch"]`); panics if it fails.
    pub fn run(&self, args: &[&str]) {
        let status = Command::new(repo_root().join("scripts/stack"))
            .args(args)
            .envs(self.vars.iter().cloned())
            .env("PMW_INSTALL_QUIET", "1")
            .status()
            .expect("scripts/stack");
        assert!(status.success(), "scripts/stack {args:?} failed");
    }
}

impl Drop for PrivateStack {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/stack"))
            .args(["down", "pg", "ch"])
            .envs(self.vars.iter().cloned())
            .status();
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

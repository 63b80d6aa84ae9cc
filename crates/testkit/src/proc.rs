//! Running a service binary as a child process with a test's environment, to observe exit codes.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// A service binary running as a child process.
pub struct ChildService {
    pub child: Child,
}

impl ChildService {
    /// Start `bin` with `env` (plus the stack's defaults), stdout/stderr inherited.
    pub fn start(bin: &Path, env: &[(String, String)], args: &[&str]) -> ChildService {
        let child = Command::new(bin)
            .args(args)
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        ChildService { child }
    }

    /// Send SIGTERM.
    pub fn terminate(&self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
    }

    /// Send signal `sig` (`STOP`, `CONT`, `KILL`, … as `kill` names it).
    pub fn signal(&self, sig: &str) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args([format!("-{sig}"), pid.to_string()])
                .status();
        }
    }

    /// Wait for exit (bounded) and return the exit code.
    pub async fn wait_code(&mut self, within: Duration) -> i32 {
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("process did not exit within {within:?}"))
            .expect("wait for child");
        status.code().expect("exited by a signal, not a code")
    }

    /// Still running?
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Run a binary to completion (bounded) and return (exit code, stdout, stderr).
pub async fn run_bin(
    bin: &Path,
    env: &[(String, String)],
    args: &[&str],
    within: Duration,
) -> (i32, String, String) {
    let out = tokio::time::timeout(
        within,
        Command::new(bin)
            .args(args)
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{} did not finish within {within:?}", bin.display()))
    .expect("run binary");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

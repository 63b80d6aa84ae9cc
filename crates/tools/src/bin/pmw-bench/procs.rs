//! pmw-live and pmw-push as child processes (the release binaries beside this one), so their
//! resident memory is readable from `/proc/<pid>/status` and the load generator never shares a
//! runtime with them. Logs go to files; a stop is SIGTERM to that pid, then a bounded wait.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::process::{Child, Command};

/// A service binary running as a child process.
pub struct Service {
    pub name: String,
    pub pid: u32,
    child: Child,
}

impl Service {
    /// Start `bin` with `env` added to this process's environment; stdout and stderr go to `log`.
    pub fn spawn(
        name: &str,
        bin: &Path,
        env: &[(String, String)],
        log: &Path,
    ) -> anyhow::Result<Service> {
        let out =
            std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new(bin)
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        let pid = child.id().context("child has no pid")?;
        Ok(Service {
            name: name.to_string(),
            pid,
            child,
        })
    }

    /// Resident set size in KiB (`VmRSS` of `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.pid)
    }

    /// Still running?
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM (this pid only), then wait up to 30 s; SIGKILL after that. Returns the exit code.
    pub async fn stop(mut self) -> anyhow::Result<i32> {
        if self.running() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &self.pid.to_string()])
                .status();
        }
        match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(status) => Ok(status?.code().unwrap_or(-1)),
            Err(_) => {
                self.child.kill().await?;
                bail!(
                    "{} (pid {}) ignored SIGTERM for 30 s: killed",
                    self.name,
                    self.pid
                )
            }
        }
    }
}

/// `VmRSS` of any pid, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The directory of this executable: `target/release` when run by `scripts/bench`.
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    Ok(exe
        .parent()
        .context("executable has no directory")?
        .to_path_buf())
}

/// A service binary beside this one; an error says how to build it.
pub fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let p = bin_dir()?.join(name);
    if !p.is_file() {
        bail!(
            "{} is missing: build it first (`cargo build --release -p pmw-live -p pmw-push`; scripts/bench does)",
            p.display()
        );
    }
    Ok(p)
}

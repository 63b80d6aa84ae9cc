//! pm2 under a drill: a private `PM2_HOME` killed on drop (with the apps' log tails when a
//! drill fails), its app list, and its log of exits.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use pmw_testkit::{eventually_every, repo_root};

/// pm2 with a private home, killed on drop.
pub struct Pm2 {
    pub home: tempfile::TempDir,
    pub env: Vec<(String, String)>,
}

impl Pm2 {
    pub fn bin() -> PathBuf {
        repo_root().join("tools/pm2/node_modules/.bin/pm2")
    }

    pub fn run(&self, args: &[&str]) -> std::process::Output {
        self.run_env(args, &[])
    }

    /// `run` with `extra` on top of the drill's environment (pm2 passes it to started apps).
    pub fn run_env(&self, args: &[&str], extra: &[(&str, &str)]) -> std::process::Output {
        std::process::Command::new(Self::bin())
            .args(args)
            .envs(self.env.iter().cloned())
            .envs(extra.iter().copied())
            .env("PM2_HOME", self.home.path())
            .stdin(Stdio::null())
            .output()
            .expect("pm2 (scripts/install pm2)")
    }
}

impl Pm2 {
    /// Print the last `lines` lines of every app's logs: what a failed run shows of why (CI
    /// keeps no files, only the output).
    pub fn print_log_tails(&self, lines: usize) {
        eprint!("{}", log_tails(&self.home.path().join("logs"), lines));
    }
}

impl Drop for Pm2 {
    fn drop(&mut self) {
        let _ = self.run(&["kill"]);
        // A failing drill shows what its apps said last: CI keeps no files, only the output.
        if std::thread::panicking() {
            eprint!("{}", log_tails(&self.home.path().join("logs"), 40));
        }
        // `PMW_DRILL_KEEP_LOGS=<dir>` keeps pm2's log and the apps' logs of every drill there.
        if let Ok(dir) = std::env::var("PMW_DRILL_KEEP_LOGS") {
            let to = PathBuf::from(dir).join(format!("pm2-{}", std::process::id()));
            let _ = std::process::Command::new("cp")
                .arg("-r")
                .arg(self.home.path())
                .arg(&to)
                .status();
        }
    }
}

/// The last `lines` lines of every log file in pm2's `dir`, each under its file's name.
fn log_tails(dir: &std::path::Path, lines: usize) -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut out = String::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let tail = &all[all.len().saturating_sub(lines)..];
        out += &format!("---- {} (last {} lines)\n", f.display(), tail.len());
        for l in tail {
            out += l;
            out.push('\n');
        }
    }
    out
}

/// pm2's own log: how many times `app` exited at all.
pub fn any_exits(pm2: &Pm2, app: &str) -> usize {
    let log = std::fs::read_to_string(pm2.home.path().join("pm2.log")).unwrap_or_default();
    let needle = format!("App [{app}:");
    log.lines()
        .filter(|l| l.contains(&needle) && l.contains("exited with code"))
        .count()
}

/// pm2's own log of exits: how many times `app` exited with `code`.
pub fn exits(pm2: &Pm2, app: &str, code: i32) -> usize {
    let log = std::fs::read_to_string(pm2.home.path().join("pm2.log")).unwrap_or_default();
    let needle = format!("App [{app}:");
    log.lines()
        .filter(|l| l.contains(&needle) && l.contains(&format!("exited with code [{code}]")))
        .count()
}

/// One app as pm2 lists it (`pm2 jlist`).
#[derive(Debug, Clone)]
pub struct App {
    pub name: String,
    pub pid: i64,
    pub status: String,
    pub restarts: i64,
    pub exit_code: Option<i64>,
    /// When pm2 last started it (`pm_uptime`, ms since the epoch).
    pub started_ms: i64,
}

impl Pm2 {
    pub fn apps(&self) -> Vec<App> {
        let out = self.run(&["jlist"]);
        let apps: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        apps.iter()
            .map(|a| App {
                name: a["name"].as_str().unwrap_or_default().to_string(),
                pid: a["pid"].as_i64().unwrap_or(0),
                status: a["pm2_env"]["status"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                restarts: a["pm2_env"]["restart_time"].as_i64().unwrap_or(0),
                exit_code: a["pm2_env"]["exit_code"].as_i64(),
                started_ms: a["pm2_env"]["pm_uptime"].as_i64().unwrap_or(0),
            })
            .collect()
    }

    #[track_caller]
    pub fn app(&self, name: &str) -> App {
        let apps = self.apps();
        apps.iter()
            .find(|a| a.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("pm2 runs no {name}: {apps:?}"))
    }

    /// Wait until `before`'s app is online again under a new pid, restarted by pm2 once more.
    pub async fn wait_back(&self, before: &App, within: Duration) -> App {
        let polled = eventually_every(within, Duration::from_millis(100), || async {
            let now = self.app(&before.name);
            let back = now.status == "online"
                && now.pid > 0
                && now.pid != before.pid
                && now.restarts > before.restarts;
            if back {
                Ok(now)
            } else {
                Err(now)
            }
        })
        .await;
        polled.unwrap_or_else(|now| {
            panic!(
                "pm2 did not bring {} back within {within:?}: {now:?} (before {before:?})",
                before.name
            )
        })
    }
}

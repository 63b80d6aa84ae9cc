//! The real Caddy (Debian's package) running the production `caddy/Caddyfile`, as tests start it:
//! the file's `PMW_*` placeholders from `env`, Caddy's own state under `home` and its output in
//! `home/logs/caddy.log` (beside pm2's logs in the drills, whose failures print them), killed
//! when the child is dropped.

use std::path::Path;
use std::process::Stdio;

use crate::repo_root;

/// Start `caddy run` with the production Caddyfile and `env` (e.g. `PMW_SITE`, `PMW_API`).
/// Upstreams of a pair `env` does not name point at a closed port (127.0.0.1:1), not at the
/// Caddyfile's defaults, where another test's service may be listening.
pub fn caddy(home: &Path, env: &[(&str, String)]) -> tokio::process::Child {
    let logs = home.join("logs");
    std::fs::create_dir_all(&logs).expect("caddy's log directory");
    let log = std::fs::File::create(logs.join("caddy.log")).expect("caddy's log file");
    let err = log.try_clone().expect("caddy's log file");
    tokio::process::Command::new("caddy")
        .args(["run", "--adapter", "caddyfile", "--config"])
        .arg(repo_root().join("caddy/Caddyfile"))
        .envs(
            ["PMW_API_B", "PMW_STATS_B"]
                .into_iter()
                .filter(|k| env.iter().all(|(set, _)| set != k))
                .map(|k| (k, "127.0.0.1:1")),
        )
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("HOME", home)
        .env("XDG_DATA_HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(err))
        .kill_on_drop(true)
        .spawn()
        .expect("caddy (Debian package) is installed")
}

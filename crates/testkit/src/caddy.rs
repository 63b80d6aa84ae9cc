//! The real Caddy (Debian's package) running the production `caddy/Caddyfile`, as tests start it:
//! the file's `PMW_*` placeholders from `env`, Caddy's own state under `home`, output discarded,
//! killed when the child is dropped.

use std::path::Path;
use std::process::Stdio;

use crate::repo_root;

/// Start `caddy run` with the production Caddyfile and `env` (e.g. `PMW_SITE`, `PMW_API`).
pub fn caddy(home: &Path, env: &[(&str, String)]) -> tokio::process::Child {
    tokio::process::Command::new("caddy")
        .args(["run", "--adapter", "caddyfile", "--config"])
        .arg(repo_root().join("caddy/Caddyfile"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("HOME", home)
        .env("XDG_DATA_HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("caddy (Debian package) is installed")
}

//! A private anvil for tests: spawns the project's anvil binary (npm `@foundry-rs/anvil` in
//! tools/node, or `PMW_ANVIL_BIN`) on a free loopback port and kills it on drop, so tests that
//! reorg or flood the chain never disturb the shared one.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::rpc::Rpc;

/// A running anvil child process.
#[derive(Debug)]
pub struct Anvil {
    child: Child,
    port: u16,
}

/// The anvil binary: `$PMW_ANVIL_BIN`, else the native binary of the npm platform package in
/// tools/node, else its `.bin/anvil` shim, else `anvil` on PATH.
pub fn anvil_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("PMW_ANVIL_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let node = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/node/node_modules");
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let native = node.join(format!("@foundry-rs/anvil-linux-{arch}/bin/anvil"));
    if native.is_file() {
        return native;
    }
    let shim = node.join(".bin/anvil");
    if shim.is_file() {
        return shim;
    }
    PathBuf::from("anvil")
}

impl Anvil {
    /// An automining anvil (every transaction mined at once in its own block).
    pub async fn spawn() -> anyhow::Result<Anvil> {
        Anvil::spawn_with(&[]).await
    }

    /// An anvil with extra arguments, e.g. `["--block-time", "0.5"]`. Its chain id is
    /// Polygon's ([`CHAIN_ID`], pmw-live's default `PMW_LIVE_CHAIN_ID`) unless `--chain-id` is
    /// among them.
    pub async fn spawn_with(extra_args: &[&str]) -> anyhow::Result<Anvil> {
        let bin = anvil_binary();
        let mut last_err = None;
        for _ in 0..3 {
            let port = free_port()?;
            let child = Command::new(&bin)
                .args([
                    "--host",
                    "127.0.0.1",
                    "--port",
                    &port.to_string(),
                    "--silent",
                ])
                .args(chain_id_unless_given(extra_args))
                .args(extra_args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("spawn {}", bin.display()))?;
            let mut anvil = Anvil { child, port };
            match anvil.wait_ready().await {
                Ok(()) => return Ok(anvil),
                Err(e) => last_err = Some(e), // port taken meanwhile, or a slow start: retry
            }
        }
        Err(last_err.expect("tried at least once"))
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let rpc = Rpc::new(&self.http_url())?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if rpc.chain_id().await.is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("anvil exited during start: {status}");
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("anvil did not answer on port {} within 20 s", self.port);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.port)
    }
}

impl Drop for Anvil {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The chain id test anvils report: Polygon's, which pmw-live expects by default.
pub const CHAIN_ID: u64 = 137;

/// `--chain-id` [`CHAIN_ID`], unless `args` set one.
fn chain_id_unless_given(args: &[&str]) -> Vec<String> {
    if args.contains(&"--chain-id") {
        return Vec::new();
    }
    vec!["--chain-id".into(), CHAIN_ID.to_string()]
}

fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

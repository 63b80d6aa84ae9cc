//! A current ClickHouse as a second engine: `tools/python/chdb_http.py` (chDB, installed by
//! `scripts/install python` into `tools/python/.venv`) serving ClickHouse's HTTP interface on a
//! private data directory, run as a child process. It reports the statements it received, so a
//! test can check that each of pmw's statements ran on it.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::stack::repo_root;

/// A running chDB HTTP server; stopped and its data removed when dropped.
pub struct ChdbServer {
    pub port: u16,
    /// `SELECT version()` of the embedded engine.
    pub version: String,
    queries: Arc<Mutex<Vec<String>>>,
    data: PathBuf,
    child: Child,
}

impl ChdbServer {
    /// Start it (fails, never skips, when the venv or chDB is missing). The server runs in a
    /// time zone unlike the stack's, so no statement may depend on the session time zone.
    pub async fn start() -> ChdbServer {
        let python = repo_root().join("tools/python/.venv/bin/python");
        assert!(
            python.exists(),
            "{} is missing: run `scripts/install python` (chDB, the second ClickHouse engine)",
            python.display()
        );
        let data = std::env::temp_dir().join(format!(
            "pmw-chdb-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&data).expect("chdb data dir");
        let mut child = Command::new(python)
            .arg(repo_root().join("tools/python/chdb_http.py"))
            .arg("--data")
            .arg(&data)
            .args(["--max-seconds", "600"])
            .env("TZ", "America/Los_Angeles")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start tools/python/chdb_http.py");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("chdb_http.py announces its port within 60 s")
            .expect("read chdb_http.py's stdout")
            .expect("chdb_http.py exited before listening");
        let hello: serde_json::Value = serde_json::from_str(&first).expect("json first line");
        let port = hello["listening"].as_u64().expect("listening port") as u16;
        let version = hello["version"].as_str().expect("version").to_string();
        let queries = Arc::new(Mutex::new(Vec::new()));
        let sink = queries.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let v: serde_json::Value = serde_json::from_str(&line).expect("json line");
                if let Some(q) = v["query"].as_str() {
                    sink.lock().unwrap().push(q.to_string());
                }
            }
        });
        ChdbServer {
            port,
            version,
            queries,
            data,
            child,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every statement received so far, in order.
    pub fn queries(&self) -> Vec<String> {
        self.queries.lock().unwrap().clone()
    }
}

impl Drop for ChdbServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

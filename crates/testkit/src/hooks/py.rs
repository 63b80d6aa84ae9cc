//! The independent receiver: `tools/python/webhook_receiver.py`, which verifies every request
//! with the official `standardwebhooks` package (installed by `scripts/install python` into
//! `tools/python/.venv`), run as a child process. Its verdicts arrive as JSON lines.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The venv's interpreter; the tests fail (never skip) when it is missing.
fn python() -> PathBuf {
    let p = crate::repo_root().join("tools/python/.venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run `scripts/install python` (the standardwebhooks receiver needs it)",
        p.display()
    );
    p
}

fn script() -> PathBuf {
    crate::repo_root().join("tools/python/webhook_receiver.py")
}

/// A running Python receiver.
pub struct PyReceiver {
    pub port: u16,
    verdicts: Arc<Mutex<Vec<serde_json::Value>>>,
    _child: Child,
}

impl PyReceiver {
    pub async fn start(secret: &str) -> PyReceiver {
        let mut child = Command::new(python())
            .arg(script())
            .args([
                "--secret",
                secret,
                "--status",
                "204",
                "--max-seconds",
                "240",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the python receiver");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("python receiver announces its port")
            .unwrap()
            .expect("a first line");
        let port = serde_json::from_str::<serde_json::Value>(&first).unwrap()["listening"]
            .as_u64()
            .expect("listening port") as u16;
        let verdicts = Arc::new(Mutex::new(Vec::new()));
        let sink = verdicts.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let v: serde_json::Value = serde_json::from_str(&line).expect("json verdict");
                sink.lock().unwrap().push(v);
            }
        });
        PyReceiver {
            port,
            verdicts,
            _child: child,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    pub fn verdicts(&self) -> Vec<serde_json::Value> {
        self.verdicts.lock().unwrap().clone()
    }
}

/// The signature `standardwebhooks` computes for `hit` with `secret` (what the receiver got must
/// equal it).
pub async fn python_signature_of(secret: &str, hit: &super::Hit) -> String {
    let timestamp = hit
        .timestamp
        .parse()
        .expect("webhook-timestamp is an integer");
    let body = std::str::from_utf8(&hit.body).expect("the body is UTF-8");
    python_sign(secret, &hit.id, timestamp, body).await
}

/// `standardwebhooks.Webhook(secret).sign(id, timestamp, body)` computed by the Python package.
pub async fn python_sign(secret: &str, id: &str, timestamp: i64, body: &str) -> String {
    let code = "import sys, datetime\n\
                from standardwebhooks import Webhook\n\
                s, i, t, b = sys.argv[1:5]\n\
                ts = datetime.datetime.fromtimestamp(int(t), tz=datetime.timezone.utc)\n\
                print(Webhook(s).sign(i, ts, b))\n";
    let out = Command::new(python())
        .args(["-c", code, secret, id, &timestamp.to_string(), body])
        .output()
        .await
        .expect("run python");
    assert!(
        out.status.success(),
        "python sign: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

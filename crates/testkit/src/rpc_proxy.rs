//! A JSON-RPC-aware HTTP proxy in front of a real node (anvil), that can play a lagging node
//! behind a load balancer: with `hide_newest(n)` it answers as if it had only the blocks up to
//! the real head − n (`eth_blockNumber` and `latest` say so, newer blocks by number or hash are
//! `null`, and `eth_getLogs` of a newer block hash is the node's `unknown block` error), while
//! the subscription (served elsewhere, e.g. through a [`crate::TcpProxy`]) announces every head.
//! With `empty_logs(true)`, `eth_getLogs` of a hidden block answers `[]` instead (as some nodes
//! do for a hash they do not know). With `hide_newest(0)` it forwards every request unchanged.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use axum::Router;
use serde_json::{json, Value};

/// A running proxy to one node's HTTP endpoint.
pub struct RpcProxy {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    stop: tokio_util::sync::CancellationToken,
}

struct Inner {
    upstream: String,
    http: reqwest::Client,
    hide: AtomicU64,
    empty_logs: std::sync::atomic::AtomicBool,
    /// Answers rewritten to hide a block ("not found" answers given).
    hidden: AtomicU64,
}

impl RpcProxy {
    /// A proxy to `upstream` (`http://…`), forwarding everything until told otherwise.
    pub async fn start(upstream: &str) -> RpcProxy {
        let inner = Arc::new(Inner {
            upstream: upstream.to_string(),
            http: reqwest::Client::new(),
            hide: AtomicU64::new(0),
            empty_logs: std::sync::atomic::AtomicBool::new(false),
            hidden: AtomicU64::new(0),
        });
        let app = Router::new().fallback(handle).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let s = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { s.cancelled().await })
                .await;
        });
        RpcProxy { addr, inner, stop }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answer as if the newest `n` blocks did not exist yet (0: forward unchanged).
    pub fn hide_newest(&self, n: u64) {
        self.inner.hide.store(n, Ordering::SeqCst);
    }

    /// Answer `eth_getLogs` of a hidden block with `[]` (`true`) or `unknown block` (`false`).
    pub fn empty_logs(&self, on: bool) {
        self.inner.empty_logs.store(on, Ordering::SeqCst);
    }

    /// How many answers hid a block so far.
    pub fn hidden(&self) -> u64 {
        self.inner.hidden.load(Ordering::SeqCst)
    }
}

impl Drop for RpcProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn handle(State(inner): State<Arc<Inner>>, Json(req): Json<Value>) -> Json<Value> {
    let out = match req {
        Value::Array(calls) => {
            let mut answers = Vec::with_capacity(calls.len());
            for c in calls {
                answers.push(inner.answer(c).await);
            }
            Value::Array(answers)
        }
        call => inner.answer(call).await,
    };
    Json(out)
}

fn number_of(v: &Value) -> Option<u64> {
    u64::from_str_radix(v.as_str()?.trim_start_matches("0x"), 16).ok()
}

impl Inner {
    async fn upstream(&self, call: &Value) -> Value {
        match self.http.post(&self.upstream).json(call).send().await {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(e) => {
                json!({"jsonrpc": "2.0", "id": call["id"], "error": {"code": -32603, "message": e.to_string()}})
            }
        }
    }

    async fn call(&self, method: &str, params: Value) -> Value {
        let c = json!({"jsonrpc": "2.0", "id": 0, "method": method, "params": params});
        self.upstream(&c).await["result"].clone()
    }

    async fn answer(&self, call: Value) -> Value {
        let hide = self.hide.load(Ordering::SeqCst);
        if hide == 0 {
            return self.upstream(&call).await;
        }
        let Some(head) = number_of(&self.call("eth_blockNumber", json!([])).await) else {
            return self.upstream(&call).await;
        };
        let visible = head.saturating_sub(hide);
        let id = call["id"].clone();
        let ok = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
        let params = call["params"].clone();
        match call["method"].as_str().unwrap_or("") {
            "eth_blockNumber" => ok(json!(format!("0x{visible:x}"))),
            "eth_getBlockByNumber" => {
                let tag = &params[0];
                let n = if tag == "latest" {
                    Some(visible)
                } else {
                    number_of(tag)
                };
                match n {
                    Some(n) if n > visible => self.hid(ok(Value::Null)),
                    Some(n) => {
                        let mut c = call.clone();
                        c["params"][0] = json!(format!("0x{n:x}"));
                        self.upstream(&c).await
                    }
                    None => self.upstream(&call).await,
                }
            }
            "eth_getBlockByHash" => {
                let answer = self.upstream(&call).await;
                match number_of(&answer["result"]["number"]) {
                    Some(n) if n > visible => self.hid(ok(Value::Null)),
                    _ => answer,
                }
            }
            "eth_getLogs" if params[0]["blockHash"].is_string() => {
                let block = self
                    .call("eth_getBlockByHash", json!([params[0]["blockHash"], false]))
                    .await;
                match number_of(&block["number"]) {
                    Some(n) if n > visible && self.empty_logs.load(Ordering::SeqCst) => {
                        self.hid(ok(json!([])))
                    }
                    Some(n) if n > visible => self.hid(json!({
                        "jsonrpc": "2.0", "id": call["id"],
                        "error": {"code": -32000, "message": "unknown block"},
                    })),
                    _ => self.upstream(&call).await,
                }
            }
            _ => self.upstream(&call).await,
        }
    }

    fn hid(&self, answer: Value) -> Value {
        self.hidden.fetch_add(1, Ordering::SeqCst);
        answer
    }
}

//! A JSON-RPC-aware HTTP proxy in front of a real node (anvil), that can play a lagging node
//! behind a load balancer: with `hide_newest(n)` it answers as if it had only the blocks up to
//! the real head − n (`eth_blockNumber` and `latest` say so, newer blocks by number or hash are
//! `null`, and `eth_getLogs` of a newer block hash is the node's `unknown block` error), while
//! the subscription (served elsewhere, e.g. through a [`crate::TcpProxy`]) announces every head.
//! With `empty_logs(true)`, `eth_getLogs` of a hidden block answers `[]` instead (as some nodes
//! do for a hash they do not know). With `hide_newest(0)` it forwards every request unchanged.
//!
//! It can also lie, as a hijacked provider would: [`RpcProxy::lie_about_block`] gives one block
//! a hash of its own ([`fake_hash`]; the next block's parent hash follows) with that block's
//! logs under it plus one fabricated fill; [`RpcProxy::forge_logs`] keeps a block's true header
//! and hash but adds one fabricated fill to its logs; [`RpcProxy::inflate_head`] announces heads higher
//! than they are; [`RpcProxy::report_chain_id`] reports another chain; [`RpcProxy::finalize_latest`]
//! calls the latest block finalized. Its WebSocket ([`RpcProxy::ws_url`]: `newHeads` from a poll
//! of the node, other requests answered as over HTTP) tells the same lies.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
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
    lies: Mutex<Lies>,
    /// Answers that told a lie.
    lied: AtomicU64,
}

/// What the proxy lies about.
#[derive(Debug, Default, Clone, Copy)]
struct Lies {
    block: Option<u64>,
    forged_logs: Option<u64>,
    inflate: u64,
    chain_id: Option<u64>,
    finalized_latest: bool,
}

impl Lies {
    fn any(&self) -> bool {
        self.block.is_some()
            || self.forged_logs.is_some()
            || self.inflate > 0
            || self.chain_id.is_some()
            || self.finalized_latest
    }
}

/// The hash the proxy gives a block it lies about: the real one with its last 4 bytes changed.
pub fn fake_hash(real: &str) -> String {
    let head = &real[..real.len().saturating_sub(8)];
    let fake = format!("{head}0badf00d");
    if fake.eq_ignore_ascii_case(real) {
        format!("{head}0badf00e")
    } else {
        fake
    }
}

fn hex(n: u64) -> Value {
    json!(format!("0x{n:x}"))
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
            lies: Mutex::new(Lies::default()),
            lied: AtomicU64::new(0),
        });
        let app = Router::new()
            .route("/", get(ws).post(handle))
            .fallback(handle)
            .with_state(inner.clone());
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

    /// Its WebSocket: `newHeads` (telling the same lies as its HTTP side).
    pub fn ws_url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    fn set(&self, f: impl FnOnce(&mut Lies)) {
        f(&mut self.inner.lies.lock().unwrap());
    }

    /// Give block `number` a hash of its own ([`fake_hash`]) and its logs under it, plus one
    /// fabricated fill (a copy of its first log at log index + 256, with a fake tx hash); the
    /// real hash is "unknown" to it. `None`: tell the truth again.
    pub fn lie_about_block(&self, number: Option<u64>) {
        self.set(|l| l.block = number);
    }

    /// Keep block `number`'s header and hash true but add one fabricated fill to its logs (a
    /// copy of its first log at log index + 256, with a fake tx hash): a provider that agrees
    /// on the block and lies about what is in it. `None`: tell the truth again.
    pub fn forge_logs(&self, number: Option<u64>) {
        self.set(|l| l.forged_logs = number);
    }

    /// Announce heads `by` blocks higher than they are (`eth_blockNumber`, `latest`, `newHeads`).
    pub fn inflate_head(&self, by: u64) {
        self.set(|l| l.inflate = by);
    }

    /// Report chain id `id` (`None`: the node's).
    pub fn report_chain_id(&self, id: Option<u64>) {
        self.set(|l| l.chain_id = id);
    }

    /// Answer the `finalized` tag with the latest block.
    pub fn finalize_latest(&self, on: bool) {
        self.set(|l| l.finalized_latest = on);
    }

    /// How many answers told a lie so far.
    pub fn lied(&self) -> u64 {
        self.inner.lied.load(Ordering::SeqCst)
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
        let lies = *self.lies.lock().unwrap();
        if lies.any() {
            if let Some(answer) = self.lying(&call, lies).await {
                return answer;
            }
        }
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

    fn lie(&self) {
        self.lied.fetch_add(1, Ordering::SeqCst);
    }

    /// The real hash of block `n`.
    async fn real_hash(&self, n: u64) -> Option<String> {
        let b = self
            .call("eth_getBlockByNumber", json!([hex(n), false]))
            .await;
        b["hash"].as_str().map(str::to_string)
    }

    /// The answer to `call` with `lies` told, or `None` when the truth is the answer.
    async fn lying(&self, call: &Value, lies: Lies) -> Option<Value> {
        let id = call["id"].clone();
        let ok = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
        let params = &call["params"];
        match call["method"].as_str().unwrap_or("") {
            "eth_chainId" => lies.chain_id.map(|c| {
                self.lie();
                ok(hex(c))
            }),
            "eth_blockNumber" if lies.inflate > 0 => {
                let n = number_of(&self.call("eth_blockNumber", json!([])).await)?;
                self.lie();
                Some(ok(hex(n + lies.inflate)))
            }
            "eth_getBlockByNumber" => {
                let mut c = call.clone();
                let tag = params[0].as_str().unwrap_or("");
                if tag == "finalized" && lies.finalized_latest {
                    self.lie();
                    c["params"][0] = json!("latest");
                }
                let mut answer = self.upstream(&c).await;
                self.rewrite_block(&mut answer["result"], lies, tag == "latest");
                Some(answer)
            }
            "eth_getBlockByHash" => {
                let n = lies.block?;
                let real = self.real_hash(n).await?;
                let asked = params[0].as_str().unwrap_or("").to_ascii_lowercase();
                let mut c = call.clone();
                if asked == fake_hash(&real) {
                    c["method"] = json!("eth_getBlockByNumber");
                    c["params"][0] = hex(n);
                } else if asked == real {
                    return Some(ok(Value::Null));
                }
                let mut answer = self.upstream(&c).await;
                self.rewrite_block(&mut answer["result"], lies, false);
                Some(answer)
            }
            "eth_getLogs" if lies.block.is_none() => {
                let n = lies.forged_logs?;
                let real = self.real_hash(n).await?;
                let asked = params[0]["blockHash"].as_str()?.to_ascii_lowercase();
                if asked != real {
                    return None;
                }
                let mut answer = self.upstream(call).await;
                self.rewrite_logs(&mut answer["result"], &real, false);
                Some(answer)
            }
            "eth_getLogs" => {
                let n = lies.block?;
                let real = self.real_hash(n).await?;
                let mut c = call.clone();
                match params[0]["blockHash"].as_str().map(str::to_ascii_lowercase) {
                    Some(h) if h == fake_hash(&real) => c["params"][0]["blockHash"] = json!(real),
                    Some(h) if h == real => {
                        return Some(json!({"jsonrpc": "2.0", "id": call["id"],
                            "error": {"code": -32000, "message": "unknown block"}}))
                    }
                    Some(_) => return None,
                    None => {}
                }
                let mut answer = self.upstream(&c).await;
                self.rewrite_logs(&mut answer["result"], &real, true);
                Some(answer)
            }
            _ => None,
        }
    }

    /// A block (header) as the lies have it.
    fn rewrite_block(&self, block: &mut Value, lies: Lies, latest: bool) {
        let Some(n) = number_of(&block["number"]) else {
            return;
        };
        if let Some(lie) = lies.block {
            let field = match n {
                _ if n == lie => "hash",
                _ if n == lie + 1 => "parentHash",
                _ => "",
            };
            if let Some(h) = block.get(field).and_then(Value::as_str).map(str::to_string) {
                block[field] = json!(fake_hash(&h));
                self.lie();
            }
        }
        if latest && lies.inflate > 0 {
            block["number"] = hex(n + lies.inflate);
            self.lie();
        }
    }

    /// Logs under the real hash `real` plus one fabricated fill, all moved under the fake hash
    /// when `move_hash`.
    fn rewrite_logs(&self, logs: &mut Value, real: &str, move_hash: bool) {
        let Some(list) = logs.as_array_mut() else {
            return;
        };
        let mut fabricated = None;
        for log in list.iter_mut() {
            if log["blockHash"]
                .as_str()
                .map(str::to_ascii_lowercase)
                .as_deref()
                != Some(real)
            {
                continue;
            }
            if move_hash {
                log["blockHash"] = json!(fake_hash(real));
            }
            if fabricated.is_none() {
                let mut f = log.clone();
                let index = number_of(&f["logIndex"]).unwrap_or(0);
                f["logIndex"] = hex(index + 256);
                let tx = f["transactionHash"].as_str().unwrap_or("").to_string();
                f["transactionHash"] = json!(fake_hash(&tx));
                fabricated = Some(f);
            }
        }
        if let Some(f) = fabricated {
            list.push(f);
            self.lie();
        }
    }
}

async fn ws(State(inner): State<Arc<Inner>>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(move |socket| serve_ws(inner, socket))
}

/// One WebSocket client: requests answered as over HTTP, `eth_subscribe` to `newHeads` served
/// by polling the node every 20 ms (each new block announced in order, lies told).
async fn serve_ws(inner: Arc<Inner>, mut socket: WebSocket) {
    let mut subscribed = false;
    let mut last: Option<u64> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tokio::select! {
            msg = socket.recv() => {
                let Some(Ok(msg)) = msg else { return };
                let Message::Text(text) = msg else { continue };
                let Ok(call) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                let answer = match call["method"].as_str().unwrap_or("") {
                    "eth_subscribe" => {
                        subscribed = true;
                        json!({"jsonrpc": "2.0", "id": call["id"], "result": "0x1"})
                    }
                    "eth_unsubscribe" => json!({"jsonrpc": "2.0", "id": call["id"], "result": true}),
                    _ => inner.answer(call).await,
                };
                if socket.send(Message::Text(answer.to_string().into())).await.is_err() {
                    return;
                }
            }
            _ = tick.tick(), if subscribed => {
                let Some(head) = number_of(&inner.call("eth_blockNumber", json!([])).await) else {
                    continue;
                };
                let from = last.map_or(head, |l| l + 1);
                for n in from..=head {
                    let mut block = inner.call("eth_getBlockByNumber", json!([hex(n), false])).await;
                    if block.is_null() {
                        break;
                    }
                    let lies = *inner.lies.lock().unwrap();
                    inner.rewrite_block(&mut block, lies, true);
                    let note = json!({"jsonrpc": "2.0", "method": "eth_subscription",
                        "params": {"subscription": "0x1", "result": block}});
                    if socket.send(Message::Text(note.to_string().into())).await.is_err() {
                        return;
                    }
                    last = Some(n);
                }
            }
        }
    }
}

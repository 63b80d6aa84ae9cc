//! The e2e harness: pmw-live and pmw-push in-process (push on port 0) on the stack harness's
//! private database and chain ([`Chain`], shared with the drills and pmw-check), and a WebSocket
//! client that records every frame.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use pmw_core::trade::Allowlist;
use pmw_core::{CoreConfig, Cursor, UnixMs};
use pmw_push::webhook::WebhookConfig;
use pmw_push::PushConfig;
use pmw_sim::RunConfig;
use pmw_testkit::{bound_within, eventually, stack_env, ServiceHandle};
use pmw_tools::chain::{account, Chain};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

/// How long a push instance may take to lead and listen.
pub const LEADS_WITHIN: Duration = Duration::from_secs(30);

/// Run pmw-live in-process on `core`'s chain from the block after `head`, reacting fast, with no
/// Gamma (market metadata) server.
pub fn start_live(core: CoreConfig, head: u64) -> ServiceHandle {
    let live = pmw_live::LiveConfig {
        live_start_block: Some(head + 1),
        live_lock_segment_ms: 1_000,
        live_poll_interval_ms: 200,
        live_finalized_poll_ms: 200,
        gamma_url: "http://127.0.0.1:9".into(),
        ..pmw_live::LiveConfig::default()
    };
    ServiceHandle::spawn(move |stop| pmw_live::run_with(core, live, Allowlist::polymarket(), stop))
}

/// Run a pmw-push instance in-process; returns its handle and a receiver of the address it
/// reports once it leads and listens (a standby never does).
pub fn spawn_push(
    mut core: CoreConfig,
    instance: &str,
    push: PushConfig,
    hooks: WebhookConfig,
) -> (ServiceHandle, oneshot::Receiver<SocketAddr>) {
    core.instance = Some(instance.to_string());
    ServiceHandle::spawn_bound(move |stop, bound| {
        pmw_push::run_with(core, push, hooks, stop, Some(bound))
    })
}

/// [`spawn_push`], then wait until it leads and listens.
pub async fn start_push(
    core: CoreConfig,
    instance: &str,
    push: PushConfig,
    hooks: WebhookConfig,
) -> (ServiceHandle, SocketAddr) {
    let (h, rx) = spawn_push(core, instance, push, hooks);
    (h, bound_within(rx, LEADS_WITHIN).await)
}

/// The services in-process on a [`Chain`]; derefs to it (`h.db`, `h.sim`, `h.anvil`).
pub struct Harness {
    pub chain: Chain,
    pub live: Option<ServiceHandle>,
}

impl Deref for Harness {
    type Target = Chain;
    fn deref(&self) -> &Chain {
        &self.chain
    }
}

impl DerefMut for Harness {
    fn deref_mut(&mut self) -> &mut Chain {
        &mut self.chain
    }
}

impl Harness {
    pub async fn new() -> Harness {
        Harness::with_anvil(&[]).await
    }

    /// A harness whose anvil gets `args` (`--slots-in-an-epoch 2`: `finalized` trails the head
    /// by 4 blocks on anvil 1.7).
    pub async fn with_anvil(args: &[&str]) -> Harness {
        let mut h = Harness::bare(args).await;
        h.start_live().await;
        h
    }

    /// A harness whose anvil gets `args`, with no pmw-live started (the test starts its own).
    pub async fn bare(args: &[&str]) -> Harness {
        Harness {
            chain: Chain::start(stack_env(), args).await,
            live: None,
        }
    }

    pub fn core(&self) -> CoreConfig {
        let mut cfg = self.db.cfg.clone();
        cfg.rpc_ws_url = self.anvil.ws_url();
        cfg.rpc_http_url = self.anvil.http_url();
        cfg
    }

    pub async fn start_live(&mut self) {
        let head = self.sim.rpc().latest_block().await.unwrap().number.0;
        self.live = Some(start_live(self.core(), head));
    }

    pub fn push_config(&self) -> PushConfig {
        PushConfig {
            push_listen: "127.0.0.1:0".parse().unwrap(),
            push_lock_segment_ms: 1_000,
            push_ws_heartbeat_ms: 1_000,
            ..PushConfig::default()
        }
    }

    /// Start a push instance; returns its handle and a receiver of its bound address.
    pub fn start_push(
        &self,
        instance: &str,
        push: PushConfig,
    ) -> (ServiceHandle, oneshot::Receiver<SocketAddr>) {
        let hooks = WebhookConfig {
            allow_private_destinations: true,
            ..WebhookConfig::default()
        };
        spawn_push(self.core(), instance, push, hooks)
    }

    /// Start a push instance and wait until it leads and listens.
    pub async fn leader(&self, instance: &str) -> (ServiceHandle, SocketAddr) {
        let (h, rx) = self.start_push(instance, self.push_config());
        (h, bound_within(rx, LEADS_WITHIN).await)
    }

    /// An account following `wallets`, with an API key; push is notified of the change.
    pub async fn account(&self, wallets: &[pmw_core::Address]) -> (i64, String) {
        let made = self.account_unnotified(wallets).await;
        self.notify().await;
        made
    }

    /// A webhook endpoint of `account` at `url` (trades), and a NOTIFY so push picks it up.
    pub async fn endpoint(&self, account: i64, url: &str) {
        let c = self.db.connect().await;
        let secret = pmw_core::webhook::Secret::generate().expose();
        pmw_testkit::seed::Endpoint::new(account, url, &secret)
            .insert(&c)
            .await;
        c.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
            .await
            .unwrap();
    }

    /// An account following `wallets`, with an API key, and no NOTIFY (a lost notification).
    pub async fn account_unnotified(&self, wallets: &[pmw_core::Address]) -> (i64, String) {
        account(&self.db.connect().await, "t", wallets).await
    }

    /// Trade `count` matches, `per_block` to a block, `interval` apart; returns when all are mined.
    pub async fn trade(&self, per_block: u32, interval: Duration, count: u64) {
        let run = RunConfig {
            matches_per_block: per_block,
            interval,
            count: Some(count),
            duration: None,
        };
        self.sim
            .spawn(run, CancellationToken::new())
            .await
            .unwrap()
            .unwrap();
    }

    /// The push cursor's block.
    pub async fn pushed_block(&self) -> u64 {
        self.pushed().await.expect("a push cursor")
    }

    /// Wait until the push cursor reaches the chain head's block.
    pub async fn wait_pushed(&self, within: Duration) {
        // Polled as often as `eventually` polls.
        self.wait_pushed_every(within, Duration::from_millis(50))
            .await;
    }
}

/// Everything a client saw.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub trades: Vec<Cursor>,
    pub frames: Vec<Value>,
    pub close_code: Option<u16>,
}

/// A WebSocket client recording frames until the server closes or `stop` fires.
pub struct Client {
    pub events: mpsc::UnboundedReceiver<Value>,
    pub done: tokio::task::JoinHandle<Seen>,
    /// What it has seen so far, as frames arrive (`done` returns the whole of it).
    so_far: Arc<Mutex<Seen>>,
}

impl Client {
    /// Every frame seen so far.
    pub fn frames(&self) -> Vec<Value> {
        self.so_far.lock().unwrap().frames.clone()
    }

    /// Wait until what this client has seen so far satisfies `cond` (frames do not have to be
    /// taken from `events`); panics after `within` saying what it waited for and what it saw.
    pub async fn wait_seen(&self, within: Duration, what: &str, cond: impl Fn(&Seen) -> bool) {
        let held = eventually(within, || async { cond(&self.so_far.lock().unwrap()) }).await;
        if !held {
            let seen = self.so_far.lock().unwrap();
            panic!(
                "client: {what} not seen within {within:?} ({} trades, {} frames, closed {:?})",
                seen.trades.len(),
                seen.frames.len(),
                seen.close_code
            );
        }
    }

    /// Wait until this client has received a trade frame for every cursor of `owed`.
    pub async fn wait_trades(&self, owed: &[Cursor], within: Duration) {
        let what = format!("all {} owed trades", owed.len());
        self.wait_seen(within, &what, |s| {
            let got: BTreeSet<&Cursor> = s.trades.iter().collect();
            owed.iter().all(|c| got.contains(c))
        })
        .await;
    }
}

pub async fn connect(addr: SocketAddr, key: &str, since: Option<Cursor>) -> Client {
    connect_url(
        &format!(
            "ws://{addr}/v1/ws{}",
            since.map(|c| format!("?since={c}")).unwrap_or_default()
        ),
        Some(key),
    )
    .await
}

/// A raw TCP client that upgrades to `/v1/ws` and then never reads (a 4 KiB receive buffer).
pub async fn never_reading(addr: std::net::SocketAddr, key: &str) -> tokio::net::TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut slow = sock.connect(addr).await.unwrap();
    let req = format!(
        "GET /v1/ws HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer {key}\r\n\r\n"
    );
    tokio::io::AsyncWriteExt::write_all(&mut slow, req.as_bytes())
        .await
        .unwrap();
    slow
}

pub async fn connect_url(url: &str, key: Option<&str>) -> Client {
    let mut req = url.into_client_request().unwrap();
    if let Some(k) = key {
        req.headers_mut()
            .insert("authorization", format!("Bearer {k}").parse().unwrap());
    }
    let (ws, _) = tokio_tungstenite::connect_async(req)
        .await
        .expect("ws connect");
    let (tx, rx) = mpsc::unbounded_channel();
    let so_far = Arc::new(Mutex::new(Seen::default()));
    let seen = so_far.clone();
    let done = tokio::spawn(async move {
        let (mut sink, mut stream) = ws.split();
        while let Some(msg) = stream.next().await {
            match msg {
                Ok(Message::Text(t)) => {
                    let mut v: Value = serde_json::from_str(&t).unwrap();
                    v["_recv_ms"] = Value::from(UnixMs::now().0);
                    let mut seen = seen.lock().unwrap();
                    if v["type"] == "trade" {
                        seen.trades
                            .push(v["cursor"].as_str().unwrap().parse().unwrap());
                    }
                    seen.frames.push(v.clone());
                    let _ = tx.send(v);
                }
                Ok(Message::Close(f)) => {
                    seen.lock().unwrap().close_code = f.map(|f| u16::from(f.code));
                    break;
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let _ = sink.close().await;
        let seen = seen.lock().unwrap().clone();
        seen
    });
    Client {
        events: rx,
        done,
        so_far,
    }
}

/// The id of `account`'s (only) API key.
pub async fn key_id(pg: &tokio_postgres::Client, account: i64) -> i64 {
    pg.query_one("SELECT id FROM api_keys WHERE account_id = $1", &[&account])
        .await
        .unwrap()
        .get(0)
}

/// The ingest watermark: the block pmw-live committed last and its hash (none before the first).
pub async fn watermark(pg: &tokio_postgres::Client) -> Option<(i64, String)> {
    pg.query_opt(
        "SELECT block_number, block_hash FROM ingest_cursor WHERE id = 1",
        &[],
    )
    .await
    .unwrap()
    .map(|r| (r.get(0), r.get(1)))
}

/// Make a change as the API does: `sql`, then the subscriptions NOTIFY push listens for.
pub async fn change_as_api(pg: &tokio_postgres::Client, sql: &str) {
    pg.batch_execute(&format!("{sql}; SELECT pg_notify('pmw_subscriptions', '')"))
        .await
        .unwrap();
}

/// What `c` saw once the server closed it with `code` within `within`; panics saying `what`
/// did not happen otherwise.
pub async fn closed_with(c: Client, code: u16, within: Duration, what: &str) -> Seen {
    let seen = tokio::time::timeout(within, c.done)
        .await
        .unwrap_or_else(|_| panic!("not closed within {within:?}: {what}"))
        .unwrap();
    assert_eq!(seen.close_code, Some(code), "{what}: {seen:?}");
    seen
}

/// Wait for the `hello` and return its cursor (where this stream starts).
pub async fn hello_cursor(c: &mut Client) -> Cursor {
    first_of(c, "hello").await["cursor"]
        .as_str()
        .expect("hello carries a cursor")
        .parse()
        .expect("a valid cursor")
}

/// Wait for the first frame of `kind`.
pub async fn first_of(c: &mut Client, kind: &str) -> Value {
    loop {
        let v = tokio::time::timeout(Duration::from_secs(30), c.events.recv())
            .await
            .unwrap_or_else(|_| panic!("no {kind} frame within 30 s"))
            .expect("client ended");
        if v["type"] == kind {
            return v;
        }
    }
}

pub fn strictly_increasing(v: &[Cursor]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

/// One JSON-RPC request to the chain itself (plain HTTP, none of pmw's code); the whole response.
pub async fn rpc_call(rpc: &str, req: &Value) -> Value {
    reqwest::Client::new()
        .post(rpc)
        .json(req)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A fill's identity: block number, log index, block hash (lowercase `0x…`).
pub type Fill = (u64, u64, String);

/// The canonical fills of `wallets` (lowercase `0x…`) after `from_block`, from `eth_getLogs` on
/// the chain itself: both `OrderFilled` topics, the four exchanges, maker = `topics[2]`.
pub async fn canonical(rpc: &str, from_block: u64, wallets: &[String]) -> BTreeSet<Fill> {
    const EXCHANGES: [&str; 4] = [
        "0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e",
        "0xc5d563a36ae78145c45a50134d48a1215220f80a",
        "0xe111180000d2663c0091e4f400237545b87b996b",
        "0xe2222d279d744050d28e00520010520000310f59",
    ];
    const TOPICS: [&str; 2] = [
        "0xd0a08e8c493f9c94f29311604c9de1b4e8c8d4c06bd0c789af57f2d65bfec0f6",
        "0xd543adfd945773f1a62f74f0ee55a5e3b9b1a28262980ba90b1a89f2ea84d8ee",
    ];
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getLogs", "params": [{
        "fromBlock": format!("0x{:x}", from_block + 1), "toBlock": "latest",
        "address": EXCHANGES, "topics": [TOPICS],
    }]});
    let resp = rpc_call(rpc, &req).await;
    let hex = |v: &Value| u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16);
    resp["result"]
        .as_array()
        .unwrap_or_else(|| panic!("eth_getLogs: {resp}"))
        .iter()
        .filter(|l| {
            let maker = l["topics"][2].as_str().unwrap().to_lowercase();
            wallets.iter().any(|w| maker.ends_with(&w[2..]))
        })
        .map(|l| {
            (
                hex(&l["blockNumber"]).unwrap(),
                hex(&l["logIndex"]).unwrap(),
                l["blockHash"].as_str().unwrap().to_lowercase(),
            )
        })
        .collect()
}

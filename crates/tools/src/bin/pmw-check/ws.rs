//! The checker's WebSocket subscriber, written from the README's protocol alone (raw
//! `tokio-tungstenite` and `serde_json::Value`, none of pmw's types): it keeps the `resume` of the
//! last hello/trade/heartbeat, resumes with `since=` after every close, backfills over REST on a
//! `resync`, and records what it holds (trades minus retracts) and every protocol breach.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

/// A trade's identity: (block_number, log_index, block hash in lowercase hex).
pub type Id = (u64, u64, String);

/// No frame (not even a heartbeat, sent every second here) for this long: the server is frozen;
/// reconnect and resume, as a client should.
const SILENCE: Duration = Duration::from_secs(4);

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A trade body's identity and ledger position.
pub fn identity(v: &Value) -> Option<(Id, u128)> {
    let t = &v["trade"];
    let b = t["block_number"].as_u64()?;
    let li = t["log_index"].as_u64()?;
    let h = t["block_hash"].as_str()?.to_ascii_lowercase();
    Some(((b, li, h), ((b as u128) << 32) | li as u128))
}

/// What one resuming client saw over the whole run.
#[derive(Default)]
pub struct WsLog {
    /// Trades held now (received and not retracted), with the receive time.
    pub held: BTreeMap<Id, i64>,
    pub duplicated: Vec<Id>,
    pub out_of_order: Vec<Id>,
    pub retract_without_trade: Vec<Id>,
    /// (t_detect_ms, receive ms) of every trade frame.
    pub deliveries: Vec<(i64, i64)>,
    pub frames: u64,
    pub retracts: u64,
    pub resyncs: u64,
    /// (dropped at ms, next hello at ms) of every reconnect.
    pub gaps: Vec<(i64, i64)>,
    pub first_hello_ms: Option<i64>,
    pub longest_silence_ms: i64,
    /// (last frame ms, next frame ms) of every silence longer than a second.
    pub silences: Vec<(i64, i64)>,
    pub last_frame_ms: Option<i64>,
    pub connect_errors: u64,
    pub closes: BTreeMap<String, u64>,
    /// (ms, how) of every socket that ended while the client was running (a close frame's
    /// code, an error, EOF, or the client's own silence limit).
    pub drops: Vec<(i64, String)>,
    /// What it got of the pending tier (with `events=trade,pending`).
    pub pending: crate::pending_log::PendingLog,
    /// Ledger position at or below which a trade is out of order (moved back by retracts).
    floor: Option<u128>,
}

impl WsLog {
    fn frame(&mut self, at: i64) {
        if let Some(last) = self.last_frame_ms {
            self.longest_silence_ms = self.longest_silence_ms.max(at - last);
            if at - last > 1000 {
                self.silences.push((last, at));
            }
        }
        self.last_frame_ms = Some(at);
        self.frames += 1;
    }

    /// A trade (from the socket or a REST backfill).
    pub fn trade(&mut self, v: &Value, at: i64) {
        let Some((id, pos)) = identity(v) else { return };
        self.pending.trade(v, at);
        self.deliveries
            .push((v["t_detect_ms"].as_i64().unwrap_or(at), at));
        if self.held.contains_key(&id) {
            self.duplicated.push(id);
            return;
        }
        if self.floor.is_some_and(|f| pos <= f) {
            self.out_of_order.push(id.clone());
        }
        self.floor = Some(pos);
        self.held.insert(id, at);
    }

    fn retract(&mut self, v: &Value) {
        let Some((id, _)) = identity(v) else { return };
        self.retracts += 1;
        if self.held.remove(&id).is_none() {
            self.retract_without_trade.push(id);
        }
        // The new branch follows from just above the common ancestor, which the client does
        // not know; but every trade still held is at or below it (a reorg orphans every block
        // above it, and each of their trades is retracted first), so the highest trade still
        // held is the floor.
        self.floor = self
            .held
            .keys()
            .next_back()
            .map(|(b, li, _)| ((*b as u128) << 32) | *li as u128);
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Where a client resumes: the last resume point it was given, and since when it has been
/// disconnected (none while connected).
#[derive(Default)]
struct Resume {
    since: Option<String>,
    dropped: Option<i64>,
}

/// What one connection of a client reads with.
struct Session<'a> {
    http: &'a reqwest::Client,
    site: &'a str,
    key: &'a str,
    stop: &'a CancellationToken,
}

/// Connect through `site` with `key`, resuming at `since`, opted in to the pending tier or not
/// (5 s at most).
async fn connect(site: &str, key: &str, since: Option<&str>, pending: bool) -> Option<Ws> {
    let mut url = match since {
        Some(r) => format!("ws://{site}/v1/ws?since={r}"),
        None => format!("ws://{site}/v1/ws"),
    };
    if pending {
        url.push(if since.is_some() { '&' } else { '?' });
        url.push_str("events=trade,pending");
    }
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    let conn = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_tungstenite::connect_async(req),
    )
    .await;
    match conn {
        Ok(Ok((ws, _))) => Some(ws),
        _ => None,
    }
}

/// A subscriber: its key (swappable, for key revocation), its log and a pause switch.
#[derive(Clone)]
pub struct WsClient {
    pub key: Arc<Mutex<String>>,
    pub log: Arc<Mutex<WsLog>>,
    /// Stop reading until this wall-clock ms (a slow consumer).
    pub paused_until: Arc<AtomicI64>,
    /// Opted in to the pending tier (`events=trade,pending`).
    pub pending: bool,
}

impl WsClient {
    pub fn new(key: &str) -> WsClient {
        WsClient {
            key: Arc::new(Mutex::new(key.to_string())),
            log: Arc::default(),
            paused_until: Arc::default(),
            pending: false,
        }
    }

    /// The same client, opted in to the pending tier.
    pub fn with_pending(mut self, on: bool) -> WsClient {
        self.pending = on;
        self
    }

    /// Run until `stop`: connect through `site`, resume after every close.
    pub async fn run(self, site: String, stop: CancellationToken) {
        let http = reqwest::Client::new();
        let mut at = Resume::default();
        while !stop.is_cancelled() {
            let key = self.key.lock().unwrap().clone();
            let Some(ws) = connect(&site, &key, at.since.as_deref(), self.pending).await else {
                self.log.lock().unwrap().connect_errors += 1;
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            };
            let session = Session {
                http: &http,
                site: &site,
                key: &key,
                stop: &stop,
            };
            let Some(close) = self.read(ws, &session, &mut at).await else {
                return;
            };
            {
                let mut l = self.log.lock().unwrap();
                l.drops.push((now_ms(), close.clone()));
                *l.closes.entry(close).or_default() += 1;
            }
            at.dropped.get_or_insert_with(now_ms);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Read one connection's frames until it closes (how, for the log) or `stop` (none).
    async fn read(&self, ws: Ws, s: &Session<'_>, at: &mut Resume) -> Option<String> {
        let (_sink, mut stream) = ws.split();
        loop {
            let pause = self.paused_until.load(Ordering::Relaxed) - now_ms();
            if pause > 0 {
                tokio::time::sleep(Duration::from_millis(pause.min(200) as u64)).await;
                continue;
            }
            let msg = tokio::select! {
                m = stream.next() => m,
                _ = s.stop.cancelled() => return None,
                _ = tokio::time::sleep(SILENCE) => return Some("silence".into()),
            };
            let text = match msg {
                Some(Ok(Message::Text(t))) => t,
                Some(Ok(Message::Close(c))) => {
                    return Some(format!("close {}", c.map_or(0, |c| u16::from(c.code))));
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    let e = e.to_string().chars().take(40).collect::<String>();
                    return Some(format!("error {e}"));
                }
                None => return Some("eof".into()),
            };
            let Ok(v) = serde_json::from_str::<Value>(&text) else {
                return Some("bad json".into());
            };
            self.on_frame(&v, s, at).await;
        }
    }

    /// Log one frame; a `resync` is backfilled over REST, and every frame but a retract moves
    /// the resume point.
    async fn on_frame(&self, v: &Value, s: &Session<'_>, at: &mut Resume) {
        let now = now_ms();
        if v["type"] == "resync" {
            {
                let mut l = self.log.lock().unwrap();
                l.frame(now);
                l.resyncs += 1;
            }
            let after = v["after"].as_str().unwrap_or_default().to_string();
            if let Some(r) = self.backfill(s.http, s.site, s.key, &after).await {
                at.since = Some(r);
            }
            return;
        }
        {
            let mut l = self.log.lock().unwrap();
            l.frame(now);
            match v["type"].as_str() {
                Some("hello") => {
                    if l.first_hello_ms.is_none() {
                        l.first_hello_ms = Some(now);
                    }
                    if let Some(d) = at.dropped.take() {
                        l.gaps.push((d, now));
                    }
                    l.pending.hello();
                }
                Some("trade") => l.trade(v, now),
                Some("pending") => l.pending.pending(v, now),
                Some("void") => l.pending.void(v, now),
                Some("retract") => l.retract(v),
                _ => {}
            }
        }
        // Retracts never carry the resume point.
        if v["type"] != "retract" {
            if let Some(r) = v["resume"].as_str() {
                at.since = Some(r.to_string());
            }
        }
    }

    /// `GET /v1/trades?after=` page by page; returns the last trade's resume point.
    async fn backfill(
        &self,
        http: &reqwest::Client,
        site: &str,
        key: &str,
        after: &str,
    ) -> Option<String> {
        let mut after = after.to_string();
        let mut last = None;
        for _ in 0..1000 {
            let page: Value = http
                .get(format!("http://{site}/v1/trades?after={after}&limit=1000"))
                .bearer_auth(key)
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let at = now_ms();
            for t in page["trades"].as_array()? {
                self.log.lock().unwrap().trade(t, at);
                let hash = t["trade"]["block_hash"].as_str().unwrap_or_default();
                let short: String = hash.trim_start_matches("0x").chars().take(8).collect();
                last = Some(format!("{}:{short}", t["cursor"].as_str()?));
            }
            if page["more"] != Value::Bool(true) {
                break;
            }
            after = page["next"].as_str()?.to_string();
        }
        last
    }
}

//! The WebSocket load: many light clients (one tokio task each, a 4 KiB tungstenite read buffer,
//! TCP_NODELAY), each authenticated with its account's API key, recording for every live `trade`
//! frame the receive time minus the frame's `t_detect_ms` (both this machine's wall clock).
//! The same [`Collector`] records webhook deliveries (see `hooks`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use pmw_core::Address;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use crate::setup::Account;

/// Handshakes in flight at once while growing the fleet.
const CONNECT_CONCURRENCY: usize = 64;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// One received trade: its block, its `t_detect_ms` and `t_push_ms`, and when it arrived (µs).
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub block: u64,
    pub detect_ms: i64,
    pub push_ms: i64,
    pub recv_us: i64,
}

impl Sample {
    /// Client-observed detect→push, ms.
    pub fn lat_ms(&self) -> f64 {
        (self.recv_us - self.detect_ms * 1_000) as f64 / 1_000.0
    }
}

/// Every live trade received on one channel.
#[derive(Default)]
pub struct Collector {
    samples: Mutex<Vec<Sample>>,
}

impl Collector {
    /// Record a message received at `recv_us` (µs since the epoch), if it is a live trade.
    pub fn record(&self, text: &str, recv_us: i64) {
        if let Some(t) = parse_trade(text) {
            if !t.backfilled {
                let s = Sample {
                    block: t.block,
                    detect_ms: t.detect_ms,
                    push_ms: t.push_ms,
                    recv_us,
                };
                self.samples.lock().expect("collector").push(s);
            }
        }
    }

    /// Client-observed latencies (ms) of trades of blocks in `(after, upto]`.
    pub fn window(&self, after: u64, upto: u64) -> Vec<f64> {
        self.samples(after, upto)
            .iter()
            .map(Sample::lat_ms)
            .collect()
    }

    /// The samples of trades of blocks in `(after, upto]`.
    pub fn samples(&self, after: u64, upto: u64) -> Vec<Sample> {
        self.samples
            .lock()
            .expect("collector")
            .iter()
            .filter(|s| s.block > after && s.block <= upto)
            .copied()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.samples.lock().expect("collector").len()
    }

    /// Record a sample measured elsewhere (a client worker process).
    pub fn push(&self, s: Sample) {
        self.samples.lock().expect("collector").push(s);
    }

    /// The samples recorded since the first `from` (a worker streams them to its parent).
    pub fn since(&self, from: usize) -> Vec<Sample> {
        let v = self.samples.lock().expect("collector");
        v.get(from..).map_or_else(Vec::new, <[Sample]>::to_vec)
    }
}

/// What the benchmark reads from a `trade` message.
#[derive(Debug, PartialEq, Eq)]
pub struct Trade {
    pub block: u64,
    pub detect_ms: i64,
    pub push_ms: i64,
    pub backfilled: bool,
}

/// The fields of a `trade` message, found by key (WebSocket frames put `type` first; webhook
/// bodies are key-sorted): no full JSON parse per frame.
pub fn parse_trade(text: &str) -> Option<Trade> {
    if !value(text, "type")?.starts_with("\"trade\"") {
        return None;
    }
    let cursor = value(text, "cursor")?.strip_prefix('"')?;
    Some(Trade {
        block: cursor.get(..12)?.parse().ok()?,
        detect_ms: number(text, "t_detect_ms")?,
        push_ms: number(text, "t_push_ms")?,
        backfilled: value(text, "backfilled").is_some_and(|r| r.starts_with("true")),
    })
}

fn number(text: &str, key: &str) -> Option<i64> {
    let r = value(text, key)?;
    let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
    r[..end].parse().ok()
}

/// The text after the first `"key":` (compact, or with spaces as Postgres renders `jsonb`).
fn value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let quoted = format!("\"{key}\"");
    let mut from = 0;
    while let Some(i) = text[from..].find(&quoted) {
        let rest = text[from + i + quoted.len()..].trim_start();
        if let Some(v) = rest.strip_prefix(':') {
            return Some(v.trim_start());
        }
        from += i + quoted.len();
    }
    None
}

/// Microseconds since the epoch, this machine's wall clock (the clock `t_detect_ms` uses).
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

struct Client {
    wallets: Vec<Address>,
    task: JoinHandle<()>,
}

/// A set of WebSocket clients of one push instance, or spread round-robin over several edges.
pub struct Fleet {
    urls: Vec<String>,
    collector: Arc<Collector>,
    clients: Vec<Client>,
    live: Arc<AtomicUsize>,
    pub failed: usize,
}

impl Fleet {
    pub fn new(addr: std::net::SocketAddr, collector: Arc<Collector>) -> Fleet {
        Fleet::spread(&[addr], collector)
    }

    /// Clients of several servers: client `i` connects to `addrs[i % addrs.len()]`.
    pub fn spread(addrs: &[std::net::SocketAddr], collector: Arc<Collector>) -> Fleet {
        Fleet {
            urls: addrs.iter().map(|a| format!("ws://{a}/v1/ws")).collect(),
            collector,
            clients: Vec::new(),
            live: Arc::new(AtomicUsize::new(0)),
            failed: 0,
        }
    }

    /// Sessions open now (hello received, not closed).
    pub fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Open sessions until `to` were attempted (client `i` uses account `i % accounts.len()` and
    /// server `i % servers`);
    /// waits for every new session's `hello`. Returns how many of the new ones failed.
    pub async fn grow(&mut self, to: usize, accounts: &[Account]) -> usize {
        let sem = Arc::new(Semaphore::new(CONNECT_CONCURRENCY));
        let mut ready = Vec::new();
        for i in self.clients.len()..to {
            let acct = &accounts[i % accounts.len()];
            let permit = sem.clone().acquire_owned().await.expect("semaphore");
            let (tx, rx) = oneshot::channel();
            let url = self.urls[i % self.urls.len()].clone();
            let key = acct.key.clone();
            let (collector, live) = (self.collector.clone(), self.live.clone());
            let task = tokio::spawn(async move {
                let ws = tokio::time::timeout(CONNECT_TIMEOUT, open(&url, &key)).await;
                drop(permit);
                let Ok(Some(mut ws)) = ws else {
                    let _ = tx.send(false);
                    return;
                };
                live.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(true);
                while let Some(msg) = ws.next().await {
                    let recv = now_us();
                    match msg {
                        Ok(Message::Text(t)) => collector.record(t.as_str(), recv),
                        Ok(Message::Close(_)) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                live.fetch_sub(1, Ordering::SeqCst);
            });
            self.clients.push(Client {
                wallets: acct.wallets.clone(),
                task,
            });
            ready.push(rx);
        }
        let mut failed = 0;
        for rx in ready {
            if !rx.await.unwrap_or(false) {
                failed += 1;
            }
        }
        self.failed += failed;
        failed
    }

    /// How many open sessions follow each wallet (the fan-out of one of its trades).
    pub fn followers(&self) -> BTreeMap<Address, usize> {
        let mut m = BTreeMap::new();
        for c in self.clients.iter().filter(|c| !c.task.is_finished()) {
            for w in &c.wallets {
                *m.entry(*w).or_default() += 1;
            }
        }
        m
    }

    /// Drop every client (their sockets close).
    pub async fn clear(&mut self) {
        for c in self.clients.drain(..) {
            c.task.abort();
            let _ = c.task.await;
        }
        self.live.store(0, Ordering::SeqCst);
    }
}

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Connect with a small read buffer and wait for the `hello` frame.
pub async fn open(url: &str, key: &str) -> Option<Ws> {
    let mut req = url.into_client_request().ok()?;
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().ok()?);
    let cfg = WebSocketConfig::default()
        .read_buffer_size(4 * 1024)
        .write_buffer_size(1024)
        .max_message_size(Some(64 * 1024))
        .max_frame_size(Some(64 * 1024));
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(req, Some(cfg), true)
        .await
        .ok()?;
    match ws.next().await {
        Some(Ok(Message::Text(t))) if t.as_str().contains("\"type\":\"hello\"") => Some(ws),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_frames_and_webhook_bodies() {
        let ws = r#"{"type":"trade","t_push_ms":1700000000123,"backfilled":false,"cursor":"000000001240-000002","market":null,"t_detect_ms":1700000000100,"trade":{"side":"BUY"}}"#;
        let t = |block, detect_ms, push_ms, backfilled| Trade {
            block,
            detect_ms,
            push_ms,
            backfilled,
        };
        assert_eq!(
            parse_trade(ws),
            Some(t(1240, 1_700_000_000_100, 1_700_000_000_123, false))
        );
        let hook = r#"{"backfilled":true,"cursor":"000000000007-000000","t_detect_ms":5,"t_push_ms":9,"trade":{},"type":"trade"}"#;
        assert_eq!(parse_trade(hook), Some(t(7, 5, 9, true)));
        assert_eq!(parse_trade(r#"{"type":"heartbeat","head":3}"#), None);
        // As Postgres renders a stored webhook body (`jsonb`: a space after each colon).
        let stored = r#"{"type": "trade", "trade": {"note": "\"type\": 1"}, "cursor": "000000000008-000001", "t_push_ms": 12, "backfilled": false, "t_detect_ms": 10}"#;
        assert_eq!(parse_trade(stored), Some(t(8, 10, 12, false)));
    }
}

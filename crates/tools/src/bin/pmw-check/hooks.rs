//! The checker's webhook receivers: real HTTP servers on 127.0.0.1 (in multi-host mode on the hosts' gateway) that verify every request's
//! Standard Webhooks signature themselves (HMAC-SHA256 of `id.timestamp.body`, any `v1,` entry,
//! any secret the endpoint has had), and, on a message's first attempt only, sometimes answer
//! 500, time out (answer after the sender's 10 s timeout) or answer slowly, from a seeded RNG.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Router;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::ws::{identity, now_ms, Id};

/// One accepted (2xx) message.
#[derive(Clone)]
pub struct Accepted {
    /// The request path: which endpoint of this receiver it was sent to.
    pub path: String,
    pub webhook_id: String,
    pub body: Value,
    /// When the request reached the receiver (the order the pending tier is judged in).
    pub arrived_ms: i64,
    /// When it was answered (after any slow answer).
    pub at_ms: i64,
}

#[derive(Default)]
pub struct HookLog {
    pub accepted: Vec<Accepted>,
    /// The first attempt of every trade message (answered or not): (path, t_detect_ms, at ms).
    /// When the system sent it is what availability judges; what the receiver then answered is
    /// the receiver's doing.
    pub first_attempts: Vec<(String, i64, i64)>,
    /// (path, from ms, to ms) while this receiver held [`SENDER_SLOTS`] requests of one
    /// endpoint open at once: the sender may not start another, so a message waiting then
    /// waits on the receiver.
    pub saturated: Vec<(String, i64, i64)>,
    open: BTreeMap<String, (usize, i64)>,
    pub requests: u64,
    pub bad_signature: u64,
    pub answered_500: u64,
    pub timed_out: u64,
    pub slow: u64,
    seen_ids: HashSet<String>,
}

struct Inner {
    secrets: Mutex<Vec<String>>,
    log: Mutex<HookLog>,
    rng: Mutex<rand::rngs::StdRng>,
    /// Whether first attempts misbehave.
    faulty: bool,
}

/// A receiver for one or more endpoints (all its endpoints' secrets verify).
#[derive(Clone)]
pub struct Hook {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
}

fn verify(secret: &str, id: &str, ts: &str, body: &[u8], sigs: &str) -> bool {
    let Ok(key) =
        base64::engine::general_purpose::STANDARD.decode(secret.trim_start_matches("whsec_"))
    else {
        return false;
    };
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(ts.as_bytes());
    mac.update(b".");
    mac.update(body);
    let want = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    sigs.split(' ')
        .any(|s| s.strip_prefix("v1,").is_some_and(|s| s == want))
}

/// The sender's attempts in flight per endpoint (`PMW_PUSH_WEBHOOK_MAX_IN_FLIGHT`, default 4).
pub const SENDER_SLOTS: usize = 4;

/// One open request of an endpoint, counted until the answer (or the sender's give-up) drops it.
struct Open {
    inner: Arc<Inner>,
    path: String,
}

impl Open {
    fn new(inner: &Arc<Inner>, path: &str) -> Open {
        let mut l = inner.log.lock().unwrap();
        let e = l.open.entry(path.to_string()).or_insert((0, 0));
        e.0 += 1;
        if e.0 == SENDER_SLOTS {
            e.1 = now_ms();
        }
        drop(l);
        Open {
            inner: inner.clone(),
            path: path.to_string(),
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut l = self.inner.log.lock().unwrap();
        let Some(e) = l.open.get_mut(&self.path) else {
            return;
        };
        let was_full = e.0 == SENDER_SLOTS;
        e.0 -= 1;
        let since = e.1;
        if was_full {
            l.saturated.push((self.path.clone(), since, now_ms()));
        }
    }
}

async fn handle(
    State(inner): State<Arc<Inner>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let arrived_ms = now_ms();
    let _open = Open::new(&inner, uri.path());
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (id, ts, sigs) = (
        h("webhook-id"),
        h("webhook-timestamp"),
        h("webhook-signature"),
    );
    let ok = inner
        .secrets
        .lock()
        .unwrap()
        .iter()
        .any(|s| verify(s, &id, &ts, &body, &sigs));
    let first = {
        let mut l = inner.log.lock().unwrap();
        l.requests += 1;
        if !ok {
            l.bad_signature += 1;
            return StatusCode::UNAUTHORIZED;
        }
        let first = l.seen_ids.insert(id.clone());
        if first {
            if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                if v["type"] == "trade" {
                    let at = now_ms();
                    let detect = v["t_detect_ms"].as_i64().unwrap_or(at);
                    l.first_attempts.push((uri.path().to_string(), detect, at));
                }
            }
        }
        first
    };
    let roll: f64 = if inner.faulty && first {
        inner.rng.lock().unwrap().gen()
    } else {
        1.0
    };
    if roll < 0.04 {
        inner.log.lock().unwrap().answered_500 += 1;
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    if roll < 0.05 {
        // Past the sender's 10 s timeout: it has given up and will retry.
        inner.log.lock().unwrap().timed_out += 1;
        tokio::time::sleep(Duration::from_secs(11)).await;
        return StatusCode::NO_CONTENT;
    }
    if roll < 0.15 {
        inner.log.lock().unwrap().slow += 1;
        tokio::time::sleep(Duration::from_millis(300 + (roll * 10_000.0) as u64)).await;
    }
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    inner.log.lock().unwrap().accepted.push(Accepted {
        path: uri.path().to_string(),
        webhook_id: id,
        body: v,
        arrived_ms,
        at_ms: now_ms(),
    });
    StatusCode::NO_CONTENT
}

impl Hook {
    /// A receiver on `ip` (loopback, or in multi-host mode the hosts' gateway, which the
    /// services on the hosts reach), any free port.
    pub async fn start(seed: u64, faulty: bool, ip: std::net::IpAddr) -> Hook {
        let inner = Arc::new(Inner {
            secrets: Mutex::default(),
            log: Mutex::default(),
            rng: Mutex::new(rand::rngs::StdRng::seed_from_u64(seed)),
            faulty,
        });
        let app = Router::new()
            .route("/hook", axum::routing::post(handle))
            .route("/hook/{n}", axum::routing::post(handle))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Hook { addr, inner }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Another endpoint's URL on this receiver (its messages are told apart by path).
    pub fn url_for(&self, n: usize) -> String {
        format!("http://{}/hook/{n}", self.addr)
    }

    pub fn add_secret(&self, s: &str) {
        self.inner.secrets.lock().unwrap().push(s.to_string());
    }

    pub fn accepted(&self) -> Vec<Accepted> {
        self.inner.log.lock().unwrap().accepted.clone()
    }

    pub fn with_log<T>(&self, f: impl FnOnce(&HookLog) -> T) -> T {
        f(&self.inner.log.lock().unwrap())
    }
}

/// What an endpoint holds, replaying its accepted messages in arrival order, deduplicated by
/// `webhook-id` (at least once is the contract).
#[derive(Default)]
pub struct HookState {
    pub held: BTreeMap<Id, i64>,
    /// Distinct `webhook-id`s for one trade without a retract between.
    pub duplicated: Vec<Id>,
    pub retract_without_trade: Vec<Id>,
    /// Trades arriving below an earlier one (informational: retries reorder by design).
    pub reordered: u64,
    /// The same `webhook-id` accepted again (allowed; deduplicated).
    pub redelivered: u64,
    pub deliveries: Vec<(i64, i64)>,
    pub longest_silence_ms: i64,
}

/// Per endpoint (request path), what it holds; several endpoints of one account each get
/// every trade, under distinct `webhook-id`s.
pub fn replay_each(accepted: &[Accepted]) -> Vec<(String, HookState)> {
    let mut by: BTreeMap<&str, Vec<Accepted>> = BTreeMap::new();
    for a in accepted {
        by.entry(a.path.as_str()).or_default().push(a.clone());
    }
    by.into_iter()
        .map(|(p, v)| (p.to_string(), replay(&v)))
        .collect()
}

pub fn replay(accepted: &[Accepted]) -> HookState {
    let mut s = HookState::default();
    let mut ids = HashSet::new();
    let mut last_pos = None;
    let mut last_at: Option<i64> = None;
    for a in accepted {
        if let Some(l) = last_at {
            s.longest_silence_ms = s.longest_silence_ms.max(a.at_ms - l);
        }
        last_at = Some(a.at_ms);
        if !ids.insert(a.webhook_id.clone()) {
            s.redelivered += 1;
            continue;
        }
        let Some((id, pos)) = identity(&a.body) else {
            continue;
        };
        match a.body["type"].as_str() {
            Some("trade") => {
                s.deliveries
                    .push((a.body["t_detect_ms"].as_i64().unwrap_or(a.at_ms), a.at_ms));
                if last_pos.is_some_and(|p| pos < p) {
                    s.reordered += 1;
                }
                last_pos = Some(pos);
                if s.held.insert(id.clone(), a.at_ms).is_some() {
                    s.duplicated.push(id);
                }
            }
            Some("retract") if s.held.remove(&id).is_none() => {
                s.retract_without_trade.push(id);
            }
            _ => {}
        }
    }
    s
}

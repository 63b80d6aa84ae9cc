//! The drills' WebSocket clients: each resumes by cursor after every disconnect (as `pmwctl
//! watch` does) and logs what it received, for the 0 lost / 0 duplicated / 0 out of order checks.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use pmw_core::Cursor;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub struct ClientLog {
    pub first_hello: Option<Cursor>,
    pub trades: Vec<Cursor>,
    pub duplicates: usize,
    pub out_of_order: usize,
    pub reconnects: usize,
    pub gaps_ms: Vec<u64>,
    /// Per trade frame: (received at, received − its `t_detect_ms`), ms: client-observed latency.
    pub observed_ms: Vec<(i64, i64)>,
}

/// A client that resumes by cursor after every disconnect, as `pmwctl watch` does.
/// No message (not even a heartbeat) for this long: the server is frozen.
const SILENCE: Duration = Duration::from_secs(3);

pub async fn resilient_client(
    url: String,
    key: String,
    log: Arc<Mutex<ClientLog>>,
    stop: CancellationToken,
) {
    let mut last: Option<Cursor> = None;
    let mut dropped_at: Option<Instant> = None;
    while !stop.is_cancelled() {
        let full = match last {
            Some(c) => format!("{url}?since={c}"),
            None => url.clone(),
        };
        let mut req = full.into_client_request().unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
        let ws = match tokio::time::timeout(
            Duration::from_secs(5),
            tokio_tungstenite::connect_async(req),
        )
        .await
        {
            Ok(Ok((ws, _))) => ws,
            _ => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (_sink, mut stream) = ws.split();
        loop {
            let msg = tokio::select! {
                m = stream.next() => m,
                _ = stop.cancelled() => return,
                // Drills beat every second: silence means a frozen server, as a client should
                // conclude from missing heartbeats. Reconnect (and resume).
                _ = tokio::time::sleep(SILENCE) => None,
            };
            let Some(Ok(msg)) = msg else { break };
            let Message::Text(t) = msg else {
                if matches!(msg, Message::Close(_)) {
                    break;
                }
                continue;
            };
            let v: serde_json::Value = serde_json::from_str(&t).unwrap();
            on_frame(&v, &mut log.lock().unwrap(), &mut last, &mut dropped_at);
        }
        dropped_at.get_or_insert_with(Instant::now);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Log one frame: a hello (the first is where the stream starts; one after a drop ends the
/// reconnect gap) or a trade (a duplicate, out of order, or in order); `last` is the resume point.
fn on_frame(
    v: &serde_json::Value,
    l: &mut ClientLog,
    last: &mut Option<Cursor>,
    dropped_at: &mut Option<Instant>,
) {
    match v["type"].as_str() {
        Some("hello") => {
            // No trade yet: the hello's cursor is where this stream starts, so it is the
            // resume point (without it, trades dispatched before a reconnect are missed).
            if last.is_none() {
                *last = v["cursor"].as_str().and_then(|c| c.parse().ok());
            }
            if l.first_hello.is_none() {
                l.first_hello = *last;
            }
            if let Some(at) = dropped_at.take() {
                l.gaps_ms.push(at.elapsed().as_millis() as u64);
                l.reconnects += 1;
            }
        }
        Some("trade") => {
            let c: Cursor = v["cursor"].as_str().unwrap().parse().unwrap();
            if let Some(detect) = v["t_detect_ms"].as_i64() {
                let now = pmw_core::UnixMs::now().0;
                l.observed_ms.push((now, now - detect));
            }
            if l.trades.contains(&c) {
                l.duplicates += 1;
            } else if last.is_some_and(|p| c < p) {
                l.out_of_order += 1;
                l.trades.push(c);
            } else {
                l.trades.push(c);
            }
            *last = Some(c);
        }
        _ => {}
    }
}

pub fn pct(v: &mut [u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

#[derive(Debug, Default)]
pub struct Figures {
    pub lost: usize,
    pub duplicated: usize,
    pub out_of_order: usize,
    pub reconnects: usize,
    pub frames: usize,
    pub gap_p50: u64,
    pub gap_p99: u64,
    pub gap_max: u64,
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "100 clients, {} frames, lost {}, duplicated {}, out of order {}, reconnects {}, reconnect gap p50 {} ms p99 {} ms max {} ms",
            self.frames, self.lost, self.duplicated, self.out_of_order, self.reconnects, self.gap_p50, self.gap_p99, self.gap_max
        )
    }
}

impl Figures {
    /// The drills' delivery verdict: every client got every trade of its wallets once, in order.
    #[track_caller]
    pub fn assert_clean(&self) {
        assert_eq!(
            (self.lost, self.duplicated, self.out_of_order),
            (0, 0, 0),
            "0 lost, 0 duplicated, 0 out of order for every drill client"
        );
    }
}

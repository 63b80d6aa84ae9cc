//! What a checked client or endpoint was sent of the pending tier, as the pending oracle
//! (`pending.rs`) reads it: each `pending` (first sighting), `void` and `trade`, in the order they
//! reached it (a WebSocket's frames; an endpoint's messages by arrival, each `webhook-id` once),
//! and every `pending` that came after its end.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use crate::hooks::Accepted;
use crate::ws::{identity, Id};

/// A `pending` as a client first got it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: i64,
    pub tx: String,
    pub order: String,
    pub wallet: String,
    /// The client's connection (hello count) it came on.
    pub conn: u64,
}

/// What one client got of the pending tier.
#[derive(Clone, Default)]
pub struct PendingLog {
    pub pendings: BTreeMap<i64, Seen>,
    /// pending id → (reason, receive ms, transaction hash).
    pub voids: BTreeMap<i64, (String, i64, String)>,
    /// pending id → the trade that named it (first), with its receive ms.
    pub confirmed: BTreeMap<i64, (Id, i64)>,
    /// (transaction hash, order hash) → every trade's identity and first receive ms (replayed
    /// trades do not carry `pending_id`).
    pub trades: HashMap<(String, String), (Id, i64)>,
    /// `pending` frames that came after their `trade` or `void`.
    pub after_end: Vec<i64>,
    /// `pending` frames sent again (the open ones, on every connect).
    pub resent: u64,
    /// Connections so far (hello frames).
    pub conn: u64,
}

fn lower(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_ascii_lowercase()
}

impl PendingLog {
    pub fn hello(&mut self) {
        self.conn += 1;
    }

    pub fn pending(&mut self, v: &Value, at: i64) {
        let Some(id) = v["pending_id"].as_i64() else {
            return;
        };
        let f = &v["fill"];
        let key = (lower(&f["tx_hash"]), lower(&f["order_hash"]));
        let traded_before = self.trades.get(&key).is_some_and(|(_, t)| *t <= at);
        if self.voids.contains_key(&id) || self.confirmed.contains_key(&id) || traded_before {
            self.after_end.push(id);
        }
        if self.pendings.contains_key(&id) {
            self.resent += 1;
            return;
        }
        let wallet = lower(&f["wallet"]).trim_start_matches("0x").to_string();
        let seen = Seen {
            at,
            tx: key.0,
            order: key.1,
            wallet,
            conn: self.conn,
        };
        self.pendings.insert(id, seen);
    }

    pub fn void(&mut self, v: &Value, at: i64) {
        if let Some(id) = v["pending_id"].as_i64() {
            let reason = v["reason"].as_str().unwrap_or_default().to_string();
            self.voids
                .entry(id)
                .or_insert((reason, at, lower(&v["tx_hash"])));
        }
    }

    pub fn trade(&mut self, v: &Value, at: i64) {
        let Some((id, _)) = identity(v) else { return };
        let t = &v["trade"];
        let key = (lower(&t["tx_hash"]), lower(&t["order_hash"]));
        self.trades.entry(key).or_insert((id.clone(), at));
        if let Some(p) = v["pending_id"].as_i64() {
            self.confirmed.entry(p).or_insert((id, at));
        }
    }
}

/// The pendings of `log` with neither their trade nor a void yet.
pub fn open_in(log: &PendingLog) -> usize {
    log.pendings
        .iter()
        .filter(|(id, p)| {
            !log.confirmed.contains_key(id)
                && !log.voids.contains_key(id)
                && !log.trades.contains_key(&(p.tx.clone(), p.order.clone()))
        })
        .count()
}

/// An endpoint's messages as a [`PendingLog`], in the order they reached the receiver, each
/// `webhook-id` once; and the trades it holds (received minus retracted) with their arrival.
pub fn hook_log(accepted: &[Accepted]) -> (PendingLog, Vec<(Id, i64)>) {
    let mut by_arrival: Vec<&Accepted> = accepted.iter().collect();
    by_arrival.sort_by_key(|a| a.arrived_ms);
    let (mut seen, mut log) = (HashSet::new(), PendingLog::default());
    let mut held: BTreeMap<Id, i64> = BTreeMap::new();
    log.hello();
    for a in by_arrival {
        if !seen.insert(a.webhook_id.as_str()) {
            continue;
        }
        let at = a.arrived_ms;
        match a.body["type"].as_str() {
            Some("pending") => log.pending(&a.body, at),
            Some("void") => log.void(&a.body, at),
            Some("trade") => {
                log.trade(&a.body, at);
                if let Some((id, _)) = identity(&a.body) {
                    held.entry(id).or_insert(at);
                }
            }
            Some("retract") => {
                if let Some((id, _)) = identity(&a.body) {
                    held.remove(&id);
                }
            }
            _ => {}
        }
    }
    (log, held.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn frame(kind: &str, id: i64, tx: &str, order: &str) -> Value {
        json!({"type": kind, "pending_id": id, "reason": "dropped", "tx_hash": tx,
            "fill": {"wallet": "0xAA", "tx_hash": tx, "order_hash": order}})
    }

    fn trade(block: u64, tx: &str, order: &str, pending_id: Option<i64>) -> Value {
        let mut v = json!({"type": "trade", "trade": {"block_number": block, "log_index": 0,
            "block_hash": "0x01", "tx_hash": tx, "order_hash": order}});
        if let Some(p) = pending_id {
            v["pending_id"] = json!(p);
        }
        v
    }

    #[test]
    fn a_pending_after_its_trade_or_void_is_caught_and_a_resent_open_one_is_not() {
        let mut log = PendingLog::default();
        log.hello();
        log.pending(&frame("pending", 1, "0xT1", "0xO1"), 10);
        log.pending(&frame("pending", 2, "0xT2", "0xO2"), 11);
        // A reconnect re-sends an open fill: not a breach.
        log.hello();
        log.pending(&frame("pending", 2, "0xT2", "0xO2"), 12);
        assert_eq!((log.after_end.clone(), log.resent), (vec![], 1));
        log.trade(&trade(5, "0xT1", "0xO1", Some(1)), 20);
        log.void(&frame("void", 2, "0xT2", "0xO2"), 21);
        log.pending(&frame("pending", 1, "0xT1", "0xO1"), 22);
        log.pending(&frame("pending", 2, "0xT2", "0xO2"), 23);
        // A replayed trade (no pending_id) of a third fill, then its pending: late too.
        log.trade(&trade(6, "0xT3", "0xO3", None), 24);
        log.pending(&frame("pending", 3, "0xt3", "0xo3"), 25);
        assert_eq!(log.after_end, vec![1, 2, 3]);
        assert_eq!(log.pendings[&1].wallet, "aa");
        assert_eq!(log.pendings[&1].conn, 1);
    }

    fn accepted(id: &str, arrived_ms: i64, at_ms: i64, body: Value) -> Accepted {
        Accepted {
            path: "/hook".into(),
            webhook_id: id.into(),
            body,
            arrived_ms,
            at_ms,
        }
    }

    #[test]
    fn an_endpoints_messages_are_judged_in_arrival_order_once_each() {
        let pending = frame("pending", 1, "0xT1", "0xO1");
        let trade = trade(5, "0xT1", "0xO1", Some(1));
        // The pending arrived first but was answered last (a slow answer), and came twice.
        let log = vec![
            accepted("t", 20, 21, trade.clone()),
            accepted("p", 10, 30, pending.clone()),
            accepted("p", 40, 41, pending.clone()),
        ];
        let (l, held) = hook_log(&log);
        assert!(l.after_end.is_empty(), "{:?}", l.after_end);
        assert_eq!((l.resent, l.pendings[&1].at), (0, 10));
        assert_eq!(held, vec![((5, 0, "0x01".to_string()), 20)]);
        // Arriving after its trade is a breach, and a retract takes the trade off.
        let mut retract = trade.clone();
        retract["type"] = json!("retract");
        let late = vec![
            accepted("t", 20, 21, trade),
            accepted("p", 25, 26, pending),
            accepted("r", 30, 31, retract),
        ];
        let (l, held) = hook_log(&late);
        assert_eq!(l.after_end, vec![1]);
        assert!(held.is_empty());
    }
}

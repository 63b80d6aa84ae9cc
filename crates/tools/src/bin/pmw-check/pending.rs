//! The pending tier's oracle (`--pending-hold-ms`, issue 43), from the chain and the checker's
//! own clients only: what each checked WebSocket client and webhook endpoint was sent of the
//! pending tier ([`PendingLog`], written from the README's frames, webhooks in arrival order),
//! the chain's pool as the checker itself watches it ([`ChainWatch`]: every transaction's sender
//! and nonce), and each settlement's receipt on the final chain. A `pending` must name a
//! settlement that was in the pool or mined, for a followed wallet; end in its `trade` (paired by
//! transaction or order hash) or a `void` whose reason the chain bears out; never arrive after
//! its end; and not be left open. Coverage and lead are measured per channel.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::hooks::Accepted;
use crate::oracle::{hex_u64, rpc};
pub use crate::pool::ChainWatch;
use crate::report::pct;
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
    conn: u64,
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

/// A settlement's receipt on the final chain: its status, or none (never mined, or orphaned).
async fn receipt(http: &reqwest::Client, url: &str, tx: &str) -> anyhow::Result<Option<u64>> {
    let r = rpc(http, url, "eth_getTransactionReceipt", json!([tx])).await?;
    if r.is_null() {
        return Ok(None);
    }
    Ok(Some(hex_u64(&r["status"])?))
}

/// What the oracle found over every checked client.
#[derive(Default)]
pub struct Judged {
    pub pendings: usize,
    pub confirmed: usize,
    pub voids: BTreeMap<String, usize>,
    pub after_end: usize,
    pub wrong_voids: usize,
    pub wrong_pairs: usize,
    pub phantom: usize,
    pub left_open: usize,
    /// Open at the end, and the client reconnected since (a resume is sent the voids since its
    /// resume point, so this fails the run too; counted apart to tell the two paths).
    pub open_across_reconnect: usize,
    /// A `reverted` void whose transaction the final chain no longer holds (a reorg orphaned it).
    pub unjudged: usize,
    pub owed_trades: usize,
    pub covered: usize,
    pub leads: Vec<i64>,
    pub examples: Vec<String>,
}

impl Judged {
    pub fn failed(&self) -> bool {
        self.after_end
            + self.wrong_voids
            + self.wrong_pairs
            + self.phantom
            + self.left_open
            + self.open_across_reconnect
            > 0
            || self.confirmed == 0
            || self.voids.values().sum::<usize>() == 0
    }

    /// This channel's row of the table.
    fn row(&mut self, channel: &str) -> String {
        let voids: Vec<String> = self.voids.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let coverage = 100.0 * self.covered as f64 / self.owed_trades.max(1) as f64;
        let (p50, p90) = (pct(&mut self.leads, 0.5), pct(&mut self.leads, 0.9));
        format!(
            "| {channel} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {coverage:.1} % ({} of {}) | {p50} / {p90} ms |\n",
            self.pendings,
            self.confirmed,
            if voids.is_empty() { "0".into() } else { voids.join(", ") },
            self.after_end,
            self.wrong_voids,
            self.wrong_pairs,
            self.phantom,
            self.left_open,
            self.open_across_reconnect,
            self.unjudged,
            self.covered,
            self.owed_trades,
        )
    }
}

/// Each channel's verdict.
pub struct Verdict(pub Vec<(&'static str, Judged)>);

impl Verdict {
    pub fn failed(&self) -> bool {
        self.0.iter().any(|(_, j)| j.failed())
    }

    /// The table, a row per channel, and the examples of what failed.
    pub fn report(&mut self) -> String {
        let mut s = String::from(
            "| channel | pendings | confirmed | voided | after its end | wrong void | wrong pair | phantom | left open | open across a reconnect | unjudged | coverage | lead p50 / p90 |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for (channel, j) in &mut self.0 {
            s += &j.row(channel);
        }
        for (_, j) in &self.0 {
            for e in j.examples.iter().take(10) {
                let _ = writeln!(s, "- {e}");
            }
        }
        s
    }
}

/// One checked client's pending tier against the chain: `wallets` it follows, `held` the trades
/// it holds of those it is owed (with their receive ms).
pub struct Channel<'a> {
    pub who: String,
    pub wallets: &'a [String],
    pub log: PendingLog,
    pub held_owed: Vec<(Id, i64)>,
}

/// Judge every channel; receipts are read once per transaction.
pub async fn judge(
    url: &str,
    watch: &ChainWatch,
    channels: Vec<Channel<'_>>,
) -> anyhow::Result<Judged> {
    let http = reqwest::Client::new();
    let mut receipts: HashMap<String, Option<u64>> = HashMap::new();
    let mut out = Judged::default();
    for c in channels {
        let txs = c.log.pendings.values().map(|p| p.tx.clone());
        for tx in txs.chain(c.log.voids.values().map(|v| v.2.clone())) {
            if let std::collections::hash_map::Entry::Vacant(e) = receipts.entry(tx) {
                let r = receipt(&http, url, e.key()).await?;
                e.insert(r);
            }
        }
        judge_channel(&c, watch, &receipts, &http, url, &mut out).await?;
    }
    Ok(out)
}

async fn judge_channel(
    c: &Channel<'_>,
    watch: &ChainWatch,
    receipts: &HashMap<String, Option<u64>>,
    http: &reqwest::Client,
    url: &str,
    out: &mut Judged,
) -> anyhow::Result<()> {
    let log = &c.log;
    out.pendings += log.pendings.len();
    out.after_end += log.after_end.len();
    if let Some(id) = log.after_end.first() {
        out.examples
            .push(format!("{}: pending {id} after its end", c.who));
    }
    for (id, p) in &log.pendings {
        let mined = receipts.get(&p.tx).copied().flatten();
        if !c.wallets.contains(&p.wallet) || (mined.is_none() && watch.sender(&p.tx).is_none()) {
            out.phantom += 1;
            out.examples
                .push(format!("{}: phantom pending {id} ({p:?})", c.who));
            continue;
        }
        let trade = log
            .confirmed
            .get(id)
            .cloned()
            .or_else(|| log.trades.get(&(p.tx.clone(), p.order.clone())).cloned());
        if let Some((tid, _)) = &trade {
            out.confirmed += 1;
            let paired = log
                .trades
                .iter()
                .any(|((tx, order), (t, _))| t == tid && (*tx == p.tx || *order == p.order));
            if !paired {
                out.wrong_pairs += 1;
                out.examples
                    .push(format!("{}: pending {id} paired with {tid:?}", c.who));
            }
        } else if !log.voids.contains_key(id) {
            if p.conn < log.conn {
                out.open_across_reconnect += 1;
                out.examples.push(format!(
                    "{}: pending {id} left open across a reconnect ({p:?})",
                    c.who
                ));
            } else {
                out.left_open += 1;
                out.examples
                    .push(format!("{}: pending {id} left open ({p:?})", c.who));
            }
        }
    }
    for (id, (reason, _, tx)) in &log.voids {
        *out.voids.entry(reason.clone()).or_default() += 1;
        let mined = receipts.get(tx).copied().flatten();
        let used = if reason == "replaced" {
            nonce_used(watch.sender(tx), http, url).await?
        } else {
            None
        };
        match void_right(reason, mined, used) {
            Some(true) => {}
            Some(false) => {
                out.wrong_voids += 1;
                out.examples.push(format!(
                    "{}: void {id} `{reason}` of {tx}, but its receipt says {mined:?}",
                    c.who
                ));
            }
            None => out.unjudged += 1,
        }
    }
    coverage(c, out);
    Ok(())
}

/// Whether the chain bears out a `void` of `reason` for a transaction whose final receipt
/// status is `mined` (none: not on the final chain) and whose sender's nonce another transaction
/// used (`nonce_used`; none: the pool watch never saw its sender). None: it cannot be judged.
pub fn void_right(reason: &str, mined: Option<u64>, nonce_used: Option<bool>) -> Option<bool> {
    // A settlement that mined with status 1 did happen: no void of it is right.
    if mined == Some(1) {
        return Some(false);
    }
    match reason {
        "reverted" => mined.map(|s| s == 0),
        // Never mined itself, and its nonce taken by another.
        "replaced" if mined.is_some() => Some(false),
        "replaced" => nonce_used,
        // Gone from the pool: never mined itself (its nonce may have been used since).
        "dropped" => Some(mined.is_none()),
        // Not mined within the bound: a late revert is not a wrong void.
        "expired" => Some(true),
        _ => Some(false),
    }
}

/// Whether `sender`'s nonce was used on the final chain (none: sender not known).
async fn nonce_used(
    sender: Option<(String, u64)>,
    http: &reqwest::Client,
    url: &str,
) -> anyhow::Result<Option<bool>> {
    let Some((from, nonce)) = sender else {
        return Ok(None);
    };
    let count = rpc(
        http,
        url,
        "eth_getTransactionCount",
        json!([from, "latest"]),
    )
    .await?;
    Ok(Some(hex_u64(&count)? > nonce))
}

/// Coverage (owed trades held that had their `pending` first) and lead (the pending's receive
/// time before its trade's).
fn coverage(c: &Channel<'_>, out: &mut Judged) {
    let log = &c.log;
    let mut first: HashMap<&Id, i64> = HashMap::new();
    for (id, p) in &log.pendings {
        let trade = log
            .confirmed
            .get(id)
            .or_else(|| log.trades.get(&(p.tx.clone(), p.order.clone())));
        if let Some((tid, _)) = trade {
            first.entry(tid).or_insert(p.at);
        }
    }
    for (tid, t_at) in &c.held_owed {
        out.owed_trades += 1;
        if let Some(p_at) = first.get(tid).filter(|p| **p < *t_at) {
            out.covered += 1;
            out.leads.push(t_at - p_at);
        }
    }
}

/// The simulator's world with the pending tier on: every match is the real settlement call, held
/// in anvil's pool `hold_ms` before it is mined, and a few are doomed (revert), replaced or
/// dropped, as in `scripts/dev`.
pub fn sim_config(hold_ms: u64) -> pmw_sim::SimConfig {
    pmw_sim::SimConfig {
        settle: true,
        revert_share: 0.05,
        replace_share: 0.05,
        drop_share: 0.05,
        hold_ms,
        ..pmw_sim::SimConfig::default()
    }
}

/// pmw-live's environment with the mempool watcher on, watching the simulator's fee modules.
pub fn live_env() -> Vec<(&'static str, &'static str)> {
    let modules = pmw_sim::settlement::fee_modules_setting();
    vec![
        ("PMW_LIVE_MEMPOOL", "true"),
        // Leaked once per run: the drill's environment takes static strings.
        (
            "PMW_LIVE_MEMPOOL_FEE_MODULES",
            Box::leak(modules.into_boxed_str()),
        ),
    ]
}

/// Judge the checked clients' and endpoints' pending tier (`owed`: what each is owed, from the
/// chain).
pub async fn judge_world(
    w: &crate::faults::World,
    watch: &ChainWatch,
    owed: &[std::collections::BTreeSet<Id>],
) -> anyhow::Result<Verdict> {
    let ws = w
        .checked
        .iter()
        .zip(owed)
        .enumerate()
        .map(|(i, (c, owed))| {
            let l = c.client.log.lock().unwrap();
            Channel {
                who: format!("check-{i} ws"),
                wallets: &c.wallets,
                log: l.pending.clone(),
                held_owed: l
                    .held
                    .iter()
                    .filter(|(id, _)| owed.contains(*id))
                    .map(|(id, at)| (id.clone(), *at))
                    .collect(),
            }
        })
        .collect();
    let hooks = w
        .checked
        .iter()
        .zip(owed)
        .enumerate()
        .map(|(i, (c, owed))| {
            let (log, held) = hook_log(&c.hook.accepted());
            Channel {
                who: format!("check-{i} webhook"),
                wallets: &c.wallets,
                log,
                held_owed: held
                    .into_iter()
                    .filter(|(id, _)| owed.contains(id))
                    .collect(),
            }
        })
        .collect();
    let url = w.d.anvil.http_url();
    Ok(Verdict(vec![
        ("WebSocket", judge(&url, watch, ws).await?),
        ("webhooks", judge(&url, watch, hooks).await?),
    ]))
}

/// An endpoint's messages as a [`PendingLog`], in the order they reached the receiver, each
/// `webhook-id` once; and the trades it holds (received minus retracted) with their arrival.
fn hook_log(accepted: &[Accepted]) -> (PendingLog, Vec<(Id, i64)>) {
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

    #[test]
    fn each_void_reason_is_judged_by_the_receipt_and_the_nonce() {
        // A settlement that mined with status 1 is never rightly voided.
        for r in ["reverted", "replaced", "dropped", "expired"] {
            assert_eq!(void_right(r, Some(1), Some(true)), Some(false), "{r}");
        }
        assert_eq!(void_right("reverted", Some(0), None), Some(true));
        assert_eq!(void_right("reverted", None, None), None);
        assert_eq!(void_right("replaced", None, Some(true)), Some(true));
        assert_eq!(void_right("replaced", None, Some(false)), Some(false));
        assert_eq!(void_right("replaced", Some(0), Some(true)), Some(false));
        assert_eq!(void_right("replaced", None, None), None);
        assert_eq!(void_right("dropped", None, Some(true)), Some(true));
        assert_eq!(void_right("dropped", Some(0), None), Some(false));
        assert_eq!(void_right("expired", Some(0), None), Some(true));
        assert_eq!(void_right("vanished", None, None), Some(false));
    }
}

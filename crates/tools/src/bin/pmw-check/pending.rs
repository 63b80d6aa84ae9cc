//! The pending tier's oracle (`--pending-hold-ms`, issue 43), from the chain and the checker's
//! own clients only: what each checked WebSocket client and webhook endpoint was sent of the
//! pending tier ([`PendingLog`], written from the README's frames, webhooks in arrival order),
//! the chain's pool as the checker itself watches it ([`ChainWatch`]: every transaction's sender
//! and nonce), and each settlement's receipt on the final chain. A `pending` must name a
//! settlement that was in the pool or mined, for a followed wallet; end in its `trade` (paired by
//! transaction or order hash) or a `void` whose reason the chain bears out; never arrive after
//! its end; and not be left open. Coverage and lead are measured per channel.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde_json::json;

use crate::oracle::{hex_u64, rpc};
use crate::pending_log::{hook_log, open_in, PendingLog};
pub use crate::pool::ChainWatch;
use crate::report::pct;
use crate::ws::Id;

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

/// The trades `log` holds that share the transaction or the order of `p` (what a left-open
/// pending's example names, to tell a missing end from a mispairing).
fn near(log: &PendingLog, p: &crate::pending_log::Seen) -> String {
    let same: Vec<String> = log
        .trades
        .iter()
        .filter(|((tx, order), _)| *tx == p.tx || *order == p.order)
        .map(|((tx, order), (id, at))| format!("trade {id:?} at {at} of tx {tx} order {order}"))
        .collect();
    if same.is_empty() {
        "no trade of its transaction or order".into()
    } else {
        same.join("; ")
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
            let why = format!("{p:?}; receipt {mined:?}; {}", near(log, p));
            if p.conn < log.conn {
                out.open_across_reconnect += 1;
                out.examples.push(format!(
                    "{}: pending {id} left open across a reconnect ({why})",
                    c.who
                ));
            } else {
                out.left_open += 1;
                out.examples
                    .push(format!("{}: pending {id} left open ({why})", c.who));
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

/// Pendings still open on the checked channels.
fn open_count(w: &crate::faults::World) -> usize {
    w.checked
        .iter()
        .map(|c| {
            let ws = open_in(&c.client.log.lock().unwrap().pending);
            ws + open_in(&hook_log(&c.hook.accepted()).0)
        })
        .sum()
}

/// After the trades settled, with the pending tier on: while a checked channel holds a pending
/// with neither its trade nor a void, mine an empty block every 300 ms (the last settlements'
/// voids need the watermark to move: `dropped` after 3 blocks, `expired` after 30) until none is
/// open or `bound` passes. A block is mined only while the pool is empty, so no fill is added
/// after the oracle read the chain.
pub async fn settle(w: &crate::faults::World, bound: std::time::Duration) -> anyhow::Result<()> {
    if w.pending.is_none() {
        return Ok(());
    }
    let (url, http) = (w.d.anvil.http_url(), reqwest::Client::new());
    let until = std::time::Instant::now() + bound;
    let mut mined = 0;
    while open_count(w) > 0 && std::time::Instant::now() < until {
        let pool = rpc(&http, &url, "txpool_status", json!([])).await?;
        let waiting =
            hex_u64(&pool["pending"]).unwrap_or(1) + hex_u64(&pool["queued"]).unwrap_or(1);
        if waiting == 0 {
            rpc(&http, &url, "evm_mine", json!([])).await?;
            mined += 1;
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let open = open_count(w);
    println!("pending tier settled: {open} open, {mined} empty blocks mined for the last voids");
    Ok(())
}

/// With the pending tier on: every checked channel judged, then the pool watch stopped.
pub async fn judge_run(
    w: &crate::faults::World,
    owed: &[std::collections::BTreeSet<Id>],
) -> anyhow::Result<Option<Verdict>> {
    let Some(watch) = &w.pending else {
        return Ok(None);
    };
    let judged = judge_world(w, watch, owed).await;
    watch.stop();
    judged.map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! The pending tier's figures (issue 43), the bench's last step: the bench's anvil switched to
//! 2 s interval mining, pmw-sim in settle mode (the real V1/V2 settlement calls wait in the pool
//! until the next block; 2 % each revert, are replaced, are dropped), a fresh push leader and
//! sessions opted in (`events=trade,pending`). Two windows of the same load: pmw-live without,
//! then with, its mempool watcher. Measured on the client: the trade lane's header→received in
//! each window, the pending's lead over its trade, seen-in-pool→pushed (`t_push_ms − t_seen_ms`,
//! both pmw's stamps) and seen→received, coverage (trades whose `pending` came first), the voids
//! by reason, and wrong voids (a void of a settlement whose receipt has status 1).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::clients::{now_us, open};
use crate::setup::Bench;
use crate::stats::{ms, ratio, Summary};
use crate::Plan;

/// The block time of the pending step, s (Polygon's, as the goals assume).
pub const BLOCK_TIME_S: u64 = 2;

/// One frame a session got.
#[derive(Debug, Clone)]
struct Frame {
    kind: String,
    recv_us: i64,
    pending_id: Option<i64>,
    block: u64,
    t_detect_ms: i64,
    t_seen_ms: i64,
    t_push_ms: i64,
    tx: String,
    reason: String,
}

impl Frame {
    fn parse(text: &str, recv_us: i64) -> Option<Frame> {
        let v: Value = serde_json::from_str(text).ok()?;
        let kind = v["type"].as_str()?.to_string();
        let tx = v["fill"]["tx_hash"]
            .as_str()
            .or(v["tx_hash"].as_str())
            .or(v["trade"]["tx_hash"].as_str())
            .unwrap_or_default()
            .to_ascii_lowercase();
        Some(Frame {
            kind,
            recv_us,
            pending_id: v["pending_id"].as_i64(),
            block: v["trade"]["block_number"].as_u64().unwrap_or(0),
            t_detect_ms: v["t_detect_ms"].as_i64().unwrap_or(0),
            t_seen_ms: v["t_seen_ms"].as_i64().unwrap_or(0),
            t_push_ms: v["t_push_ms"].as_i64().unwrap_or(0),
            tx,
            reason: v["reason"].as_str().unwrap_or_default().to_string(),
        })
    }
}

/// What one window measured.
#[derive(Debug, Default, Clone)]
pub struct Window {
    /// Trade frames: client-observed header→received.
    pub trades: Option<Summary>,
    pub fills: usize,
    pub blocks: u64,
    /// pmw-live's detect→stored (blocks with trades, `ingest_latency`): where a shift of the
    /// trade lane comes from, ingest or push.
    pub stored: Option<Summary>,
}

/// The step's figures.
#[derive(Debug, Default, Clone)]
pub struct PendingStep {
    pub sessions: usize,
    pub off: Window,
    pub on: Window,
    /// A trade's receive time minus its `pending`'s, same session, ms.
    pub lead: Option<Summary>,
    pub lead_p90: Option<f64>,
    pub seen_pushed: Option<Summary>,
    pub seen_received: Option<Summary>,
    /// (trades whose `pending` came first on that session, trades) in the tier-on window.
    pub coverage: (usize, usize),
    pub voids: BTreeMap<String, usize>,
    pub wrong_voids: usize,
    /// Settlements the simulator sent in the tier-on window, and what became of them.
    pub settlements: BTreeMap<String, usize>,
    pub pendings: usize,
}

/// Sessions opted in to the pending tier, recording every frame.
struct Sessions {
    frames: Arc<Mutex<Vec<Vec<Frame>>>>,
    stop: CancellationToken,
}

impl Sessions {
    async fn open(url: &str, keys: &[String]) -> anyhow::Result<Sessions> {
        let frames = Arc::new(Mutex::new(vec![Vec::new(); keys.len()]));
        let stop = CancellationToken::new();
        for (i, key) in keys.iter().enumerate() {
            let Some(mut ws) = open(url, key).await else {
                anyhow::bail!("pending step: session {i} did not open");
            };
            let (frames, stop) = (frames.clone(), stop.clone());
            tokio::spawn(async move {
                loop {
                    let msg = tokio::select! {
                        m = ws.next() => m,
                        _ = stop.cancelled() => return,
                    };
                    let recv = now_us();
                    match msg {
                        Some(Ok(Message::Text(t))) => {
                            if let Some(f) = Frame::parse(t.as_str(), recv) {
                                frames.lock().unwrap()[i].push(f);
                            }
                        }
                        Some(Ok(_)) => {}
                        _ => return,
                    }
                }
            });
        }
        Ok(Sessions { frames, stop })
    }

    fn marks(&self) -> Vec<usize> {
        self.frames.lock().unwrap().iter().map(Vec::len).collect()
    }

    /// Every session's frames since `marks`.
    fn since(&self, marks: &[usize]) -> Vec<Vec<Frame>> {
        let all = self.frames.lock().unwrap();
        all.iter()
            .zip(marks)
            .map(|(f, m)| f[*m..].to_vec())
            .collect()
    }
}

impl Drop for Sessions {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The step: see the module's doc.
pub async fn step(b: &mut Bench, plan: &Plan) -> anyhow::Result<PendingStep> {
    b.sim
        .rpc()
        .call::<Value>("evm_setIntervalMining", json!([BLOCK_TIME_S]))
        .await?;
    let settle = pmw_sim::Sim::connect_with(
        &b.anvil.http_url(),
        pmw_sim::SimConfig {
            wallets: b.wallets.clone(),
            markets: b.sim.config().markets.clone(),
            settle: true,
            revert_share: 0.02,
            replace_share: 0.02,
            drop_share: 0.02,
            ..pmw_sim::SimConfig::default()
        },
    )
    .await?;
    settle.install_emitters().await?;
    let push = b.start_push(None).await?;
    let keys: Vec<String> = b.ws_accounts[..plan.pending_sessions.min(b.ws_accounts.len())]
        .iter()
        .map(|a| a.key.clone())
        .collect();
    let url = format!("ws://{}/v1/ws?events=trade,pending", push.addr);
    let sessions = Sessions::open(&url, &keys).await?;
    let mut out = PendingStep {
        sessions: keys.len(),
        ..PendingStep::default()
    };
    // A warm-up batch, then the tier-off window.
    window(b, &settle, plan, Duration::from_secs(2 * BLOCK_TIME_S)).await?;
    let marks = sessions.marks();
    let from_ms = pmw_core::UnixMs::now().0;
    let (after, upto, _) = window(b, &settle, plan, plan.pending_window).await?;
    out.off = summarize(&sessions.since(&marks), after, upto);
    out.off.stored = stored(b, from_ms).await?;
    // The tier on: pmw-live again, with its mempool watcher.
    if let Some(live) = b.live.take() {
        live.stop().await?;
    }
    b.start_live_with(mempool_env()).await?;
    window(b, &settle, plan, Duration::from_secs(2 * BLOCK_TIME_S)).await?;
    let marks = sessions.marks();
    let sent_from = settle.settlements().len();
    let from_ms = pmw_core::UnixMs::now().0;
    let (after, upto, fills) = window(b, &settle, plan, plan.pending_window).await?;
    let frames = sessions.since(&marks);
    out.on = summarize(&frames, after, upto);
    out.on.fills = fills;
    out.on.stored = stored(b, from_ms).await?;
    for s in &settle.settlements()[sent_from..] {
        let outcome = serde_json::to_value(s.outcome)?;
        *out.settlements
            .entry(outcome.as_str().unwrap_or_default().to_string())
            .or_default() += 1;
    }
    pending_figures(&frames, after, upto, &mut out);
    out.wrong_voids = wrong_voids(settle.rpc(), &frames).await?;
    drop(sessions);
    push.svc.stop().await?;
    Ok(out)
}

/// pmw-live's mempool watcher on, watching the simulator's fee modules.
fn mempool_env() -> Vec<(String, String)> {
    let modules = pmw_sim::settlement::fee_modules_setting();
    vec![
        ("PMW_LIVE_MEMPOOL".into(), "true".into()),
        ("PMW_LIVE_MEMPOOL_FEE_MODULES".into(), modules),
    ]
}

/// One simulator run of `d` in settle mode, then wait until push reached its last block and the
/// frames settled: (after, upto, fills mined).
async fn window(
    b: &Bench,
    settle: &pmw_sim::Sim,
    plan: &Plan,
    d: Duration,
) -> anyhow::Result<(u64, u64, usize)> {
    let after = b.head().await?;
    let from = settle.emitted().len();
    let run = pmw_sim::RunConfig {
        matches_per_block: plan.matches_per_block,
        interval: Duration::ZERO,
        count: None,
        duration: Some(d),
    };
    settle.spawn(run, CancellationToken::new()).await??;
    let upto = b.head().await?;
    b.wait_pushed(upto, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let fills = settle.emitted()[from..]
        .iter()
        .filter(|e| !e.orphaned && e.block_number > after)
        .count();
    Ok((after, upto, fills))
}

/// pmw-live's detect→stored of the blocks with trades detected since `from_ms`.
async fn stored(b: &Bench, from_ms: i64) -> anyhow::Result<Option<Summary>> {
    let to_ms = pmw_core::UnixMs::now().0;
    Ok(crate::ingest::stages(&b.db.ch, "pending", from_ms, to_ms)
        .await?
        .stored_trades)
}

/// The trade lane's client-observed header→received over blocks `(after, upto]`.
fn summarize(frames: &[Vec<Frame>], after: u64, upto: u64) -> Window {
    let lat: Vec<f64> = frames
        .iter()
        .flatten()
        .filter(|f| f.kind == "trade" && f.block > after && f.block <= upto)
        .map(|f| (f.recv_us - f.t_detect_ms * 1_000) as f64 / 1_000.0)
        .collect();
    Window {
        trades: Summary::of(&lat),
        fills: 0,
        blocks: upto - after,
        stored: None,
    }
}

/// Lead, seen→pushed, seen→received, coverage and voids of the tier-on window's frames.
fn pending_figures(frames: &[Vec<Frame>], after: u64, upto: u64, out: &mut PendingStep) {
    let (mut lead, mut pushed, mut received) = (Vec::new(), Vec::new(), Vec::new());
    for session in frames {
        let mut first: HashMap<i64, i64> = HashMap::new();
        for f in session {
            match f.kind.as_str() {
                "pending" => {
                    let id = f.pending_id.unwrap_or_default();
                    if first.insert(id, f.recv_us).is_none() {
                        out.pendings += 1;
                        pushed.push((f.t_push_ms - f.t_seen_ms) as f64);
                        received.push((f.recv_us - f.t_seen_ms * 1_000) as f64 / 1_000.0);
                    }
                }
                "void" => *out.voids.entry(f.reason.clone()).or_default() += 1,
                "trade" if f.block > after && f.block <= upto => {
                    out.coverage.1 += 1;
                    let p = f.pending_id.and_then(|id| first.get(&id));
                    if let Some(p_us) = p.filter(|p| **p < f.recv_us) {
                        out.coverage.0 += 1;
                        lead.push((f.recv_us - p_us) as f64 / 1_000.0);
                    }
                }
                _ => {}
            }
        }
    }
    out.lead = Summary::of(&lead);
    lead.sort_by(f64::total_cmp);
    out.lead_p90 = (!lead.is_empty()).then(|| crate::stats::rank(&lead, 0.9));
    out.seen_pushed = Summary::of(&pushed);
    out.seen_received = Summary::of(&received);
}

/// Voids of settlements whose receipt says status 1 (they did happen), by the chain.
async fn wrong_voids(rpc: &pmw_sim::rpc::Rpc, frames: &[Vec<Frame>]) -> anyhow::Result<usize> {
    let mut status: HashMap<String, Option<u64>> = HashMap::new();
    let mut wrong = 0;
    for f in frames.iter().flatten().filter(|f| f.kind == "void") {
        if !status.contains_key(&f.tx) {
            let r: Value = rpc.call("eth_getTransactionReceipt", json!([f.tx])).await?;
            let s = r["status"]
                .as_str()
                .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok());
            status.insert(f.tx.clone(), s);
        }
        if status[&f.tx] == Some(1) {
            wrong += 1;
        }
    }
    Ok(wrong)
}

/// The report's section (between `<!-- bench:pending -->` markers), with the goals.
pub fn render(p: &PendingStep) -> String {
    let mut s = format!(
        "{} sessions opted in (`events=trade,pending`), anvil mining every {BLOCK_TIME_S} s, pmw-sim in settle mode (each batch sent as a block lands: a settlement waits about a whole block in the pool, the lead's most favourable case); two windows of the same load, pmw-live's mempool watcher off then on.\n\n| figure | measured | goal |\n|---|---|---|\n",
        p.sessions
    );
    for (figure, measured, goal) in rows(p) {
        let _ = writeln!(s, "| {figure} | {measured} | {goal} |");
    }
    s
}

/// A table row: figure, measured, goal.
type Row = (&'static str, String, &'static str);

/// The table's rows: the latencies, then what became of the settlements.
fn rows(p: &PendingStep) -> Vec<Row> {
    let mut out = latency_rows(p);
    out.extend(outcome_rows(p));
    out
}

fn p50(x: &Option<Summary>) -> Option<f64> {
    x.map(|x| x.p50)
}

fn p99(x: &Option<Summary>) -> Option<f64> {
    x.map(|x| x.p99)
}

/// The relative change of `on` over `off`, as `+8.4 %` (a dash without both).
fn shift(on: Option<f64>, off: Option<f64>) -> String {
    match (on, off) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:+.1} %", 100.0 * (a - b) / b),
        _ => "–".into(),
    }
}

/// Lead, seen→pushed and seen→received, and the trade lane and ingest with the tier off and on.
fn latency_rows(p: &PendingStep) -> Vec<Row> {
    let (off, on) = (p50(&p.off.trades), p50(&p.on.trades));
    let both = |w: &Window| format!("{} / {}", ms(p50(&w.stored)), ms(p99(&w.stored)));
    vec![
        (
            "pending received before its trade, p50 (p90 of the lead)",
            format!("{} ({})", ms(p50(&p.lead)), ms(p.lead_p90)),
            "≥ 1500 ms",
        ),
        (
            "seen in the pool → pushed, p50 / p99 (pmw's stamps)",
            format!("{} / {}", ms(p50(&p.seen_pushed)), ms(p99(&p.seen_pushed))),
            "p50 ≤ 10 ms",
        ),
        (
            "seen in the pool → received, p50",
            ms(p50(&p.seen_received)),
            "",
        ),
        (
            "trade lane header→received p50 / p99, tier off",
            format!("{} / {}", ms(off), ms(p99(&p.off.trades))),
            "",
        ),
        (
            "trade lane header→received p50 / p99, tier on",
            format!(
                "{} / {} ({}; on ÷ off {})",
                ms(on),
                ms(p99(&p.on.trades)),
                shift(on, off),
                ratio(on, off)
            ),
            "within 10 % of off",
        ),
        (
            "of which pmw-live's header→stored p50 / p99 (off; on)",
            format!("{}; {}", both(&p.off), both(&p.on)),
            "",
        ),
    ]
}

/// Coverage, voids, wrong voids, and the windows' blocks, fills and settlements.
fn outcome_rows(p: &PendingStep) -> Vec<Row> {
    let list = |m: &BTreeMap<String, usize>| {
        let v: Vec<String> = m.iter().map(|(r, n)| format!("{r} {n}")).collect();
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    let cov = 100.0 * p.coverage.0 as f64 / p.coverage.1.max(1) as f64;
    vec![
        (
            "coverage: trades whose pending came first",
            format!("{cov:.1} % ({} of {})", p.coverage.0, p.coverage.1),
            "≥ 99 %",
        ),
        ("voids by reason (frames)", list(&p.voids), ""),
        (
            "wrong voids (settlement mined with status 1)",
            p.wrong_voids.to_string(),
            "0",
        ),
        (
            "blocks per window (off / on), fills mined in the tier-on window",
            format!("{} / {}, {}", p.off.blocks, p.on.blocks, p.on.fills),
            "",
        ),
        (
            "settlements sent in the tier-on window",
            list(&p.settlements),
            "",
        ),
    ]
}

const MARKS: (&str, &str) = ("<!-- bench:pending -->", "<!-- /bench:pending -->");

/// The report's section: a title, and the figures between their markers.
pub fn section(p: &PendingStep, when: &str) -> String {
    format!(
        "## Pending tier (mempool)\n\n{}\n{}\n{}\n\n",
        MARKS.0,
        body(p, when),
        MARKS.1
    )
}

fn body(p: &PendingStep, when: &str) -> String {
    format!("Measured {when}.\n\n{}", render(p))
}

/// `--only-pending`: the figures written between the markers of `out` (printed too).
pub fn write_section(out: &std::path::Path, p: &PendingStep, when: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let when = format!(
        "{when} by `scripts/bench --only-pending` (release build; the rest of this report may be an earlier full run)"
    );
    let body = body(p, &when);
    println!("{body}");
    let new = match (text.find(MARKS.0), text.find(MARKS.1)) {
        (Some(i), Some(j)) if i < j => {
            format!("{}{}\n{body}\n{}", &text[..i], MARKS.0, &text[j..])
        }
        _ => format!("{text}\n{}", section(p, &when)),
    };
    std::fs::write(out, new)?;
    eprintln!("pmw-bench: wrote the pending section of {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(p50: f64, p99: f64) -> Option<Summary> {
        Some(Summary {
            n: 1,
            p50,
            p95: p99,
            p99,
            max: p99,
        })
    }

    #[test]
    fn the_table_shows_the_shift_coverage_and_what_became_of_each_settlement() {
        let mut p = PendingStep {
            coverage: (99, 100),
            ..PendingStep::default()
        };
        p.off.trades = summary(10.0, 20.0);
        p.on.trades = summary(11.0, 22.0);
        p.voids.insert("replaced".into(), 3);
        p.voids.insert("reverted".into(), 2);
        let rows = rows(&p);
        let row = |f: &str| rows.iter().find(|r| r.0.starts_with(f)).unwrap().1.clone();
        assert_eq!(
            row("trade lane header→received p50 / p99, tier on"),
            "11.0 ms / 22.0 ms (+10.0 %; on ÷ off 1.1×)"
        );
        assert_eq!(row("coverage"), "99.0 % (99 of 100)");
        assert_eq!(row("voids by reason"), "replaced 3, reverted 2");
        assert_eq!(row("settlements sent"), "none");
        assert_eq!(shift(None, Some(1.0)), "–");
        assert_eq!(rows.len(), 11);
    }
}

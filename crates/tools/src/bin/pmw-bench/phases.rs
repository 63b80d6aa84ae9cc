//! The latency phases (pmw as built, and the seed's design as the baseline, in the same run and
//! with the same load) and the fan-out steps. Each measured window is a simulator run: the trades
//! of its blocks `(after, upto]`, received by clients that were connected before it started. A
//! latency phase measures `Plan::repeats` windows back to back: their pooled percentiles, and each
//! window's, whose median (with its spread) is the headline.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmw_core::Address;

use crate::clients::{Collector, Fleet, Sample};
use crate::setup::{Account, Bench, Run};
use crate::stats::Summary;
use crate::worker::State;
use crate::{ingest, Plan};

/// What one design delivered in one window.
pub struct Latency {
    /// The headline: each percentile the median of the windows' (`Summary::median_of`), the
    /// count and max over every window's deliveries.
    pub ws: Option<Summary>,
    pub hooks: Option<Summary>,
    /// Each window's own, in run order.
    pub ws_windows: Vec<Summary>,
    pub hooks_windows: Vec<Summary>,
    pub ws_expected: usize,
    pub hooks_expected: usize,
    pub clients: usize,
    pub failed: usize,
    /// push's own stamps for the same WebSocket deliveries (`push_latency`, t_push − t_detect).
    pub server_ws: Option<Summary>,
    pub ws_parts: ingest::Breakdown,
    pub hook_parts: ingest::Breakdown,
    pub fills: usize,
    pub blocks: u64,
    pub secs: f64,
    pub from_ms: i64,
    pub to_ms: i64,
}

/// Sessions per wallet among `accounts` (each account once).
pub fn followers_of(accounts: &[Account]) -> BTreeMap<Address, usize> {
    let mut m = BTreeMap::new();
    for a in accounts {
        for w in &a.wallets {
            *m.entry(*w).or_default() += 1;
        }
    }
    m
}

/// Deliveries a run owes: one per fill per session following the fill's owner (its maker).
pub fn expected(run: &Run, followers: &BTreeMap<Address, usize>) -> usize {
    run.fills
        .iter()
        .map(|f| followers.get(&f.maker).copied().unwrap_or(0))
        .sum()
}

/// Wait until no collector grew for one second (at most `within`).
pub async fn settle(collectors: &[&Arc<Collector>], within: Duration) {
    let deadline = Instant::now() + within;
    let mut last: Vec<usize> = collectors.iter().map(|c| c.len()).collect();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now: Vec<usize> = collectors.iter().map(|c| c.len()).collect();
        if now == last {
            return;
        }
        last = now;
    }
}

/// Who serves the phase's WebSocket sessions.
#[derive(Debug, Clone, Copy)]
pub enum Serve {
    /// The push leader itself (with the legacy poll period: the baseline).
    Push(Option<u64>),
    /// A pmw-edge fed by the push leader's rounds on NATS JetStream.
    Edge,
}

/// One design under the standard load: a fresh push leader (`legacy` = the seed's poll period,
/// or `None` for pmw as built), `sessions` sessions, the webhook endpoints (when added), a
/// warm-up run, then the measured windows.
pub async fn latency(
    b: &mut Bench,
    plan: &Plan,
    serve: Serve,
    sessions: usize,
    ws: &Arc<Collector>,
    hooks: &Arc<Collector>,
) -> anyhow::Result<Latency> {
    let (push, edge, stream) = match serve {
        Serve::Push(legacy) => (b.start_push(legacy).await?, None, None),
        Serve::Edge => {
            let stream = crate::edge::PrivateStream::create().await?;
            let push = b.start_push_with(None, stream.env.clone()).await?;
            let edge = b.start_edge(&stream.edge_env).await?;
            (push, Some(edge), Some(stream))
        }
    };
    let serving = edge.as_ref().map_or(push.addr, |e| e.addr);
    let mut fleet = Fleet::new(serving, ws.clone());
    let failed = fleet.grow(sessions, &b.ws_accounts).await;
    let clients = fleet.live();
    eprintln!(
        "  {clients} sessions open ({failed} failed); warm-up {:?}",
        plan.warmup
    );
    let warm = b.run_sim(plan.matches_per_block, plan.warmup).await?;
    b.wait_pushed(warm.upto, Duration::from_secs(60)).await?;
    let (run, ws_windows, hooks_windows) = windows(b, plan, ws, hooks).await?;
    let ws_expected = expected(&run, &fleet.followers());
    let hooks_expected = expected(&run, &followers_of(&b.hook_accounts));
    let server_ws = ingest::server_push(&b.db.ch, "ws", run.after, run.upto).await?;
    let ws_samples = ws.samples(run.after, run.upto);
    let hook_samples = hooks.samples(run.after, run.upto);
    let ws_parts = ingest::breakdown(&b.db.ch, &ws_samples, run.after, run.upto).await?;
    let hook_parts = ingest::breakdown(&b.db.ch, &hook_samples, run.after, run.upto).await?;
    fleet.clear().await;
    if let Some(edge) = edge {
        let code = edge.svc.stop().await?;
        if code != 0 {
            eprintln!("  warning: edge exited {code}");
        }
    }
    let code = push.svc.stop().await?;
    if code != 0 {
        eprintln!("  warning: push exited {code}");
    }
    if let Some(stream) = stream {
        stream.delete().await;
    }
    Ok(Latency {
        ws: Summary::median_of(summary(&ws_samples), &ws_windows),
        hooks: Summary::median_of(summary(&hook_samples), &hooks_windows),
        ws_windows,
        hooks_windows,
        ws_expected,
        hooks_expected,
        clients,
        failed,
        server_ws,
        ws_parts,
        hook_parts,
        fills: run.fills.len(),
        blocks: run.upto - run.after,
        secs: run.secs,
        from_ms: run.from_ms,
        to_ms: run.to_ms,
    })
}

/// The latency percentiles of `samples`.
fn summary(samples: &[Sample]) -> Option<Summary> {
    Summary::of(&samples.iter().map(Sample::lat_ms).collect::<Vec<_>>())
}

/// The measured windows of a latency phase, back to back (`plan.phase` split in
/// `plan.repeats`): the runs joined into one, and each window's WebSocket and webhook percentiles.
async fn windows(
    b: &mut Bench,
    plan: &Plan,
    ws: &Arc<Collector>,
    hooks: &Arc<Collector>,
) -> anyhow::Result<(Run, Vec<Summary>, Vec<Summary>)> {
    let (n, each) = (plan.repeats, plan.latency_window());
    eprintln!(
        "  measuring {n} windows of {each:?} at {} matches/block",
        plan.matches_per_block
    );
    let (mut joined, mut ws_w, mut hooks_w): (Option<Run>, Vec<Summary>, Vec<Summary>) =
        (None, Vec::new(), Vec::new());
    for _ in 0..n {
        let run = b.run_sim(plan.matches_per_block, each).await?;
        if !b.wait_pushed(run.upto, Duration::from_secs(60)).await? {
            eprintln!(
                "  warning: push did not reach block {} within 60 s",
                run.upto
            );
        }
        settle(&[ws, hooks], Duration::from_secs(30)).await;
        ws_w.extend(Summary::of(&ws.window(run.after, run.upto)));
        hooks_w.extend(Summary::of(&hooks.window(run.after, run.upto)));
        joined = Some(match joined {
            None => run,
            Some(j) => j.join(run),
        });
    }
    Ok((joined.expect("at least one window"), ws_w, hooks_w))
}

/// One fan-out step.
pub struct Step {
    pub sessions: usize,
    pub live: usize,
    pub failed: usize,
    /// push's RSS with these sessions open and idle, before the step's traffic.
    pub rss_kib: Option<u64>,
    pub lat: Option<Summary>,
    pub delivered: usize,
    pub expected: usize,
    pub ok: bool,
    /// When the step was measured twice: the first window's p99 (over budget).
    pub first_p99: Option<f64>,
}

pub struct FanOut {
    /// push's RSS after it leads, before any session.
    pub rss0_kib: Option<u64>,
    pub steps: Vec<Step>,
}

impl FanOut {
    /// The largest step that held every session with p99 within budget (steps are tried in
    /// order and stop at the first that does not).
    pub fn capacity(&self) -> Option<usize> {
        self.steps.iter().filter(|s| s.ok).map(|s| s.sessions).max()
    }

    /// KiB per idle session: (RSS idle at the step − RSS with none) / sessions, for the first
    /// step (before any traffic) and the largest.
    pub fn per_session_kib(&self) -> Option<(f64, usize, f64, usize)> {
        let r0 = self.rss0_kib? as f64;
        let first = self.steps.first()?;
        let last = self
            .steps
            .iter()
            .rev()
            .find(|s| s.rss_kib.is_some() && s.live > 0)?;
        let f = (first.rss_kib? as f64 - r0) / first.live.max(1) as f64;
        let l = (last.rss_kib? as f64 - r0) / last.live.max(1) as f64;
        Some((f, first.live, l, last.live))
    }
}

/// Step the number of sessions on one push process up, measuring client-observed latency at
/// each step, until a step loses sessions or its p99 exceeds the budget. A step over budget with
/// every session open is measured once more (the machine is shared: one noisy window should not
/// decide), and the second window decides.
pub async fn fanout(b: &mut Bench, plan: &Plan, ws: &Arc<Collector>) -> anyhow::Result<FanOut> {
    let push = b.start_push(None).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss0_kib = push.svc.rss_kib();
    let mut fleet = Fleet::new(push.addr, ws.clone());
    let mut steps = Vec::new();
    for &n in &plan.fanout_steps {
        let started = Instant::now();
        let failed = fleet.grow(n, &b.ws_accounts).await;
        eprintln!(
            "  {n} sessions: {} open, {failed} failed, connected in {:.1} s",
            fleet.live(),
            started.elapsed().as_secs_f64()
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        let rss_kib = push.svc.rss_kib();
        let step = step(b, plan, ws, &mut fleet, n).await?;
        let ok = step.ok;
        steps.push(Step {
            failed,
            rss_kib,
            ..step
        });
        if !ok {
            eprintln!("    over budget or sessions lost: stopping");
            break;
        }
    }
    fleet.clear().await;
    push.svc.stop().await?;
    Ok(FanOut { rss0_kib, steps })
}

/// Where a fan-out step's sessions are: open, failed and who follows which wallet (one fleet
/// in this process, or the edge bench's worker processes).
pub trait Census {
    async fn census(&mut self) -> anyhow::Result<State>;
}

impl Census for Fleet {
    async fn census(&mut self) -> anyhow::Result<State> {
        Ok(State {
            live: self.live(),
            failed: self.failed,
            followers: self.followers(),
        })
    }
}

/// A fan-out step with `n` sessions open: one measured window, and once more when it is over
/// budget with every session open (the machine is shared: one noisy window should not decide;
/// the second decides).
pub async fn step(
    b: &Bench,
    plan: &Plan,
    ws: &Arc<Collector>,
    sessions: &mut impl Census,
    n: usize,
) -> anyhow::Result<Step> {
    let step = window(b, plan, ws, sessions, n).await?;
    if step.ok || step.live != n || step.failed != 0 {
        return Ok(step);
    }
    eprintln!("    over budget with every session open: measuring once more");
    let first = step.lat.map(|s| s.p99);
    Ok(Step {
        first_p99: first,
        ..window(b, plan, ws, sessions, n).await?
    })
}

/// One measured window of a fan-out step with `n` sessions.
async fn window(
    b: &Bench,
    plan: &Plan,
    ws: &Arc<Collector>,
    sessions: &mut impl Census,
    n: usize,
) -> anyhow::Result<Step> {
    let run = b
        .run_sim(plan.matches_per_block, plan.fanout_window)
        .await?;
    b.wait_pushed(run.upto, Duration::from_secs(60)).await?;
    settle(&[ws], Duration::from_secs(30)).await;
    let st = sessions.census().await?;
    let lat_v = ws.window(run.after, run.upto);
    let lat = Summary::of(&lat_v);
    let expected = expected(&run, &st.followers);
    let ok = st.failed == 0 && st.live == n && lat.is_some_and(|s| s.p99 <= plan.p99_budget_ms);
    eprintln!(
        "    p99 {:?} ms over {} of {expected} deliveries",
        lat.map(|s| s.p99),
        lat_v.len(),
    );
    Ok(Step {
        sessions: n,
        live: st.live,
        failed: st.failed,
        rss_kib: None,
        lat,
        delivered: lat_v.len(),
        expected,
        ok,
        first_p99: None,
    })
}

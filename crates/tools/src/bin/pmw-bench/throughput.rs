//! Sustained throughput: raise the simulator's fill rate step by step, with the standard client
//! load connected, sampling every 250 ms the chain head, the ingest watermark and the push cursor.
//! A step kept up when, over its second half, the median push lag (watermark − push cursor) and
//! the median ingest lag (head − watermark) stayed ≤ 2 blocks, and push reached the run's last
//! block within 30 s of the run ending. Each step is measured in `Plan::repeats` windows (a drain
//! between them; the machine is shared): it is reported as its median window by WebSocket p99,
//! with every window's figures beside it, and kept up when most windows did, so one noisy window
//! cannot move the figure. Stepping stops at the first step that did not keep up, or when the
//! load generator itself fell short of the asked rate.
//! The same steps run in both modes: sessions on the push leader itself, or (edge mode) spread
//! round-robin over pmw-edge processes fed through NATS JetStream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmw_core::Address;

use crate::clients::{Collector, Fleet};
use crate::cpu::{Cpu, Used};
use crate::edge::Cluster;
use crate::phases::{expected, followers_of, settle};
use crate::setup::{Bench, Running};
use crate::stats::{median_u64, Summary};
use crate::Plan;

/// Largest median lag (blocks) over a step's second half that still counts as keeping up.
pub const MAX_MEDIAN_LAG: u64 = 2;
/// A step whose achieved match rate is below this share of the asked one hit the generator's limit.
const GENERATOR_SHORT: f64 = 0.7;

#[derive(Debug, Clone, Default)]
pub struct RateStep {
    pub matches_per_block: u32,
    pub secs: f64,
    pub fills: usize,
    /// Fills owned by a followed wallet (matched to at least one subscriber).
    pub matched: usize,
    /// Sessions still open at the end of the step (a slow consumer is closed with 1013).
    pub ws_open: usize,
    pub ws_frames: usize,
    pub ws_expected: usize,
    pub push_lag_median: u64,
    pub push_lag_max: u64,
    pub ingest_lag_median: u64,
    pub ingest_lag_max: u64,
    pub caught_up: bool,
    /// The run's last block with trades.
    pub last_block: u64,
    /// Every window of the step, in run order (the step's own figures are its median window's).
    pub windows: Vec<Window>,
    pub lat: Option<Summary>,
    /// Webhook deliveries received for the step's blocks, and owed.
    pub hook_deliveries: usize,
    pub hook_expected: usize,
    /// Blocks the step's run spanned.
    pub blocks: u64,
    /// CPU seconds each party used from the step's start until its deliveries settled.
    pub cpu: Used,
    pub kept_up: bool,
    pub generator_short: bool,
}

impl RateStep {
    pub fn matched_per_s(&self) -> f64 {
        self.matched as f64 / self.secs.max(1e-9)
    }
    pub fn fills_per_s(&self) -> f64 {
        self.fills as f64 / self.secs.max(1e-9)
    }
    /// Push CPU per delivered message (WebSocket frames and webhook deliveries together: one
    /// process serves both).
    pub fn push_us_per_delivery(&self) -> Option<f64> {
        let n = self.ws_frames + self.hook_deliveries;
        (n > 0).then(|| self.cpu.push * 1e6 / n as f64)
    }
    /// CPU of this run's Postgres backends (every service's statements) per webhook delivery.
    pub fn pg_us_per_hook(&self) -> Option<f64> {
        (self.hook_deliveries > 0).then(|| self.cpu.run_db() * 1e6 / self.hook_deliveries as f64)
    }
    /// The windows' push µs per delivery and Postgres µs per webhook delivery, each as
    /// `median (min–max)`.
    pub fn cpu_spreads(&self) -> (String, String) {
        let push: Vec<f64> = self.windows.iter().filter_map(|w| w.push_us).collect();
        let pg: Vec<f64> = self
            .windows
            .iter()
            .filter_map(|w| w.pg_us_per_hook)
            .collect();
        (
            crate::stats::int_spread(&push),
            crate::stats::int_spread(&pg),
        )
    }
    pub fn hooks_per_s(&self) -> f64 {
        self.hook_deliveries as f64 / self.secs.max(1e-9)
    }
    /// CPU of this run's Postgres backends per block (every service's statements).
    pub fn pg_ms_per_block(&self) -> Option<f64> {
        (self.blocks > 0).then(|| self.cpu.run_db() * 1e3 / self.blocks as f64)
    }
    /// How many of the step's windows kept up, as `2 of 3`.
    pub fn windows_kept_up(&self) -> String {
        let kept = self.windows.iter().filter(|w| w.kept_up).count();
        format!("{kept} of {}", self.windows.len())
    }
    /// The windows' WS p99 as `median (min–max)`.
    pub fn p99_spread(&self) -> String {
        let v: Vec<f64> = self.windows.iter().filter_map(|w| w.p99).collect();
        crate::stats::ms_spread(&v)
    }
    pub fn live_ms_per_block(&self) -> Option<f64> {
        (self.blocks > 0).then(|| self.cpu.live * 1e3 / self.blocks as f64)
    }
}

/// One window of a step, as its repeats are reported.
#[derive(Debug, Clone, Copy, Default)]
pub struct Window {
    pub p99: Option<f64>,
    pub kept_up: bool,
    pub push_us: Option<f64>,
    pub pg_us_per_hook: Option<f64>,
}

impl Window {
    fn of(s: &RateStep) -> Window {
        Window {
            p99: s.lat.map(|l| l.p99),
            kept_up: s.kept_up,
            push_us: s.push_us_per_delivery(),
            pg_us_per_hook: s.pg_us_per_hook(),
        }
    }
}

/// A step of `runs` (its windows, in run order): the median window by WebSocket p99 (one
/// without frames counts as the worst), kept up when most windows kept up and short of the
/// asked rate when most were, with every window's figures.
pub fn median_step(mut runs: Vec<RateStep>) -> RateStep {
    let windows: Vec<Window> = runs.iter().map(Window::of).collect();
    let n = runs.len();
    let kept = windows.iter().filter(|w| w.kept_up).count();
    let short = runs.iter().filter(|r| r.generator_short).count();
    let worst = |r: &RateStep| r.lat.map_or(f64::INFINITY, |l| l.p99);
    runs.sort_by(|a, b| worst(a).total_cmp(&worst(b)));
    let mut step = runs.swap_remove(n.saturating_sub(1) / 2);
    step.kept_up = kept * 2 > n;
    step.generator_short = short * 2 > n;
    step.windows = windows;
    step
}

/// The last step that kept up.
pub fn sustained(steps: &[RateStep]) -> Option<&RateStep> {
    steps.iter().take_while(|s| s.kept_up).last()
}

/// The throughput steps with the sessions on one push process (`edges` = 0) or spread over
/// `edges` pmw-edge processes fed by the push leader (edge mode). The CPU figures' "push" is
/// the leader in both modes.
pub async fn throughput(
    b: &mut Bench,
    plan: &Plan,
    ws: &Arc<Collector>,
    hooks: &Arc<Collector>,
    edges: usize,
) -> anyhow::Result<Vec<RateStep>> {
    let (push, cluster) = if edges == 0 {
        (Some(b.start_push(None).await?), None)
    } else {
        (None, Some(Cluster::start(b, edges).await?))
    };
    let (push_pid, mut fleet) = match (&push, &cluster) {
        (Some(p), _) => (p.svc.pid, Fleet::new(p.addr, ws.clone())),
        (None, Some(c)) => (c.push.svc.pid, Fleet::spread(&c.addrs(), ws.clone())),
        (None, None) => unreachable!("one of the two is started"),
    };
    fleet.grow(plan.ws_clients, &b.ws_accounts).await;
    let mut all = followers_of(&b.ws_accounts);
    for (w, n) in followers_of(&b.hook_accounts) {
        *all.entry(w).or_default() += n;
    }
    let mut steps = Vec::new();
    for &m in &plan.rates {
        let at = Attached {
            ws,
            hooks,
            fleet: &fleet,
            all: &all,
            push_pid,
        };
        let mut windows = Vec::new();
        for _ in 0..plan.repeats {
            let w = rate_window(b, plan, at, m).await?;
            // Let the system drain before the next window or the next, higher step.
            b.wait_pushed(w.last_block, Duration::from_secs(30)).await?;
            windows.push(w);
        }
        let step = median_step(windows);
        eprintln!(
            "  {m} matches/block: {} windows kept up; the median window's WS p99 {}",
            step.windows_kept_up(),
            crate::stats::ms(step.lat.map(|l| l.p99))
        );
        let stop = !step.kept_up || step.generator_short;
        steps.push(step);
        if stop {
            break;
        }
    }
    fleet.clear().await;
    if let Some(push) = push {
        push.svc.stop().await?;
    }
    if let Some(cluster) = cluster {
        cluster.stop().await?;
    }
    Ok(steps)
}

/// What a throughput step runs against: the clients' collectors, the fleet, every followed
/// wallet, and the push process measured.
#[derive(Clone, Copy)]
struct Attached<'a> {
    ws: &'a Arc<Collector>,
    hooks: &'a Arc<Collector>,
    fleet: &'a Fleet,
    all: &'a BTreeMap<Address, usize>,
    push_pid: u32,
}

/// (elapsed s, push lag, ingest lag) every 250 ms while the simulator runs.
async fn sample_lags(b: &Bench, running: &Running) -> anyhow::Result<Vec<(f64, u64, u64)>> {
    let started = Instant::now();
    let mut samples = Vec::new();
    while !running.is_finished() {
        let head = b.head().await?;
        if let (Some(i), Some(p)) = b.cursors().await? {
            samples.push((
                started.elapsed().as_secs_f64(),
                i.saturating_sub(p),
                head.saturating_sub(i),
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(samples)
}

/// A step's figures on stderr.
fn print_step(step: &RateStep) {
    let (m, kept_up) = (step.matches_per_block, step.kept_up);
    eprintln!(
        "  {m} matches/block: {:.1} matched trades/s, push lag median {} max {}, ingest lag median {} max {}, {}",
        step.matched_per_s(),
        step.push_lag_median,
        step.push_lag_max,
        step.ingest_lag_median,
        step.ingest_lag_max,
        if kept_up { "kept up" } else { "fell behind" }
    );
    eprintln!(
        "    cpu: push {:.1} s ({:.0} µs per delivered frame or webhook), live {:.1} s ({:.1} ms/block), postgres {:.1} s (this run's backends {:.1} s), clickhouse {:.1} s, anvil {:.1} s, generators {:.1} s, edges {:.1} s, nats {:.1} s",
        step.cpu.push,
        step.push_us_per_delivery().unwrap_or(f64::NAN),
        step.cpu.live,
        step.live_ms_per_block().unwrap_or(f64::NAN),
        step.cpu.postgres,
        step.cpu.run_db(),
        step.cpu.clickhouse,
        step.cpu.anvil,
        step.cpu.generators,
        step.cpu.edges,
        step.cpu.nats
    );
}

/// One window at `m` matches per block, sampling the lags while the simulator runs.
async fn rate_window(b: &Bench, plan: &Plan, at: Attached<'_>, m: u32) -> anyhow::Result<RateStep> {
    let Attached {
        ws,
        hooks,
        fleet,
        all,
        push_pid,
    } = at;
    let live_pid = b.live.as_ref().map(|l| l.pid);
    // scripts/profile waits for this line to attach perf to pmw-push.
    eprintln!(
        "  throughput step: {m} matches/block for {:?}, pmw-push pid {push_pid}",
        plan.rate_window
    );
    let cpu_before = Cpu::sample(push_pid, live_pid, &b.backends().await?);
    let running = b.start_sim(m, plan.rate_window).await?;
    let samples = sample_lags(b, &running).await?;
    let run = b.finish_sim(running).await?;
    let caught_up = b.wait_pushed(run.upto, Duration::from_secs(30)).await?;
    settle(&[ws, hooks], Duration::from_secs(20)).await;
    let cpu = Cpu::sample(push_pid, live_pid, &b.backends().await?).since(&cpu_before);
    let half = run.secs / 2.0;
    let second: Vec<&(f64, u64, u64)> = samples.iter().filter(|s| s.0 >= half).collect();
    let push_lags: Vec<u64> = second.iter().map(|s| s.1).collect();
    let ingest_lags: Vec<u64> = second.iter().map(|s| s.2).collect();
    let matches = run
        .fills
        .iter()
        .map(|f| f.tx_hash)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let asked = m as f64 * run.secs / plan.block_time;
    let lat_v = ws.window(run.after, run.upto);
    let step = RateStep {
        matches_per_block: m,
        secs: run.secs,
        fills: run.fills.len(),
        matched: run
            .fills
            .iter()
            .filter(|f| all.get(&f.maker).is_some_and(|n| *n > 0))
            .count(),
        ws_open: fleet.live(),
        ws_frames: lat_v.len(),
        ws_expected: expected(&run, &fleet.followers()),
        push_lag_median: median_u64(&push_lags),
        push_lag_max: samples.iter().map(|s| s.1).max().unwrap_or(0),
        ingest_lag_median: median_u64(&ingest_lags),
        ingest_lag_max: samples.iter().map(|s| s.2).max().unwrap_or(0),
        caught_up,
        last_block: run.upto,
        windows: Vec::new(),
        lat: Summary::of(&lat_v),
        hook_deliveries: hooks.window(run.after, run.upto).len(),
        hook_expected: expected(&run, &followers_of(&b.hook_accounts)),
        blocks: run.upto.saturating_sub(run.after),
        cpu,
        kept_up: false,
        generator_short: (matches as f64) < GENERATOR_SHORT * asked,
    };
    let kept_up = caught_up
        && !second.is_empty()
        && step.push_lag_median <= MAX_MEDIAN_LAG
        && step.ingest_lag_median <= MAX_MEDIAN_LAG;
    let step = RateStep { kept_up, ..step };
    print_step(&step);
    Ok(step)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(p99: Option<f64>, kept_up: bool, last_block: u64) -> RateStep {
        RateStep {
            lat: p99.map(|p99| Summary {
                n: 1,
                p50: p99 / 2.0,
                p95: p99,
                p99,
                max: p99,
            }),
            kept_up,
            last_block,
            ..RateStep::default()
        }
    }

    #[test]
    fn a_step_is_its_median_window_and_kept_up_by_the_majority() {
        // One noisy window (900 ms, fell behind) moves neither the figure nor the verdict.
        let step = median_step(vec![
            window(Some(40.0), true, 1),
            window(Some(900.0), false, 2),
            window(Some(60.0), true, 3),
        ]);
        assert_eq!((step.last_block, step.kept_up), (3, true));
        assert_eq!(step.windows_kept_up(), "2 of 3");
        assert_eq!(step.p99_spread(), "60.0 ms (40.0–900.0)");
        // Two of three fell behind: the step did, whatever its median window says; a window
        // without frames counts as the worst.
        let step = median_step(vec![
            window(None, false, 1),
            window(Some(50.0), false, 2),
            window(Some(70.0), true, 3),
        ]);
        assert_eq!((step.last_block, step.kept_up), (3, false));
        assert_eq!(step.windows.len(), 3);
    }
}

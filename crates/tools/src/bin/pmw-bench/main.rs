//! pmw-bench: the benchmark behind `scripts/bench` (docs/BENCHMARKS.md). On the real local stack
//! with a private database and a private anvil it measures, in one run: client-observed
//! detect→push for WebSocket and webhooks, for pmw and for the seed's polling design as a
//! baseline; the floor (bare hop costs on this machine); fan-out capacity and memory per session;
//! sustained throughput; edge mode (the broker hop, fan-out across several pmw-edge processes,
//! throughput beside single-process mode); market subscriptions (sessions following the busiest
//! markets with a size floor); pmw-live's ingest stages. It writes the markdown report and exits
//! non-zero when the run produced no numbers or delivered nothing.

mod clients;
mod cpu;
mod edge;
mod edge_report;
mod floor;
mod hooks;
mod ingest;
mod machine;
mod markets;
mod pending;
mod phases;
mod procs;
mod report;
mod setup;
mod stats;
mod throughput;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;

use clients::Collector;
use phases::Serve;

/// How each figure is measured (printed at the end of the report).
pub const HOW: &[&str] = &[
    "**Client-observed detect→push**: every WebSocket client (tokio-tungstenite, one task, 4 KiB read buffer) and every webhook receiver (axum, answers 204) stamps the wall clock when a `trade` message arrives and subtracts the message's `t_detect_ms`, which pmw-live stamped with the same clock when the block header arrived. Percentiles are nearest-rank over all deliveries of the window (per-delivery differences, never differences of medians); `t_detect_ms` is whole milliseconds, so figures carry up to 1 ms of truncation.",
    "**Repeats**: each latency phase is measured in `--repeats` (3) windows back to back, and each throughput step in as many windows with a drain between them, because this machine is shared and one window can be noisy. A latency figure is the median of the windows' percentiles, with their range in brackets (an even count takes the lower middle value, a measured figure); ratios and the summary use the medians; counts and max are over all windows. A throughput step keeps up when most of its windows did, and its figures are its median window's by WebSocket p99 (CPU per delivery: the median of its windows'). Fan-out and market steps are measured once (a fan-out step over budget once more).",
    "**Baseline**: the same binary (built with the `polling-baseline` feature, as `scripts/bench` builds it) with `PMW_BENCH_POLL_MS=500`: no LISTEN wake-up, the leader sleeps 500 ms between rounds (the seed's design before its 09-26 change). Same clients, same load, same run; the ratio is baseline ÷ pmw.",
    "**Floor**: each hop timed alone through the production code path (see the table), the floor is the sum of their p50s: what one trade costs if nothing waits anywhere.",
    "**Fan-out**: sessions reuse the WebSocket accounts' keys (several sessions per account). Memory is the `VmRSS` of the pmw-push child process read from `/proc/<pid>/status` with the sessions open and idle; the client side's memory is not included.",
    "**Edge mode**: pmw-push with `PMW_PUSH_NATS_*` set publishes each round to a fresh private JetStream stream on the local stack's NATS cluster; each pmw-edge (`PMW_EDGE_NATS_*` on the same stream) is a child process like push, on its own loopback port, and the clients connect to the edges directly, round-robin; the fan-out's clients run in one client process per edge (this binary as a worker, streaming each sample to this process's collector), so no process needs more than about one edge's share of sockets. Memory per session is the edges' `VmRSS` summed (from `/proc/<pid>/status`, sessions open and idle) ÷ open sessions; the client side's memory is not included. The broker hop is the edge-mode latency window's client-observed p50 minus single-process mode's, same sessions and load. Throughput in edge mode: the same steps and rule as single-process mode; the CPU figures of those steps are not reported (push = the leader only).",
    "**Throughput**: matched trades are fills owned by a followed wallet (every wallet of the simulated world is followed), counted from the simulator's record of what it emitted, per second of the run.",
    "**CPU**: user + system clock ticks of `/proc/<pid>/stat` for pmw-push and pmw-live (child processes), this process (the load generators: WebSocket clients, webhook receivers, simulator, in their own process, apart from the services) and, by command name, every Postgres, ClickHouse and anvil process (reaped children through `cutime`/`cstime`), sampled at a throughput step's start and after its deliveries settled. Where push's time goes inside the process: `scripts/profile` (perf + inferno flamegraph), see docs/PROFILE.md.",
    "**Market subscriptions**: accounts written straight to Postgres as the API stores them (one `market_subscriptions` row per market: its tokens and `filter.min_collateral`), one session each and no wallets, on a fresh pmw-push with no webhook endpoint of theirs; the busiest markets and the floor (the median fill's collateral) are taken from the fills emitted so far. Latency is client-observed as above; CPU as for the throughput steps, from before the step's run until its deliveries settled; the accounts are disabled afterwards.",
    "**Pending tier**: the last step, on the same anvil switched to 2 s interval mining and a second pmw-sim in settle mode (the real V1/V2 settlement calls wait in the pool until the next block; 2 % each revert, are replaced, are dropped), a fresh push leader and the first `--pending-sessions` WebSocket accounts' sessions opted in (`events=trade,pending`). Two windows of the same load: pmw-live as it ran all along (mempool watcher off), then restarted with `PMW_LIVE_MEMPOOL` on. Lead = a trade frame's receive time minus its `pending`'s (same session, paired by `pending_id`); seen→pushed = the `pending` frame's `t_push_ms − t_seen_ms` (both pmw's stamps); coverage = trades of the tier-on window whose `pending` came first on that session; a void is wrong when its settlement's receipt has status 1. The simulator sends each batch the moment a block lands, so a settlement waits about a whole block in the pool: the lead is the most favourable case (settlements spread over the block interval would wait half a block on average).",
    "**Ingest stages**: pmw-live's own `ingest_latency` rows for the blocks detected in the window: `t_logs_ms − t_detect_ms` and `t_stored_ms − t_detect_ms` (stored = the block's trades and watermark committed to Postgres in one statement; ClickHouse is filled from there, off the path).",
];

#[derive(Parser, Debug)]
#[command(
    about = "pmw benchmark: writes docs/BENCHMARKS.md (or artifacts/BENCHMARKS.smoke.md with --smoke)"
)]
struct Args {
    /// Tiny scale (a check that the benchmark works, for scripts/test).
    #[arg(long)]
    smoke: bool,
    /// Where to write the markdown.
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long)]
    ws_clients: Option<usize>,
    #[arg(long)]
    webhooks: Option<usize>,
    /// Seconds between blocks (anvil --block-time).
    #[arg(long)]
    block_time: Option<f64>,
    /// The fill rate: simulator matches per block.
    #[arg(long)]
    matches_per_block: Option<u32>,
    /// When the simulator sends each block's batch: this fraction of the block time after it
    /// has the previous batch's receipts (0: at once, right as the block is delivered).
    #[arg(long, default_value_t = 0.3)]
    send_at: f64,
    /// Seconds of each measured latency window.
    #[arg(long)]
    phase_secs: Option<u64>,
    /// Session counts of the fan-out steps, e.g. 1000,2000,4000.
    #[arg(long, value_delimiter = ',')]
    fanout_steps: Option<Vec<usize>>,
    #[arg(long)]
    fanout_secs: Option<u64>,
    /// Matches per block of the throughput steps, e.g. 2,5,10.
    #[arg(long, value_delimiter = ',')]
    rates: Option<Vec<u32>>,
    /// Seconds of each throughput window (each step runs `--repeats` of them).
    #[arg(long)]
    rate_secs: Option<u64>,
    /// Windows per latency phase and per throughput step; the report gives their median and
    /// spread, so one noisy window cannot move a headline figure.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Edge mode: pmw-edge processes of the fan-out and throughput steps.
    #[arg(long, default_value_t = 3)]
    edges: usize,
    /// Edge mode: session counts of the fan-out steps (spread over the edges), e.g. 10000,50000.
    #[arg(long, value_delimiter = ',')]
    edge_steps: Option<Vec<usize>>,
    #[arg(long)]
    floor_reps: Option<usize>,
    /// Sessions of the market step (each follows the 10 busiest markets with a size floor).
    #[arg(long)]
    market_sessions: Option<usize>,
    #[arg(long, default_value_t = 500)]
    legacy_poll_ms: u64,
    #[arg(long, default_value_t = 250.0)]
    p99_budget_ms: f64,
    /// Wallets of the simulated world, and how many each account follows.
    #[arg(long, default_value_t = 12)]
    wallets: usize,
    #[arg(long, default_value_t = 2)]
    per_account: usize,
    /// Directory for the service logs.
    #[arg(long)]
    logs: Option<PathBuf>,
    /// Only the pending tier's step (issue 43): its section of the report (between the
    /// `<!-- bench:pending -->` markers of `--out`, default docs/BENCHMARKS.md) is replaced.
    #[arg(long)]
    only_pending: bool,
    /// Sessions of the pending step (opted in to `events=trade,pending`).
    #[arg(long)]
    pending_sessions: Option<usize>,
    /// Internal: run as a client worker of the server at this address (see `worker`).
    #[arg(long, hide = true)]
    worker: Option<std::net::SocketAddr>,
}

impl Plan {
    /// One window of a latency phase: `phase` split among the `repeats`.
    pub fn latency_window(&self) -> Duration {
        self.phase / self.repeats as u32
    }
}

/// The resolved settings of one run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub smoke: bool,
    pub cores: usize,
    pub ws_clients: usize,
    pub webhooks: usize,
    pub wallets: usize,
    pub per_account: usize,
    pub block_time: f64,
    pub matches_per_block: u32,
    /// The simulator's pause after a batch's receipts before it sends the next.
    pub send_pause: Duration,
    pub warmup: Duration,
    pub phase: Duration,
    pub legacy_poll_ms: u64,
    pub floor_reps: usize,
    pub fanout_steps: Vec<usize>,
    pub fanout_window: Duration,
    pub p99_budget_ms: f64,
    pub rates: Vec<u32>,
    pub rate_window: Duration,
    /// Windows per latency phase (`phase` split among them) and per throughput step.
    pub repeats: usize,
    pub edges: usize,
    pub edge_steps: Vec<usize>,
    /// The market step: sessions, and how many of the busiest markets each follows.
    pub market_sessions: usize,
    pub market_count: usize,
    /// The pending step: sessions, and each of its two windows.
    pub pending_sessions: usize,
    pub pending_window: Duration,
    pub deadline: Duration,
}

impl Plan {
    fn from(a: &Args) -> Plan {
        let s = a.smoke;
        let block_time = a.block_time.unwrap_or(1.0);
        let pick = |full: u64, smoke: u64, v: Option<u64>| {
            Duration::from_secs(v.unwrap_or(if s { smoke } else { full }))
        };
        Plan {
            smoke: s,
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            ws_clients: a.ws_clients.unwrap_or(if s { 20 } else { 1_000 }),
            webhooks: a.webhooks.unwrap_or(if s { 5 } else { 100 }),
            wallets: a.wallets,
            per_account: a.per_account.min(a.wallets),
            block_time,
            matches_per_block: a.matches_per_block.unwrap_or(2),
            send_pause: Duration::from_secs_f64(block_time * a.send_at.clamp(0.0, 0.9)),
            warmup: Duration::from_secs(if s { 2 } else { 5 }),
            phase: pick(60, 10, a.phase_secs),
            legacy_poll_ms: a.legacy_poll_ms,
            floor_reps: a.floor_reps.unwrap_or(if s { 20 } else { 200 }),
            fanout_steps: a.fanout_steps.clone().unwrap_or_else(|| {
                if s {
                    vec![100, 200]
                } else {
                    vec![1_000, 2_000, 4_000, 6_000, 8_000, 10_000]
                }
            }),
            fanout_window: pick(20, 8, a.fanout_secs),
            p99_budget_ms: a.p99_budget_ms,
            rates: a.rates.clone().unwrap_or_else(|| {
                if s {
                    vec![1, 4]
                } else {
                    vec![2, 5, 10, 20, 40, 80, 100, 120, 160]
                }
            }),
            rate_window: pick(10, 4, a.rate_secs),
            repeats: a.repeats.max(1),
            edges: a.edges.max(1),
            edge_steps: a.edge_steps.clone().unwrap_or_else(|| {
                if s {
                    vec![30]
                } else {
                    vec![10_000, 25_000, 50_000]
                }
            }),
            market_sessions: a.market_sessions.unwrap_or(if s { 20 } else { 1_000 }),
            market_count: 10,
            pending_sessions: a.pending_sessions.unwrap_or(if s { 10 } else { 100 }),
            pending_window: Duration::from_secs(if s { 10 } else { 30 }),
            deadline: Duration::from_secs(if s { 420 } else { 3_000 }),
        }
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Some(addr) = args.worker {
        return match rt.block_on(worker::serve(addr)) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("pmw-bench worker: {e:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    match rt.block_on(guarded(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmw-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Run within the deadline; SIGTERM/SIGINT end it cleanly (children and databases cleaned up).
async fn guarded(args: Args) -> anyhow::Result<()> {
    let plan = Plan::from(&args);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::time::timeout(plan.deadline, run(args, plan.clone())) => r.unwrap_or_else(|_| bail!("deadline of {:?} passed", plan.deadline)),
        _ = term.recv() => bail!("terminated"),
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
    }
}

async fn run(args: Args, plan: Plan) -> anyhow::Result<()> {
    let (out, logs) = paths(&args, &plan);
    check_nofile(&plan)?;
    let started = Instant::now();
    let started_utc = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string();
    eprintln!("pmw-bench: {plan:?}");
    let mut b = setup::Bench::new(&plan, logs.clone()).await?;
    if args.only_pending {
        b.start_live().await?;
        eprintln!("pending tier: {} sessions", plan.pending_sessions);
        let step = pending::step(&mut b, &plan).await?;
        if let Some(live) = b.live.take() {
            live.stop().await?;
        }
        return pending::write_section(&out, &step, &started_utc);
    }
    let ws = Arc::new(Collector::default());
    let hooks = Arc::new(Collector::default());
    let receivers = hooks::Receivers::start(plan.webhooks, hooks.clone()).await?;
    b.start_live().await?;
    let run_from_ms = pmw_core::UnixMs::now().0;
    let m = measure(&mut b, &plan, &ws, &hooks, &receivers).await?;
    let ch = &b.db.ch;
    let stages = vec![
        ingest::stages(ch, "pmw latency window", m.pmw.from_ms, m.pmw.to_ms).await?,
        ingest::stages(ch, "baseline latency window", m.base.from_ms, m.base.to_ms).await?,
        ingest::stages(
            ch,
            "whole run (throughput steps included)",
            run_from_ms,
            pmw_core::UnixMs::now().0 + 1,
        )
        .await?,
    ];
    eprintln!("pending tier: {} sessions", plan.pending_sessions);
    let pending = pending::step(&mut b, &plan).await?;
    let machine = machine::describe(&b).await;
    if let Some(live) = b.live.take() {
        live.stop().await?;
    }
    let delivered = [
        &m.pmw.ws,
        &m.pmw.hooks,
        &m.base.ws,
        &m.base.hooks,
        &m.edge.ws,
    ]
    .map(|s| s.as_ref().map_or(0, |s| s.n));
    let r = report::Report {
        plan,
        started_utc,
        took_s: started.elapsed().as_secs_f64(),
        machine,
        pmw: m.pmw,
        base: m.base,
        single: m.single,
        edge: m.edge,
        floor: m.floor,
        fanout: m.fanout,
        markets: m.markets,
        rates: m.rates,
        edge_fanout: m.edge_fanout,
        edge_rates: m.edge_rates,
        stages,
        pending,
    };
    write(&out, &r)?;
    drop(receivers);
    check_figures(&r, delivered)
}

/// Where the report goes (`--out`, or docs/BENCHMARKS.md; the smoke run's under artifacts/) and
/// the children's logs.
fn paths(args: &Args, plan: &Plan) -> (PathBuf, PathBuf) {
    let root = pmw_testkit::repo_root();
    let out = args.out.clone().unwrap_or_else(|| {
        root.join(if plan.smoke {
            "artifacts/BENCHMARKS.smoke.md"
        } else {
            "docs/BENCHMARKS.md"
        })
    });
    let logs = args
        .logs
        .clone()
        .unwrap_or_else(|| root.join("artifacts/bench-logs"));
    (out, logs)
}

/// The open-file limit holds the plan's sockets per process: this one's clients, or one edge's
/// share (its clients are in a worker process of their own, and the edge holds as many).
fn check_nofile(plan: &Plan) -> anyhow::Result<()> {
    let need = plan
        .fanout_steps
        .iter()
        .chain(&[plan
            .edge_steps
            .iter()
            .max()
            .copied()
            .unwrap_or(0)
            .div_ceil(plan.edges)])
        .max()
        .copied()
        .unwrap_or(0)
        .max(plan.ws_clients) as u64
        + 1_000;
    if let Some(n) = machine::nofile_limit().filter(|n| *n < need) {
        bail!("open-file limit {n} is below the {need} this plan needs: raise it (`ulimit -n`; scripts/bench does)");
    }
    Ok(())
}

/// What the phases measured.
struct Measured {
    floor: floor::Floor,
    single: phases::Latency,
    pmw: phases::Latency,
    edge: phases::Latency,
    base: phases::Latency,
    fanout: phases::FanOut,
    markets: markets::MarketStep,
    rates: Vec<throughput::RateStep>,
    edge_fanout: edge::EdgeFanOut,
    edge_rates: Vec<throughput::RateStep>,
}

/// The phases in order: the floor, latency (one session; pmw; edge mode; the baseline), fan-out
/// and throughput, then both in edge mode.
async fn measure(
    b: &mut setup::Bench,
    plan: &Plan,
    ws: &Arc<Collector>,
    hooks: &Arc<Collector>,
    receivers: &hooks::Receivers,
) -> anyhow::Result<Measured> {
    eprintln!("floor ({} repetitions per hop)", plan.floor_reps);
    let floor = floor::measure(b, plan.floor_reps).await?;
    // One session and no webhook endpoint yet: the latency without fan-out, beside the floor.
    eprintln!("latency: one session, no fan-out");
    let (one_ws, one_hooks) = (Arc::new(Collector::default()), Arc::default());
    let single = phases::latency(b, plan, Serve::Push(None), 1, &one_ws, &one_hooks).await?;
    b.add_endpoints(&receivers.urls).await?;
    eprintln!("latency: pmw (LISTEN wake-up)");
    let pmw = phases::latency(b, plan, Serve::Push(None), plan.ws_clients, ws, hooks).await?;
    eprintln!("latency: edge mode (the leader's rounds through NATS JetStream to a pmw-edge)");
    let edge = phases::latency(b, plan, Serve::Edge, plan.ws_clients, ws, hooks).await?;
    eprintln!("latency: baseline (legacy poll {} ms)", plan.legacy_poll_ms);
    let legacy = Serve::Push(Some(plan.legacy_poll_ms));
    let base = phases::latency(b, plan, legacy, plan.ws_clients, ws, hooks).await?;
    eprintln!("fan-out: steps {:?}", plan.fanout_steps);
    let fanout = phases::fanout(b, plan, ws).await?;
    eprintln!(
        "markets: {} sessions following the {} busiest markets with a size floor",
        plan.market_sessions, plan.market_count
    );
    let markets = markets::step(b, plan).await?;
    eprintln!("throughput: matches per block {:?}", plan.rates);
    let rates = throughput::throughput(b, plan, ws, hooks, 0).await?;
    eprintln!(
        "edge mode, fan-out over {} edges: steps {:?}",
        plan.edges, plan.edge_steps
    );
    let edge_fanout = edge::fanout(b, plan, ws).await?;
    eprintln!(
        "edge mode, throughput over {} edges: matches per block {:?}",
        plan.edges, plan.rates
    );
    let edge_rates = throughput::throughput(b, plan, ws, hooks, plan.edges).await?;
    Ok(Measured {
        floor,
        single,
        pmw,
        edge,
        base,
        fanout,
        markets,
        rates,
        edge_fanout,
        edge_rates,
    })
}

/// The report rendered, written to `out` and printed.
fn write(out: &std::path::Path, r: &report::Report) -> anyhow::Result<()> {
    let md = report::render(r);
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(out, &md).with_context(|| format!("write {}", out.display()))?;
    println!("{md}");
    eprintln!("pmw-bench: wrote {} in {:.0} s", out.display(), r.took_s);
    Ok(())
}

/// A run that delivered nothing on a channel, or produced no figures of a phase, failed.
fn check_figures(r: &report::Report, delivered: [usize; 5]) -> anyhow::Result<()> {
    if delivered.contains(&0) {
        bail!("no trades delivered on some channel (pmw ws, pmw webhook, baseline ws, baseline webhook, edge ws: {delivered:?})");
    }
    if r.fanout.steps.is_empty()
        || r.rates.is_empty()
        || r.edge_fanout.steps.is_empty()
        || r.edge_rates.is_empty()
        || r.stages[0].blocks == 0
    {
        bail!("the run produced no fan-out, throughput (either mode) or ingest figures");
    }
    if r.pending.pendings == 0 || r.pending.coverage.1 == 0 {
        bail!("the pending step delivered no pending or no trade");
    }
    if r.markets.delivered == 0 {
        bail!("the market step delivered nothing");
    }
    if r.edge_fanout.steps.iter().any(|s| s.step.delivered == 0) {
        bail!("an edge-mode fan-out step delivered nothing");
    }
    Ok(())
}

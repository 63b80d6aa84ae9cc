//! `pmw-check` (`scripts/check`): a seeded fault-and-churn checker with an independent oracle.
//! It runs the real suite as production does (pm2 with the production ecosystem, Caddy, pmw-sim
//! on a private anvil, a private Postgres/ClickHouse from `scripts/stack`), subscribes checked
//! accounts (fixed subscriptions, one resuming WebSocket client and one webhook endpoint each)
//! and churn accounts, does the seed's schedule of faults to the system, lets it settle, reads
//! the canonical chain itself and reports what each subscriber lost, holds in excess, got twice
//! or out of order. Exit 1 on any lost, phantom, duplicated (WebSocket) or out-of-order delivery.

mod accounts;
mod availability;
mod churn_faults;
mod edge_faults;
mod faults;
mod hooks;
mod host_faults;
mod oracle;
mod pending;
mod pending_log;
mod pool;
mod reconnects;
mod report;
mod schedule;
mod ws;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use pmw_sim::{demo_wallets, RunConfig};
use pmw_testkit::PrivateStack;
use pmw_tools::harness::{Drill, Opts};
use tokio_util::sync::CancellationToken;

use accounts::{checked_accounts, churn_accounts, connect_clients, drill_env, with_endpoints};
use faults::{Done, World};
use ws::now_ms;

#[derive(Parser, Debug)]
#[command(about = "Seeded fault-and-churn checker with an independent oracle")]
struct Args {
    /// Schedule seed (random when absent; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Minutes of traffic and faults (the settle phase comes on top).
    #[arg(long, default_value_t = 3.0)]
    minutes: f64,
    /// Checked accounts (fixed subscriptions; one WebSocket client and one endpoint each).
    #[arg(long, default_value_t = 4)]
    accounts: usize,
    /// Churn accounts (subscriptions, endpoints and keys change).
    #[arg(long, default_value_t = 2)]
    churn: usize,
    /// Pause between simulated blocks (one match each), ms.
    #[arg(long, default_value_t = 300)]
    block_ms: u64,
    /// Longest wait for the system to settle after the faults, s.
    #[arg(long, default_value_t = 90)]
    settle_secs: u64,
    /// Edge mode: this many pmw-edge servers serve `/v1/ws` through Caddy, fed by the push
    /// leader through a private 3-node NATS JetStream cluster; adds the edges' and the broker's
    /// faults, and push faults must close no client's socket (0: push serves the sockets).
    #[arg(long, default_value_t = 0)]
    edges: usize,
    /// Multi-host mode: 3 hosts (network namespaces), an etcd member on each and a
    /// Patroni/Postgres member on two (a primary and its synchronous standby); the services
    /// reach Postgres by the hosts' addresses, and the host faults are added (0: one Postgres).
    #[arg(long, default_value_t = 0)]
    hosts: usize,
    /// Multi-host mode: only these host faults, comma-separated, of kill, partition, freeze,
    /// primary-kill, switchover, standby-lost, etcd-lost (default: all, in turn).
    #[arg(long, value_delimiter = ',')]
    host_faults: Vec<String>,
    /// The pending tier (issue 43): pmw-sim settles through anvil's pool (holding each match
    /// there this many ms; a few revert, are replaced or dropped), pmw-live watches the pool,
    /// the checked clients opt in (`events=trade,pending`) and the oracle judges every
    /// `pending` and `void` against the chain (0: off).
    #[arg(long, default_value_t = 0)]
    pending_hold_ms: u64,
    /// Write the table into this markdown file (between `<!-- check:run -->` markers, or
    /// `<!-- check:edge-run -->` in edge mode).
    #[arg(long)]
    doc: Option<std::path::PathBuf>,
}

fn hex(a: &pmw_core::Address) -> String {
    a.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// What the run is: its seed, length, mode and fault schedule (printed before anything starts).
struct Run {
    seed: u64,
    minutes: f64,
    mode: String,
    wallets: Vec<pmw_core::Address>,
    plan: Vec<schedule::Fault>,
    started: Instant,
}

/// The oracle's view of the final chain: every canonical fill, and what each checked subscriber
/// is owed.
struct Owed {
    canonical: BTreeSet<ws::Id>,
    per_checked: Vec<BTreeSet<ws::Id>>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.hosts > 0 {
        host_faults::teardown_on_signal();
    }
    let run = plan(&args);
    let (w, stop) = match setup(&args, &run).await {
        Ok(set) => set,
        Err(e) => {
            drop(host_faults::HOSTS.lock().unwrap().take());
            return Err(e);
        }
    };
    let w = Arc::new(w);
    let done = faults_under_traffic(&args, &run, &w).await;
    let owed = settle(&args, &w).await?;
    stop.cancel();
    let pending = pending::judge_run(&w, &owed.per_checked).await?;
    let failed = judge(&args, &run, &w, &owed, &done, pending)?;
    if let Some(why) = &failed {
        // What the apps said last (warnings and errors at the drills' RUST_LOG=warn), then the
        // failed verdict again: the last lines of a CI log say why.
        w.d.pm2.print_log_tails(80);
        println!("\n{why}");
    }
    // Stop the drill stack (pm2, Caddy, anvil) before the private database goes.
    drop(Arc::try_unwrap(w).ok());
    // Then the hosts (multi-host mode), the last reference to them.
    drop(host_faults::HOSTS.lock().unwrap().take());
    std::process::exit(i32::from(failed.is_some()));
}

/// The seed's schedule, printed.
fn plan(args: &Args) -> Run {
    let seed = args.seed.unwrap_or_else(|| rand::random::<u16>().into());
    let minutes = args.minutes.max(1.0);
    let wallets = demo_wallets(6);
    let shape = schedule::Shape {
        minutes: minutes.ceil() as u64,
        accounts: args.accounts.max(1),
        churn: args.churn.max(1),
        wallets: wallets.len(),
        edges: args.edges,
        hosts: args.hosts,
        host_faults: args.host_faults.clone(),
    };
    let plan = schedule::generate(seed, &shape);
    let mut mode = if args.edges > 0 {
        format!("edge mode ({} edges, 3 NATS nodes)", args.edges)
    } else {
        "single-process mode".to_string()
    };
    if args.hosts > 0 {
        mode += ", multi-host (Postgres HA on 3 hosts: 3 etcd, 2 Patroni)";
    }
    if args.pending_hold_ms > 0 {
        mode += ", pending tier on";
    }
    println!(
        "pmw-check seed {seed}, {minutes} min, {mode}, {} checked accounts, {} churn accounts",
        args.accounts, args.churn
    );
    println!(
        "schedule ({} faults): {}",
        plan.len(),
        report::summary(&plan)
    );
    for f in &plan {
        println!("  t+{:>4} s  {}", f.at_s, f.kind);
    }
    Run {
        seed,
        minutes,
        mode,
        wallets,
        plan,
        started: Instant::now(),
    }
}

/// The private stack and the drill stack on it, the checked and churn accounts with their
/// endpoints, every client connected through Caddy; the world the faults run in and the
/// clients' stop.
async fn setup(args: &Args, run: &Run) -> anyhow::Result<(World, CancellationToken)> {
    let components = stack_components(args.edges > 0, args.hosts > 0);
    let stack =
        Arc::new(tokio::task::spawn_blocking(move || PrivateStack::start_with(components)).await?);
    let (ha, env_stack, placed) = start_hosts(args, &stack).await?;
    let pending = args.pending_hold_ms > 0;
    let d = Drill::start_with(Opts {
        stack: Some(env_stack.clone()),
        rpc_proxy: false,
        rpc_providers: schedule::PROVIDERS,
        apps: Some(match placed {
            Some(_) => pmw_tools::placed::APPS,
            None => "pmw-live,pmw-push-a,pmw-push-b,pmw-api,pmw-stats",
        }),
        env: drill_env(pending),
        clients: Some(0),
        edges: args.edges,
        sim: pending.then(|| pending::sim_config(args.pending_hold_ms)),
        placed: placed.clone(),
    })
    .await;
    let hooks_on: std::net::IpAddr = match &placed {
        Some(p) => p.gateway().into(),
        None => std::net::Ipv4Addr::LOCALHOST.into(),
    };
    let pg = d.db.connect().await;
    let watch = pending.then(|| {
        let (ws, http) = (d.anvil.ws_url(), d.anvil.http_url());
        pending::ChainWatch::spawn(ws, http)
    });
    let mut w = World {
        site: format!("127.0.0.1:{}", d.site),
        stack_env: env_stack,
        d,
        stack,
        http: reqwest::Client::new(),
        wallets: run.wallets.iter().map(hex).collect(),
        checked: Vec::new(),
        churn: Vec::new(),
        start_block: 0,
        endpoint_seq: Default::default(),
        reorgs: Default::default(),
        locks: HashMap::new(),
        nats_lock: Default::default(),
        ha,
        host_figures: Default::default(),
        pending: watch,
    };
    let checked = checked_accounts(args, run, &pg, hooks_on).await;
    w.churn = churn_accounts(args, run, &pg, hooks_on).await;
    pg.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
        .await?;
    w.checked = with_endpoints(&w, checked, pending).await?;
    for k in schedule::Kind::NAMES {
        w.locks.insert(k, tokio::sync::Mutex::new(()));
    }
    let stop = connect_clients(&w).await?;
    w.start_block = oracle::head(&w.d.anvil.http_url()).await?;
    println!(
        "setup took {} s; start block {}",
        run.started.elapsed().as_secs(),
        w.start_block
    );
    Ok((w, stop))
}

/// The private stack's components: ClickHouse always; Postgres and, in edge mode, NATS unless
/// multi-host mode (there they run on the hosts).
fn stack_components(edges: bool, hosts: bool) -> &'static [&'static str] {
    match (edges, hosts) {
        (true, false) => &["pg", "ch", "nats"],
        (false, false) => &["pg", "ch"],
        (true, true) => &["ch"],
        (false, true) => &["ch"],
    }
}

/// Multi-host mode (`--hosts 3`): the HA cluster on the hosts, ready and prepared for the host
/// faults, the stack's environment pointing at it, and every member of a pair placed on a host
/// of its own (pmw_tools::placed; the webhook receivers then listen on the hosts' gateway); in
/// edge mode a NATS node and an edge on each host. Otherwise none of these, and the private
/// stack's own environment.
async fn start_hosts(
    args: &Args,
    stack: &PrivateStack,
) -> anyhow::Result<(
    Option<Arc<pmw_tools::ha_hosts::HaHosts>>,
    pmw_testkit::StackEnv,
    Option<Arc<pmw_tools::placed::Placed>>,
)> {
    if args.hosts == 0 {
        return Ok((None, stack.env.clone(), None));
    }
    anyhow::ensure!(args.hosts == 3, "multi-host mode runs on 3 hosts");
    let ha = Arc::new(pmw_tools::ha_hosts::HaHosts::start(
        stack.env.get("PMW_PG_BIN"),
    )?);
    *host_faults::HOSTS.lock().unwrap() = Some(ha.clone());
    ha.ready().await?;
    host_faults::prepare(&ha).await?;
    let mut env = ha.stack_env(&stack.env);
    if args.edges > 0 {
        env = ha.start_nats().await?.stack_env(&env);
    }
    let bin = pmw_testkit::repo_root().join("target/debug");
    let placed = Arc::new(pmw_tools::placed::Placed::new(&ha, &bin)?);
    println!(
        "services on hosts: {}",
        pmw_tools::placed::describe(&placed, args.edges)
    );
    Ok((Some(ha), env, Some(placed)))
}

/// Traffic for the run's span with the schedule's faults done to the system meanwhile; what
/// each fault did.
async fn faults_under_traffic(args: &Args, run: &Run, w: &Arc<World>) -> Vec<Done> {
    let traffic_stop = CancellationToken::new();
    let traffic = w.d.sim.spawn(
        RunConfig {
            matches_per_block: 1,
            interval: Duration::from_millis(args.block_ms),
            count: None,
            duration: Some(Duration::from_secs((run.minutes * 60.0) as u64)),
        },
        traffic_stop.clone(),
    );
    let t0 = Instant::now();
    let tasks: Vec<_> = run
        .plan
        .iter()
        .cloned()
        .map(|f| tokio::spawn(fault_at(w.clone(), f, t0)))
        .collect();
    let mut done = Vec::new();
    for t in tasks {
        match t.await {
            Ok(d) => done.push(d),
            Err(e) => {
                FAULT_PANICS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                println!("a fault task panicked: {e}");
            }
        }
    }
    match traffic.await {
        Ok(Ok(n)) => println!("traffic: {n} matches"),
        other => println!("traffic ended early: {other:?}"),
    }
    traffic_stop.cancel();
    done
}

/// Fault tasks that panicked (a checker bug: the run fails).
static FAULT_PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Fault `f` at its time after `t0` (one of a kind at a time), bounded at 120 s.
async fn fault_at(w: Arc<World>, f: schedule::Fault, t0: Instant) -> Done {
    tokio::time::sleep_until((t0 + Duration::from_secs(f.at_s)).into()).await;
    let _g = w.locks[f.kind.lock_name()].lock().await;
    let start_ms = now_ms();
    let marks = faults::Marks::default();
    // A host fault waits for a healthy cluster, its outage and the rejoin.
    let bound = Duration::from_secs(if f.kind.is_host() { 240 } else { 120 });
    let result = tokio::time::timeout(bound, w.run(&f, &marks)).await;
    let struck = matches!(result, Ok(Ok(_))) || marks.began();
    let note = match result {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => format!("failed: {e:#}"),
        Err(_) => format!("timed out after {} s", bound.as_secs()),
    };
    println!("  [t+{:>4} s] {} — {note}", t0.elapsed().as_secs(), f.kind);
    let end_ms = now_ms();
    let (began_ms, ended_ms) = marks.get(start_ms, end_ms);
    Done {
        fault: f,
        start_ms,
        end_ms,
        began_ms,
        ended_ms,
        note,
        cold: marks.was_cold(),
        struck,
    }
}

/// Settle: the oracle's view of the final chain, then wait until every checked subscriber
/// agrees with it (or the bound passes).
async fn settle(args: &Args, w: &World) -> anyhow::Result<Owed> {
    let anvil_url = w.d.anvil.http_url();
    let end = oracle::head(&anvil_url).await?;
    let fills = oracle::fills(&anvil_url, w.start_block, end).await?;
    let canonical: BTreeSet<ws::Id> = fills.values().flatten().cloned().collect();
    let per_checked: Vec<BTreeSet<ws::Id>> = w
        .checked
        .iter()
        .map(|c| {
            c.wallets
                .iter()
                .filter_map(|x| fills.get(x))
                .flatten()
                .cloned()
                .collect()
        })
        .collect();
    let settle = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    while report::unsettled(w, &per_checked) > 0
        && settle.elapsed() < Duration::from_secs(args.settle_secs)
    {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "settled in {} s ({} unsettled); blocks {}..={end}, {} canonical fills",
        settle.elapsed().as_secs(),
        report::unsettled(w, &per_checked),
        w.start_block + 1,
        canonical.len()
    );
    let left = Duration::from_secs(args.settle_secs).saturating_sub(settle.elapsed());
    pending::settle(w, left).await?;
    Ok(Owed {
        canonical,
        per_checked,
    })
}

/// The tables a run prints (and writes into the doc).
struct Tables {
    table: String,
    recovery: String,
    reconnects: String,
    details: String,
    effects: String,
}

/// The verdict, the recovery per fault kind and the reconnects, printed (and written into
/// `--doc`); whether the run failed.
fn judge(
    args: &Args,
    run: &Run,
    w: &World,
    owed: &Owed,
    done: &[Done],
    pending: Option<pending::Verdict>,
) -> anyhow::Result<Option<String>> {
    let mut v = report::verdict(w, &owed.per_checked, &owed.canonical, done);
    let mut table = report::table(&mut v);
    let pending_failed = pending.as_ref().is_some_and(pending::Verdict::failed);
    if let Some(mut p) = pending {
        table += &format!(
            "\nPending tier (checked clients and endpoints; judged from receipts and the pool):\n\n{}",
            p.report()
        );
    }
    let effects = report::effects(w, done);
    let details = report::details(&v);
    println!("\n{details}\n{effects}");
    let lease_ms = 10_000;
    let streams = report::streams(w, done);
    let judged = availability::judge(done, &streams, lease_ms);
    let (hosts, hosts_failed) = host_faults::table(&w.host_figures.lock().unwrap(), done, &streams);
    if args.hosts > 0 {
        println!("host faults: time to writable, to the first delivery, to the rejoin\n\n{hosts}");
        if hosts_failed {
            if let Some(ha) = &w.ha {
                println!("{}", ha.log_tails(30));
            }
        }
    }
    let recovery = availability::table(&judged, lease_ms);
    println!("recovery per fault kind (budgets: docs/RELIABILITY.md)\n\n{recovery}");
    let edge_mode = args.edges > 0;
    let drops: Vec<Vec<(i64, String)>> = w
        .checked
        .iter()
        .map(|c| c.client.log.lock().unwrap().drops.clone())
        .collect();
    let reconnects = reconnects::count(done, &drops);
    let reconnect_table = reconnects.table(edge_mode);
    println!("{reconnect_table}");
    println!(
        "seed {}: {} min, {} faults ({}), run {} s\n\n{table}",
        run.seed,
        run.minutes,
        done.len(),
        report::summary(&run.plan),
        run.started.elapsed().as_secs()
    );
    if let Some(doc) = &args.doc {
        let tables = Tables {
            table: table.clone(),
            recovery: recovery.clone(),
            reconnects: reconnect_table,
            details,
            effects,
        };
        write_doc(doc, args, run, done.len(), &tables)?;
    }
    let failed = v.failed()
        || judged.failed()
        || reconnects.failed(edge_mode)
        || hosts_failed
        || pending_failed
        || FAULT_PANICS.load(std::sync::atomic::Ordering::Relaxed) > 0;
    if !failed {
        println!("check passed");
        return Ok(None);
    }
    let verdict = format!("CHECK FAILED (seed {})", run.seed);
    println!("{verdict}");
    Ok(Some(format!(
        "recovery per fault kind\n\n{recovery}\n{table}\n{verdict}"
    )))
}

/// The run's tables written into `doc` between its markers (`check:run`, or `check:edge-run` in
/// edge mode).
fn write_doc(
    doc: &std::path::Path,
    args: &Args,
    run: &Run,
    faults: usize,
    t: &Tables,
) -> anyhow::Result<()> {
    let rev = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let (seed, mode, minutes) = (run.seed, &run.mode, run.minutes);
    let (table, recovery, reconnect_table, effects) =
        (&t.table, &t.recovery, &t.reconnects, &t.effects);
    let body = format!(
        "Seed **{seed}**, {mode}, {minutes} min of traffic and faults ({} checked + {} churn accounts, a block every {} ms), rev `{rev}`, {} UTC; run took {} s.\n\nSchedule ({} faults): {}.\n\n{table}\nRecovery per fault kind (budgets above; `pmw-check` exits 1 over any):\n\n{recovery}\nClient reconnects, per fault under way when a checked client's socket dropped:\n\n{reconnect_table}\n<details><summary>Per subscriber (reconnects, close codes, receiver answers) and examples</summary>\n\n```\n{}```\n</details>\n\n<details><summary>Each fault's effect</summary>\n\n{effects}\n</details>\n",
        args.accounts, args.churn, args.block_ms, chrono::Utc::now().format("%Y-%m-%d %H:%M"), run.started.elapsed().as_secs(), faults, report::summary(&run.plan), t.details
    );
    let text = std::fs::read_to_string(doc)?;
    let (a, b) = if args.edges > 0 {
        ("<!-- check:edge-run -->", "<!-- /check:edge-run -->")
    } else {
        ("<!-- check:run -->", "<!-- /check:run -->")
    };
    let (i, j) = (text.find(a).map(|i| i + a.len()), text.find(b));
    match (i, j) {
        (Some(i), Some(j)) => {
            std::fs::write(doc, format!("{}\n{body}\n{}", &text[..i], &text[j..]))?
        }
        _ => println!(
            "{}: no {a} … {b} markers; the table is not written",
            doc.display()
        ),
    }
    Ok(())
}

#[cfg(test)]
mod setup_tests {
    use super::stack_components;

    #[test]
    fn multi_host_mode_leaves_postgres_to_the_hosts_and_edge_mode_adds_nats() {
        assert_eq!(stack_components(false, false), ["pg", "ch"]);
        assert_eq!(stack_components(true, false), ["pg", "ch", "nats"]);
        assert_eq!(stack_components(false, true), ["ch"]);
        assert_eq!(stack_components(true, true), ["ch"]);
    }
}

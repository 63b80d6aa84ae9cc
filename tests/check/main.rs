//! `pmw-check` (`scripts/check`): a seeded fault-and-churn checker with an independent oracle.
//! It runs the real suite as production does (pm2 with the production ecosystem, Caddy, pmw-sim
//! on a private anvil, a private Postgres/ClickHouse from `scripts/stack`), subscribes checked
//! accounts (fixed subscriptions, one resuming WebSocket client and one webhook endpoint each)
//! and churn accounts, does the seed's schedule of faults to the system, lets it settle, reads
//! the canonical chain itself and reports what each subscriber lost, holds in excess, got twice
//! or out of order. Exit 1 on any lost, phantom, duplicated (WebSocket) or out-of-order delivery.

mod availability;
mod edge_faults;
mod faults;
mod hooks;
mod oracle;
mod reconnects;
mod report;
mod schedule;
mod ws;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use pmw_sim::{demo_wallets, RunConfig};
use pmw_testkit::{eventually, PrivateStack};
use pmw_tests::harness::{account, Drill, Opts};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use faults::{Checked, Churn, Done, World};
use hooks::Hook;
use ws::{now_ms, WsClient};

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
    /// Write the table into this markdown file (between `<!-- check:run -->` markers, or
    /// `<!-- check:edge-run -->` in edge mode).
    #[arg(long)]
    doc: Option<std::path::PathBuf>,
}

fn hex(a: &pmw_core::Address) -> String {
    a.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| rand::random::<u16>().into());
    let minutes = args.minutes.max(1.0);
    let wallets = demo_wallets(6);
    let plan = schedule::generate(
        seed,
        minutes.ceil() as u64,
        args.accounts.max(1),
        args.churn.max(1),
        wallets.len(),
        args.edges,
    );
    let span_s = (minutes * 60.0) as u64;
    let mode = if args.edges > 0 {
        format!("edge mode ({} edges, 3 NATS nodes)", args.edges)
    } else {
        "single-process mode".to_string()
    };
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
    let started = Instant::now();

    let components: &'static [&'static str] = if args.edges > 0 {
        &["pg", "ch", "nats"]
    } else {
        &["pg", "ch"]
    };
    let stack =
        Arc::new(tokio::task::spawn_blocking(move || PrivateStack::start_with(components)).await?);
    let d = Drill::start_with(Opts {
        stack: Some(stack.env.clone()),
        rpc_proxy: false,
        rpc_providers: schedule::PROVIDERS,
        apps: Some("pmw-live,pmw-push-a,pmw-push-b,pmw-api,pmw-stats"),
        env: vec![
            ("PMW_API_ALLOW_PRIVATE_WEBHOOKS", "true"),
            ("PMW_PUSH_ALLOW_PRIVATE_WEBHOOKS", "true"),
            ("PMW_API_RATE_PER_SEC", "1000"),
            ("PMW_API_RATE_BURST", "1000"),
        ],
        clients: Some(0),
        edges: args.edges,
    })
    .await;
    let site = format!("127.0.0.1:{}", d.site);
    let anvil_url = d.anvil.http_url();
    let pg = d.db.connect().await;
    let mut checked = Vec::new();
    let http = reqwest::Client::new();
    let mut w = World {
        d,
        stack,
        site: site.clone(),
        http,
        wallets: wallets.iter().map(hex).collect(),
        checked: Vec::new(),
        churn: Vec::new(),
        start_block: 0,
        endpoint_seq: Default::default(),
        reorgs: Default::default(),
        locks: HashMap::new(),
        nats_lock: Default::default(),
    };
    for i in 0..args.accounts {
        let mine = vec![wallets[i % 6], wallets[(i + 2) % 6]];
        let key = account(&pg, &format!("check-{i}"), &mine).await;
        let hook = Hook::start(seed ^ ((i as u64) << 8), true).await;
        checked.push(Checked {
            wallets: mine.iter().map(hex).collect(),
            client: WsClient::new(&key),
            hook,
            endpoint: 0,
            key,
        });
    }
    for i in 0..args.churn {
        let key = account(&pg, &format!("churn-{i}"), &[wallets[(i + 1) % 6]]).await;
        let hook = Hook::start(seed ^ ((1000 + i as u64) << 8), true).await;
        w.churn.push(Churn {
            client: WsClient::new(&key),
            hook,
            endpoints: Default::default(),
            paths: Default::default(),
            paused: Default::default(),
            follows: std::sync::Mutex::new(vec![(i + 1) % 6]),
        });
    }
    pg.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
        .await?;
    for c in &mut checked {
        let v = w
            .api("POST", "/v1/webhooks", &c.key, json!({"url": c.hook.url()}))
            .await?;
        c.hook.add_secret(v["secret"].as_str().unwrap_or_default());
        c.endpoint = v["id"].as_i64().unwrap_or_default();
    }
    w.checked = checked;
    for k in schedule::Kind::NAMES {
        w.locks.insert(k, tokio::sync::Mutex::new(()));
    }
    let stop = CancellationToken::new();
    for c in w
        .checked
        .iter()
        .map(|c| &c.client)
        .chain(w.churn.iter().map(|c| &c.client))
    {
        tokio::spawn(c.clone().run(site.clone(), stop.clone()));
    }
    let connected = eventually(Duration::from_secs(60), || async {
        w.checked
            .iter()
            .map(|c| &c.client)
            .chain(w.churn.iter().map(|c| &c.client))
            .all(|c| c.log.lock().unwrap().first_hello_ms.is_some())
    })
    .await;
    anyhow::ensure!(connected, "not every client connected through caddy");
    w.start_block = oracle::head(&anvil_url).await?;
    println!(
        "setup took {} s; start block {}",
        started.elapsed().as_secs(),
        w.start_block
    );

    // Traffic and the schedule.
    let traffic_stop = CancellationToken::new();
    let traffic = w.d.sim.spawn(
        RunConfig {
            matches_per_block: 1,
            interval: Duration::from_millis(args.block_ms),
            count: None,
            duration: Some(Duration::from_secs(span_s)),
        },
        traffic_stop.clone(),
    );
    let w = Arc::new(w);
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for f in plan.clone() {
        let w = w.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until((t0 + Duration::from_secs(f.at_s)).into()).await;
            let _g = w.locks[f.kind.name()].lock().await;
            let start_ms = now_ms();
            let marks = faults::Marks::default();
            let note = match tokio::time::timeout(Duration::from_secs(120), w.run(&f, &marks)).await
            {
                Ok(Ok(n)) => n,
                Ok(Err(e)) => format!("failed: {e:#}"),
                Err(_) => "timed out after 120 s".into(),
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
            }
        }));
    }
    let mut done = Vec::new();
    for t in tasks {
        match t.await {
            Ok(d) => done.push(d),
            Err(e) => println!("a fault task panicked: {e}"),
        }
    }
    match traffic.await {
        Ok(Ok(n)) => println!("traffic: {n} matches"),
        other => println!("traffic ended early: {other:?}"),
    }
    traffic_stop.cancel();

    // Settle: the oracle's view of the final chain, then wait until every checked subscriber
    // agrees with it (or the bound passes).
    let end = oracle::head(&anvil_url).await?;
    let fills = oracle::fills(&anvil_url, w.start_block, end).await?;
    let canonical: BTreeSet<ws::Id> = fills.values().flatten().cloned().collect();
    let owed: Vec<BTreeSet<ws::Id>> = w
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
    while report::unsettled(&w, &owed) > 0
        && settle.elapsed() < Duration::from_secs(args.settle_secs)
    {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "settled in {} s ({} unsettled); blocks {}..={end}, {} canonical fills",
        settle.elapsed().as_secs(),
        report::unsettled(&w, &owed),
        w.start_block + 1,
        canonical.len()
    );
    stop.cancel();

    let mut v = report::verdict(&w, &owed, &canonical);
    let table = report::table(&mut v);
    let effects = report::effects(&w, &done);
    println!("\n{}\n{}", report::details(&v), effects);
    let lease_ms = 10_000;
    let judged = availability::judge(&done, &report::streams(&w, &done), lease_ms);
    let recovery = availability::table(&judged, lease_ms);
    println!("recovery per fault kind (budgets: docs/RELIABILITY.md)\n\n{recovery}");
    let edge_mode = args.edges > 0;
    let drops: Vec<Vec<(i64, String)>> = w
        .checked
        .iter()
        .map(|c| c.client.log.lock().unwrap().drops.clone())
        .collect();
    let reconnects = reconnects::count(&done, &drops);
    let reconnect_table = reconnects.table(edge_mode);
    println!("{reconnect_table}");
    println!(
        "seed {seed}: {minutes} min, {} faults ({}), run {} s\n\n{table}",
        done.len(),
        report::summary(&plan),
        started.elapsed().as_secs()
    );
    if let Some(doc) = &args.doc {
        let rev = std::process::Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let body = format!(
            "Seed **{seed}**, {mode}, {minutes} min of traffic and faults ({} checked + {} churn accounts, a block every {} ms), rev `{rev}`, {} UTC; run took {} s.\n\nSchedule ({} faults): {}.\n\n{table}\nRecovery per fault kind (budgets above; `pmw-check` exits 1 over any):\n\n{recovery}\nClient reconnects, per fault under way when a checked client's socket dropped:\n\n{reconnect_table}\n<details><summary>Per subscriber (reconnects, close codes, receiver answers) and examples</summary>\n\n```\n{}```\n</details>\n\n<details><summary>Each fault's effect</summary>\n\n{effects}\n</details>\n",
            args.accounts, args.churn, args.block_ms, chrono::Utc::now().format("%Y-%m-%d %H:%M"), started.elapsed().as_secs(), done.len(), report::summary(&plan), report::details(&v)
        );
        let text = std::fs::read_to_string(doc)?;
        let (a, b) = if edge_mode {
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
    }
    let failed = v.failed() || judged.failed() || reconnects.failed(edge_mode);
    println!(
        "{}",
        if failed {
            "CHECK FAILED (seed {seed})"
        } else {
            "check passed"
        }
        .replace("{seed}", &seed.to_string())
    );
    // Stop the drill stack (pm2, Caddy, anvil) before the private database goes.
    drop(Arc::try_unwrap(w).ok());
    std::process::exit(i32::from(failed));
}

//! Operational drills on real processes: pm2 runs the production ecosystem file (live, push-a,
//! push-b, api, and stats for supervision, from this build), real Caddy fronts push with the
//! production Caddyfile, pmw-sim trades on a private anvil, and 100 WebSocket clients resume by
//! cursor through Caddy. Figures are printed and written into docs/OPERATIONS.md; the absolute
//! invariants (0 lost, 0 duplicated, 0 out of order) asserted. `supervision` proves pm2's
//! restart contract for every exit path; `alerts` makes the alert rules fire in a real
//! Prometheus.

#[path = "drills/alerts.rs"]
mod alerts;
#[path = "drills/churn.rs"]
mod churn;
#[path = "drills/clickhouse.rs"]
mod clickhouse;
#[path = "drills/edge.rs"]
mod edge;
#[path = "drills/log_secrets.rs"]
mod log_secrets;
#[path = "drills/security.rs"]
mod security;
#[path = "drills/supervision.rs"]
mod supervision;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pmw_core::UnixMs;
use pmw_sim::RunConfig;
use pmw_testkit::{eventually_every, repo_root};
use pmw_tools::harness::{exits, signal, Drill, Opts};
use pmw_tools::verdict;
use pmw_tools::{clients, harness};
use tokio_util::sync::CancellationToken;

/// Run `scripts/deploy/<what> --no-build` against the drill (its environment and pm2, the
/// Caddy check with the first account's key), expecting `revision`, with `extra` on top;
/// whether it succeeded, and its log.
async fn deploy(d: &Drill, what: &str, revision: &str, extra: &[(&str, &str)]) -> (bool, String) {
    let out = tokio::process::Command::new(repo_root().join("scripts/deploy").join(what))
        .arg("--no-build")
        .envs(d.env.iter().cloned())
        .env("PM2_HOME", d.pm2.home.path())
        .env("PMW_CADDY_URL", format!("http://127.0.0.1:{}", d.site))
        .env("PMW_DEPLOY_KEY", &d.accounts[0].0)
        .env("PMW_EXPECT_REVISION", revision)
        .envs(extra.iter().copied())
        .output()
        .await
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    (out.status.success(), log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_rolling_push_restart_under_load_through_caddy_loses_nothing() {
    let d = Drill::start().await;
    let sim = &d.sim;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let traffic = sim.spawn(
        RunConfig {
            matches_per_block: 2,
            interval: Duration::from_millis(100),
            count: Some(160),
            duration: None,
        },
        CancellationToken::new(),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The binaries under test report this build's revision: the script verifies it.
    let (ok, deploy_log) = deploy(&d, "push", pmw_core::build_info::REVISION, &[]).await;
    println!("{deploy_log}");
    assert!(ok, "scripts/deploy/push failed: {deploy_log}");
    assert!(
        deploy_log.contains("both push instances run revision"),
        "the deploy verified the running revision: {deploy_log}"
    );
    traffic.await.unwrap().unwrap();
    d.drain().await;
    let f = d.figures();
    verdict("rolling push restart", "rolling-restart", &f.to_string());
    assert!(
        f.reconnects >= 100,
        "every client was moved to the new leader ({} reconnects)",
        f.reconnects
    );
    f.assert_clean();
}

/// One kill -9 of the push leader: (takeover, killed one online again in pm2, killed one
/// beating as the standby), each from the kill.
async fn kill_9_the_leader(d: &Drill) -> (Duration, Duration, Duration) {
    let within = Duration::from_secs(60);
    let leader = d.leader().await;
    let other = if leader == "push-a" {
        "push-b"
    } else {
        "push-a"
    };
    // What takes over is a live standby.
    let standby = d.pm2.app(&format!("pmw-{other}"));
    d.wait_push_role(
        other,
        "standby",
        standby.pid,
        UnixMs::now().0 - 2_000,
        within,
    )
    .await;
    let before = d.pm2.app(&format!("pmw-{leader}"));
    let killed_ms = UnixMs::now().0;
    let t0 = Instant::now();
    signal(before.pid, "KILL");
    let fast = Duration::from_millis(20);
    let taken = eventually_every(within, fast, || async { d.leader().await != leader }).await;
    assert!(taken, "the standby never took over");
    let takeover = t0.elapsed();
    // pm2 brings the killed leader back, and it waits on the lock as the new standby.
    let back = d.pm2.wait_back(&before, within).await;
    let online = t0.elapsed();
    d.wait_push_role(&leader, "standby", back.pid, killed_ms, within)
        .await;
    let standby_again = t0.elapsed();
    assert_eq!(d.leader().await, other, "{other} still leads");
    (takeover, online, standby_again)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_leader_is_taken_over_and_loses_nothing() {
    let mut d = Drill::start().await;
    let traffic = d.sim.spawn(
        RunConfig {
            matches_per_block: 2,
            interval: Duration::from_millis(100),
            count: Some(300),
            duration: None,
        },
        CancellationToken::new(),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let first = kill_9_the_leader(&d).await;
    // A few seconds later, the new leader: the one killed first takes over again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = kill_9_the_leader(&d).await;
    traffic.await.unwrap().unwrap();
    d.drain().await;
    let f = d.figures();
    let ms = |(t, o, s): (Duration, Duration, Duration)| {
        format!(
            "takeover {} ms, the killed leader online again in pm2 {} ms and standby {} ms after the kill",
            t.as_millis(),
            o.as_millis(),
            s.as_millis()
        )
    };
    let figures = format!(
        "first kill: {}; second kill (of the new leader, 3 s later): {}; {f}",
        ms(first),
        ms(second)
    );
    verdict("kill -9", "kill-9", &figures);
    let _ = d.caddy.kill().await;
    f.assert_clean();
    assert!(
        f.reconnects >= 200,
        "every client resumed on the new leader, twice ({} reconnects)",
        f.reconnects
    );
}

/// A frozen leader (SIGSTOP under load): it keeps its Postgres session and its port accepts TCP,
/// so only the heartbeat lease frees the lock and only Caddy's active health check steers new
/// connections away from it; clients notice the silence (no heartbeat) and resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_sigstop_of_the_leader_is_taken_over_within_the_lease_and_loses_nothing() {
    let d = Drill::start_with(Opts {
        env: vec![("PMW_PUSH_LEASE_MS", "3000")],
        ..Opts::default()
    })
    .await;
    let traffic = d.sim.spawn(
        RunConfig {
            matches_per_block: 2,
            interval: Duration::from_millis(100),
            count: Some(200),
            duration: None,
        },
        CancellationToken::new(),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leader = d.leader().await;
    let frozen = d.pm2.app(&format!("pmw-{leader}"));
    let reconnects_before: usize = d
        .clients
        .iter()
        .map(|(_, l)| l.lock().unwrap().reconnects)
        .sum();
    let t0 = Instant::now();
    signal(frozen.pid, "STOP");
    let (within, fast) = (Duration::from_secs(60), Duration::from_millis(20));
    let taken = eventually_every(within, fast, || async { d.leader().await != leader }).await;
    assert!(taken, "the standby never took the frozen leader's lock");
    let takeover = t0.elapsed();
    // Every client is served by the new leader again (within the same minute).
    let reconnects = || -> usize {
        d.clients
            .iter()
            .map(|(_, l)| l.lock().unwrap().reconnects)
            .sum()
    };
    let left = within.saturating_sub(t0.elapsed());
    let all_served = eventually_every(left, fast, || async {
        reconnects() >= reconnects_before + d.clients.len()
    })
    .await;
    assert!(
        all_served,
        "clients were not all served again ({} reconnects)",
        reconnects()
    );
    let served = t0.elapsed();
    traffic.await.unwrap().unwrap();
    // Thawed, the old leader finds its session gone and hands over for good (exit 75).
    signal(frozen.pid, "CONT");
    let back = d.pm2.wait_back(&frozen, Duration::from_secs(60)).await;
    d.drain().await;
    let f = d.figures();
    let figures = format!(
        "lease 3 s: the standby took the lock {} ms after SIGSTOP, every client served again {} ms after it; after SIGCONT the old leader exited 75 ({} exits) and came back as pid {}; {f}",
        takeover.as_millis(),
        served.as_millis(),
        exits(&d.pm2, &format!("pmw-{leader}"), 75),
        back.pid
    );
    verdict("sigstop", "sigstop", &figures);
    assert!(
        exits(&d.pm2, &format!("pmw-{leader}"), 75) >= 1,
        "the thawed leader exits 75"
    );
    f.assert_clean();
}

/// The checks a non-200 `/v1/ready` answer failed, with their reasons (else the body's start).
fn failing_checks(body: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    let failed: Vec<String> = v["checks"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, c)| c["ok"] == false)
        .map(|(name, c)| format!("{name}: {}", c["reason"].as_str().unwrap_or("?")))
        .collect();
    if failed.is_empty() {
        body.chars().take(300).collect()
    } else {
        failed.join("; ")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_exits_75_is_restarted_by_pm2_and_loses_nothing() {
    let ps = pmw_testkit::PrivateStack::start();
    let d = Drill::start_with(Opts {
        stack: Some(ps.env.clone()),
        ..Opts::default()
    })
    .await;
    let traffic = d.sim.spawn(
        RunConfig {
            matches_per_block: 2,
            interval: Duration::from_millis(100),
            count: Some(160),
            duration: None,
        },
        CancellationToken::new(),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    // /v1/ready through Caddy, every 100 ms.
    let ready_log: Arc<Mutex<Vec<(Instant, u16)>>> = Arc::default();
    let reasons: Arc<Mutex<Vec<String>>> = Arc::default();
    let poll_stop = CancellationToken::new();
    {
        let (log, why, stop, url) = (
            ready_log.clone(),
            reasons.clone(),
            poll_stop.clone(),
            format!("http://127.0.0.1:{}/v1/ready", d.site),
        );
        tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()
                .unwrap();
            while !stop.is_cancelled() {
                let (status, body) = match http.get(&url).send().await {
                    Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                    Err(e) => (0, e.to_string()),
                };
                if status != 200 {
                    why.lock().unwrap().push(failing_checks(&body));
                }
                log.lock().unwrap().push((Instant::now(), status));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    let t0 = Instant::now();
    ps.run(&["pg-ctl", "restart", "-m", "fast", "-w"]);
    let pg_back = t0.elapsed();
    // All online again: every app restarted by pm2 and /v1/ready 200 again.
    let back = eventually_every(
        Duration::from_secs(120),
        Duration::from_millis(100),
        || async {
            let ok200 = ready_log
                .lock()
                .unwrap()
                .iter()
                .any(|(t, s)| *t > t0 + pg_back && *s == 200);
            let jlist = d.pm2.run(&["jlist"]);
            let apps: Vec<serde_json::Value> =
                serde_json::from_slice(&jlist.stdout).unwrap_or_default();
            let online =
                !apps.is_empty() && apps.iter().all(|a| a["pm2_env"]["status"] == "online");
            if ok200 && online {
                Ok(t0.elapsed())
            } else {
                Err(apps)
            }
        },
    )
    .await;
    let all_online = back.unwrap_or_else(|apps| panic!("services did not all come back: {apps:?}"));
    traffic.await.unwrap().unwrap();
    d.drain().await;
    poll_stop.cancel();
    let f = d.figures();
    let statuses = ready_log.lock().unwrap().clone();
    let saw_503 = statuses.iter().any(|(t, s)| *t >= t0 && *s != 200);
    // Ready again at the end: polled until 200 (a probe can time out on a loaded machine; the
    // reasons of every non-200 answer are printed).
    let last_ok = statuses.last().is_some_and(|(_, s)| *s == 200) || {
        let http = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{}/v1/ready", d.site);
        eventually_every(
            Duration::from_secs(30),
            Duration::from_millis(200),
            || async { http.get(&url).send().await.is_ok_and(|r| r.status() == 200) },
        )
        .await
    };
    let why = reasons.lock().unwrap().clone();
    println!(
        "postgres restart drill: {} non-200 /v1/ready answers; last ones: {:?}",
        why.len(),
        &why[why.len().saturating_sub(3)..]
    );
    let exited: Vec<(String, usize)> = ["pmw-live", "pmw-push-a", "pmw-push-b"]
        .iter()
        .map(|a| (a.to_string(), exits(&d.pm2, a, 75)))
        .collect();
    let figures = format!(
        "Postgres back in {} ms, all services online in {} ms, push gap (max client reconnect gap) {} ms; exits with 75: {exited:?}; ready 503 during the gap: {saw_503}, 200 after: {last_ok}; {f}",
        pg_back.as_millis(),
        all_online.as_millis(),
        f.gap_max
    );
    verdict("postgres restart", "postgres-restart", &figures);
    for (app, n) in &exited {
        assert!(
            *n >= 1,
            "{app} lost its session and must exit 75 (pm2 log shows {n})"
        );
    }
    assert!(saw_503, "/v1/ready must not stay 200 through the gap");
    assert!(last_ok, "/v1/ready is 200 after");
    f.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_websocket_cut_is_logged_and_misses_no_block() {
    let d = Drill::start_with(Opts {
        rpc_proxy: true,
        ..Opts::default()
    })
    .await;
    let proxy = d.rpc_proxy.as_ref().expect("proxied rpc");
    let traffic = d.sim.spawn(
        RunConfig {
            matches_per_block: 2,
            interval: Duration::from_millis(100),
            count: Some(120),
            duration: None,
        },
        CancellationToken::new(),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let first_block = d.start_cursor.block + 1;
    proxy.cut();
    tokio::time::sleep(Duration::from_secs(5)).await;
    proxy.restore();
    traffic.await.unwrap().unwrap();
    d.drain().await;
    let f = d.figures();
    let head = d.sim.rpc().latest_block().await.unwrap().number.0;
    let ingested: Vec<u64> = d
        .db
        .ch
        .query("SELECT DISTINCT block_number FROM ingest_latency WHERE block_number >= ? ORDER BY block_number")
        .bind(first_block)
        .fetch_all()
        .await
        .unwrap();
    let expected: Vec<u64> = (first_block..=head).collect();
    let missed = expected.iter().filter(|b| !ingested.contains(b)).count();
    let logs = std::fs::read_dir(d.pm2.home.path().join("logs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("pmw-live"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    let lost_logged = logs.matches("block listener lost").count();
    let figures = format!(
        "WebSocket to the RPC cut for 5 s: `block listener lost` logged {lost_logged} times, blocks {}..={head}: missed {missed}, reconnections through the proxy {}; {f}",
        first_block,
        proxy.accepted()
    );
    verdict("rpc cut", "rpc-cut", &figures);
    assert!(lost_logged >= 1, "live must log `block listener lost`");
    assert_eq!(missed, 0, "0 blocks missed");
    f.assert_clean();
}

/// Three raced RPC providers under pm2 (`PMW_LIVE_RPC_PROVIDERS`, the default quorum of 2), one
/// cut (WebSocket and HTTP) for 10 s under load: live demotes it, takes every head from the two
/// others (which agree), promotes it back; no block missed or backfilled, clients lose nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_three_rpc_providers_cut_misses_no_block() {
    let d = Drill::start_with(Opts {
        rpc_providers: 3,
        ..Opts::default()
    })
    .await;
    let cut = &d.providers[0];
    let traffic = d.sim.spawn(
        RunConfig {
            matches_per_block: 2,
            interval: Duration::from_millis(100),
            count: Some(160),
            duration: None,
        },
        CancellationToken::new(),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let first_block = d.start_cursor.block + 1;
    cut.ws.cut();
    cut.http.cut();
    tokio::time::sleep(Duration::from_secs(10)).await;
    cut.ws.restore();
    cut.http.restore();
    traffic.await.unwrap().unwrap();
    d.drain().await;
    let f = d.figures();
    let head = d.sim.rpc().latest_block().await.unwrap().number.0;
    let rows: Vec<(u64, u8)> = d
        .db
        .ch
        .query("SELECT block_number, any(backfilled) FROM ingest_latency WHERE block_number >= ? GROUP BY block_number ORDER BY block_number")
        .bind(first_block)
        .fetch_all()
        .await
        .unwrap();
    let expected: Vec<u64> = (first_block..=head).collect();
    let ingested: Vec<u64> = rows.iter().map(|r| r.0).collect();
    let missed = expected.iter().filter(|b| !ingested.contains(b)).count();
    let backfilled = rows.iter().filter(|r| r.1 == 1).count();
    let logs = std::fs::read_dir(d.pm2.home.path().join("logs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("pmw-live"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    let (demoted, promoted) = (
        logs.matches("provider demoted").count(),
        logs.matches("provider promoted").count(),
    );
    let figures = format!(
        "provider {} of 2 cut for 10 s: demoted {demoted} times, promoted {promoted} times; blocks {first_block}..={head}: missed {missed}, backfilled {backfilled}; {f}",
        cut.name
    );
    verdict("provider cut", "provider-cut", &figures);
    assert!(demoted >= 1, "live must demote the cut provider");
    assert_eq!((missed, backfilled), (0, 0), "every block seen live");
    f.assert_clean();
}

/// `scripts/deploy/{live,api,stats} --no-build` under load: each restarts exactly its service
/// (live and stats: both members of the pair, standby first; the API: pmw-api, then pmw-api-b) under pm2 and verifies that the restarted process reports the expected build revision; an
/// expected revision the binary does not carry fails the deploy. Clients lose nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_scripts_restart_live_api_and_stats_and_verify_the_revision() {
    // Live and stats as pairs (issue 44): their deploys roll the standby, then the leader.
    let d = Drill::start_with(Opts {
        apps: Some(
            "pmw-live,pmw-live-b,pmw-push-a,pmw-push-b,pmw-api,pmw-api-b,pmw-stats,pmw-stats-b",
        ),
        ..Opts::default()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let traffic = d.sim.spawn(
        RunConfig {
            matches_per_block: 2,
            interval: Duration::from_millis(100),
            count: Some(120),
            duration: None,
        },
        CancellationToken::new(),
    );
    let deploy = |service: &'static str, expect: &'static str| {
        deploy(&d, service, expect, &[("PMW_DEPLOY_VERIFY_SECS", "15")])
    };
    let mut restarted = Vec::new();
    for service in ["live", "api", "stats"] {
        let app = format!("pmw-{service}");
        let before = d.pm2.app(&app);
        let before_b = d.pm2.app(&format!("{app}-b"));
        let t0 = Instant::now();
        let (ok, log) = deploy(service, pmw_core::build_info::REVISION).await;
        assert!(ok, "scripts/deploy/{service} failed: {log}");
        // The API reports its members in turn and then the service; the writer pairs both members.
        let verified = if service == "api" {
            format!("{app} runs revision {}", pmw_core::build_info::REVISION)
        } else {
            format!(
                "both {app} instances run revision {}",
                pmw_core::build_info::REVISION
            )
        };
        assert!(
            log.contains(&verified),
            "the deploy verified the running revision: {log}"
        );
        let after = d.pm2.app(&app);
        assert_ne!(before.pid, after.pid, "{app} was restarted");
        // Live, the API and stats run as pairs here: the deploy restarts both members.
        let after_b = d.pm2.app(&format!("{app}-b"));
        assert_ne!(before_b.pid, after_b.pid, "{app}-b was restarted");
        restarted.push(format!("{app} {} ms", t0.elapsed().as_millis()));
    }
    // A binary that is not the expected build fails the deploy, naming both revisions.
    let (ok, log) = deploy("stats", "0ld0ld0ld0ld").await;
    assert!(!ok, "a wrong revision must fail the deploy: {log}");
    assert!(
        log.contains("does not run revision 0ld0ld0ld0ld"),
        "the failure names the expected revision: {log}"
    );
    traffic.await.unwrap().unwrap();
    d.drain().await;
    let f = d.figures();
    let figures = format!(
        "deploys with the revision verified: {}; a wrong expected revision failed the deploy; {f}",
        restarted.join(", ")
    );
    verdict("deploy scripts", "deploy-scripts", &figures);
    f.assert_clean();
}

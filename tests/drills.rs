//! Operational drills on real processes: pm2 runs the production ecosystem file (live, push-a,
//! push-b from this build), real Caddy fronts push with the production Caddyfile, pmw-sim
//! trades on a private anvil, and 100 WebSocket clients resume by cursor through Caddy.
//! Figures are printed; the absolute invariants (0 lost, 0 duplicated, 0 out of order) asserted.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use pmw_core::{Cursor, UnixMs};
use pmw_sim::anvil::Anvil;
use pmw_sim::{demo_wallets, RunConfig, Sim};
use pmw_testkit::{repo_root, stack_env, TestDb};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// pm2 with a private home, killed on drop.
struct Pm2 {
    home: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Pm2 {
    fn bin() -> PathBuf {
        repo_root().join("tools/pm2/node_modules/.bin/pm2")
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(Self::bin())
            .args(args)
            .envs(self.env.iter().cloned())
            .env("PM2_HOME", self.home.path())
            .stdin(Stdio::null())
            .output()
            .expect("pm2 (scripts/install pm2)")
    }
}

impl Drop for Pm2 {
    fn drop(&mut self) {
        let _ = self.run(&["kill"]);
    }
}

#[derive(Default)]
struct ClientLog {
    first_hello: Option<Cursor>,
    trades: Vec<Cursor>,
    duplicates: usize,
    out_of_order: usize,
    reconnects: usize,
    gaps_ms: Vec<u64>,
}

/// A client that resumes by cursor after every disconnect, as `pmwctl watch` does.
async fn resilient_client(
    url: String,
    key: String,
    log: Arc<Mutex<ClientLog>>,
    stop: CancellationToken,
) {
    let mut last: Option<Cursor> = None;
    let mut dropped_at: Option<Instant> = None;
    while !stop.is_cancelled() {
        let full = match last {
            Some(c) => format!("{url}?since={c}"),
            None => url.clone(),
        };
        let mut req = full.into_client_request().unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
        let ws = match tokio::time::timeout(
            Duration::from_secs(5),
            tokio_tungstenite::connect_async(req),
        )
        .await
        {
            Ok(Ok((ws, _))) => ws,
            _ => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (_sink, mut stream) = ws.split();
        loop {
            let msg = tokio::select! {
                m = stream.next() => m,
                _ = stop.cancelled() => return,
            };
            let Some(Ok(msg)) = msg else { break };
            let Message::Text(t) = msg else {
                if matches!(msg, Message::Close(_)) {
                    break;
                }
                continue;
            };
            let v: serde_json::Value = serde_json::from_str(&t).unwrap();
            let mut l = log.lock().unwrap();
            match v["type"].as_str() {
                Some("hello") => {
                    // No trade yet: the hello's cursor is where this stream starts, so it is the
                    // resume point (without it, trades dispatched before a reconnect are missed).
                    if last.is_none() {
                        last = v["cursor"].as_str().and_then(|c| c.parse().ok());
                    }
                    if l.first_hello.is_none() {
                        l.first_hello = last;
                    }
                    if let Some(at) = dropped_at.take() {
                        l.gaps_ms.push(at.elapsed().as_millis() as u64);
                        l.reconnects += 1;
                    }
                }
                Some("trade") => {
                    let c: Cursor = v["cursor"].as_str().unwrap().parse().unwrap();
                    if l.trades.contains(&c) {
                        l.duplicates += 1;
                    } else if last.is_some_and(|p| c < p) {
                        l.out_of_order += 1;
                        l.trades.push(c);
                    } else {
                        l.trades.push(c);
                    }
                    last = Some(c);
                }
                _ => {}
            }
        }
        dropped_at.get_or_insert_with(Instant::now);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pct(v: &mut [u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

/// The drill stack: a private database and chain, pm2 running live + push-a + push-b from the
/// production ecosystem file, Caddy with the production Caddyfile, 10 accounts and 100
/// resuming clients connected through Caddy.
struct Drill {
    db: TestDb,
    sim: Sim,
    _anvil: Anvil,
    pm2: Pm2,
    caddy: tokio::process::Child,
    env: Vec<(String, String)>,
    site: u16,
    accounts: Vec<(String, Vec<pmw_core::Address>)>,
    clients: Vec<(Vec<pmw_core::Address>, Arc<Mutex<ClientLog>>)>,
    start_cursor: Cursor,
    stop: CancellationToken,
    rpc_proxy: Option<pmw_testkit::TcpProxy>,
}

/// How a drill's stack is put together.
#[derive(Default)]
struct Opts {
    /// The stack holding Postgres/ClickHouse (default: the shared one).
    stack: Option<pmw_testkit::StackEnv>,
    /// Put live's WebSocket RPC behind a breakable proxy.
    rpc_proxy: bool,
}

impl Drill {
    async fn start() -> Drill {
        Drill::start_with(Opts::default()).await
    }

    async fn start_with(opts: Opts) -> Drill {
        let stack = opts.stack.clone().unwrap_or_else(|| stack_env().clone());
        let db = TestDb::new_on(&stack).await;
        let anvil = Anvil::spawn().await.unwrap();
        let sim = Sim::connect(&anvil.http_url()).await.unwrap();
        sim.install_emitters().await.unwrap();
        let head = sim.rpc().latest_block().await.unwrap().number.0;
        let rpc_proxy = if opts.rpc_proxy {
            Some(
                pmw_testkit::TcpProxy::start(
                    format!("127.0.0.1:{}", anvil.port()).parse().unwrap(),
                )
                .await,
            )
        } else {
            None
        };
        let (pa, pb, site, admin, api_port) = (
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
        );
        let mut env: Vec<(String, String)> = db.env();
        env.retain(|(k, _)| !k.starts_with("PMW_RPC"));
        env.extend([
            (
                "PMW_RPC_WS_URL".into(),
                match &rpc_proxy {
                    Some(p) => format!("ws://{}", p.addr),
                    None => anvil.ws_url(),
                },
            ),
            ("PMW_API_PORT".into(), api_port.to_string()),
            ("PMW_RPC_HTTP_URL".into(), anvil.http_url()),
            (
                "PMW_BIN_DIR".into(),
                repo_root()
                    .join("target/debug")
                    .to_string_lossy()
                    .into_owned(),
            ),
            ("PMW_PUSH_A_PORT".into(), pa.to_string()),
            ("PMW_PUSH_B_PORT".into(), pb.to_string()),
            ("PMW_LIVE_START_BLOCK".into(), (head + 1).to_string()),
            ("PMW_LIVE_POLL_INTERVAL_MS".into(), "200".into()),
            ("PMW_GAMMA_URL".into(), "http://127.0.0.1:9".into()),
            ("PMW_PUSH_LOCK_SEGMENT_MS".into(), "1000".into()),
            ("PMW_PUSH_WS_HEARTBEAT_MS".into(), "1000".into()),
            ("PMW_PG_BIN".into(), stack.get("PMW_PG_BIN").into()),
            ("PMW_STACK_DIR".into(), stack.get("PMW_STACK_DIR").into()),
        ]);
        let pm2 = Pm2 {
            home: tempfile::tempdir().unwrap(),
            env: env.clone(),
        };
        let eco = repo_root().join("deploy/pm2/ecosystem.config.js");
        let out = pm2.run(&[
            "start",
            eco.to_str().unwrap(),
            "--only",
            "pmw-live,pmw-push-a,pmw-push-b,pmw-api",
        ]);
        assert!(
            out.status.success(),
            "pm2 start: {}",
            String::from_utf8_lossy(&out.stderr)
        );

        let caddy = tokio::process::Command::new("caddy")
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(repo_root().join("caddy/Caddyfile"))
            .env("PMW_SITE", format!("http://127.0.0.1:{site}"))
            .env("PMW_PUSH_A", format!("127.0.0.1:{pa}"))
            .env("PMW_PUSH_B", format!("127.0.0.1:{pb}"))
            .env("PMW_API", format!("127.0.0.1:{api_port}"))
            .env("PMW_CADDY_ADMIN", format!("127.0.0.1:{admin}"))
            .env("HOME", pm2.home.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("caddy");

        // Accounts and 100 clients through Caddy.
        let pg = db.connect().await;
        let wallets = demo_wallets(6);
        let mut accounts = Vec::new();
        for i in 0..10usize {
            let now = UnixMs::now().0;
            let id: i64 = pg
                .query_one("INSERT INTO accounts (name, plan, created_ms) VALUES ('drill', 'pro', $1) RETURNING id", &[&now])
                .await
                .unwrap()
                .get(0);
            let (key, prefix) = pmw_core::auth::generate(pmw_core::auth::KEY_PREFIX);
            pg.execute(
                "INSERT INTO api_keys (account_id, prefix, key_hash, created_ms) VALUES ($1, $2, $3, $4)",
                &[&id, &prefix, &pmw_core::auth::hash_secret(&key).as_slice(), &now],
            )
            .await
            .unwrap();
            let mine: Vec<pmw_core::Address> = (0..2).map(|k| wallets[(i + k * 3) % 6]).collect();
            for w in &mine {
                pg.execute(
                    "INSERT INTO subscriptions (account_id, wallet, created_ms) VALUES ($1, $2, $3)",
                    &[&id, &w.as_bytes().as_slice(), &now],
                )
                .await
                .unwrap();
            }
            accounts.push((key, mine));
        }
        pg.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
            .await
            .unwrap();
        let url = format!("ws://127.0.0.1:{site}/v1/ws");
        // Wait until a leader serves through Caddy.
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let mut req = url.as_str().into_client_request().unwrap();
            req.headers_mut().insert(
                "authorization",
                format!("Bearer {}", accounts[0].0).parse().unwrap(),
            );
            if tokio_tungstenite::connect_async(req).await.is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no push leader reachable through caddy"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let start_cursor = Cursor {
            block: sim.rpc().latest_block().await.unwrap().number.0,
            log_index: pmw_core::types::cursor::MAX_LOG_INDEX,
        };
        let stop = CancellationToken::new();
        let mut clients = Vec::new();
        for n in 0..100usize {
            let (key, mine) = accounts[n % accounts.len()].clone();
            let log = Arc::new(Mutex::new(ClientLog::default()));
            tokio::spawn(resilient_client(
                url.clone(),
                key,
                log.clone(),
                stop.clone(),
            ));
            clients.push((mine, log));
        }
        // Every client is connected before any trade is emitted.
        let deadline = Instant::now() + Duration::from_secs(60);
        while clients
            .iter()
            .any(|(_, l)| l.lock().unwrap().first_hello.is_none())
        {
            assert!(
                Instant::now() < deadline,
                "not every client connected through caddy"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Drill {
            db,
            sim,
            _anvil: anvil,
            pm2,
            caddy,
            env,
            site,
            accounts,
            clients,
            start_cursor,
            stop,
            rpc_proxy,
        }
    }

    /// The push instance leading now (from push_epoch).
    async fn leader(&self) -> String {
        self.db
            .connect()
            .await
            .query_one("SELECT leader FROM push_epoch WHERE slot = 0", &[])
            .await
            .unwrap()
            .get(0)
    }

    /// Wait until the push cursor reaches the chain head, then let clients settle and stop them.
    async fn drain(&self) {
        let final_head = self.sim.rpc().latest_block().await.unwrap().number.0;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let b: Option<i64> = self
                .db
                .connect()
                .await
                .query_opt("SELECT block_number FROM push_cursor WHERE slot = 0", &[])
                .await
                .unwrap()
                .map(|r| r.get(0));
            if b.is_some_and(|b| b as u64 >= final_head) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "push never reached {final_head}: {b:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        self.stop.cancel();
    }

    /// (lost, duplicated, out of order, reconnects, gap p50, p99, max, frames) over all clients.
    fn figures(&self) -> Figures {
        let canonical = self.sim.canonical();
        let mut f = Figures::default();
        let mut gaps = Vec::new();
        for (mine, log) in &self.clients {
            let l = log.lock().unwrap();
            let expected: BTreeSet<Cursor> = canonical
                .iter()
                .filter(|e| mine.contains(&e.maker))
                .map(|e| Cursor {
                    block: e.block_number,
                    log_index: e.log_index as u32,
                })
                .filter(|c| *c > self.start_cursor)
                .collect();
            assert!(
                l.first_hello.is_some_and(|h| h <= self.start_cursor),
                "client started before the traffic"
            );
            let got: BTreeSet<Cursor> = l
                .trades
                .iter()
                .copied()
                .filter(|c| *c > self.start_cursor)
                .collect();
            assert!(
                l.first_hello.is_some_and(|h| h <= self.start_cursor),
                "client started before the traffic"
            );
            let missing: Vec<_> = expected.difference(&got).collect();
            if !missing.is_empty() && f.lost == 0 {
                println!(
                    "first client with losses: missing {missing:?}; received {:?}",
                    l.trades
                );
            }
            f.lost += missing.len();
            f.duplicated += l.duplicates;
            f.out_of_order += l.out_of_order;
            f.reconnects += l.reconnects;
            f.frames += l.trades.len();
            gaps.extend(l.gaps_ms.iter().copied());
        }
        f.gap_p50 = pct(&mut gaps, 0.5);
        f.gap_p99 = pct(&mut gaps, 0.99);
        f.gap_max = gaps.iter().max().copied().unwrap_or(0);
        f
    }
}

/// Write a drill's figures into docs/OPERATIONS.md between its markers (the doc's figures are
/// written by the drill run, never by hand). A lock file serialises concurrent drills.
fn record(drill: &str, figures: &str) {
    let doc = repo_root().join("docs/OPERATIONS.md");
    let lock = repo_root().join("docs/.OPERATIONS.md.lock");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock)
        .is_err()
    {
        assert!(Instant::now() < deadline, "docs lock held too long");
        std::thread::sleep(Duration::from_millis(20));
    }
    let result = (|| {
        let text = std::fs::read_to_string(&doc).ok()?;
        let (begin, end) = (
            format!("<!-- drill:{drill} -->"),
            format!("<!-- /drill:{drill} -->"),
        );
        let a = text.find(&begin)? + begin.len();
        let b = text.find(&end)?;
        let when = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC");
        let rev = std::process::Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .current_dir(repo_root())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let updated = format!(
            "{}\n{figures} (measured {when}, rev {rev})\n{}",
            &text[..a],
            &text[b..]
        );
        std::fs::write(&doc, updated).ok()
    })();
    let _ = std::fs::remove_file(&lock);
    assert!(
        result.is_some(),
        "docs/OPERATIONS.md lacks the markers for drill {drill}"
    );
}

#[derive(Debug, Default)]
struct Figures {
    lost: usize,
    duplicated: usize,
    out_of_order: usize,
    reconnects: usize,
    frames: usize,
    gap_p50: u64,
    gap_p99: u64,
    gap_max: u64,
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "100 clients, {} frames, lost {}, duplicated {}, out of order {}, reconnects {}, reconnect gap p50 {} ms p99 {} ms max {} ms",
            self.frames, self.lost, self.duplicated, self.out_of_order, self.reconnects, self.gap_p50, self.gap_p99, self.gap_max
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_push_restart_under_load_through_caddy_loses_nothing() {
    let d = Drill::start().await;
    let (sim, env, site, accounts) = (&d.sim, &d.env, d.site, &d.accounts);
    let pm2 = &d.pm2;
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
    let deploy = tokio::process::Command::new(repo_root().join("scripts/deploy/push"))
        .arg("--no-build")
        .envs(env.iter().cloned())
        .env("PM2_HOME", pm2.home.path())
        .env("PMW_CADDY_URL", format!("http://127.0.0.1:{site}"))
        .env("PMW_DEPLOY_KEY", &accounts[0].0)
        .output()
        .await
        .unwrap();
    let deploy_log = String::from_utf8_lossy(&deploy.stderr).to_string();
    println!("{deploy_log}");
    assert!(
        deploy.status.success(),
        "scripts/deploy/push failed: {deploy_log}"
    );
    traffic.await.unwrap().unwrap();
    d.drain().await;
    let f = d.figures();
    println!("rolling push restart drill: {f}");
    record("rolling-restart", &format!("{f}"));
    assert!(
        f.reconnects >= 100,
        "every client was moved to the new leader ({} reconnects)",
        f.reconnects
    );
    assert_eq!(
        (f.lost, f.duplicated, f.out_of_order),
        (0, 0, 0),
        "0 lost, 0 duplicated, 0 out of order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_leader_is_taken_over_and_loses_nothing() {
    let mut d = Drill::start().await;
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
    let leader = d.leader().await;
    let jlist = d.pm2.run(&["jlist"]);
    let apps: Vec<serde_json::Value> = serde_json::from_slice(&jlist.stdout).unwrap();
    let pid = apps
        .iter()
        .find(|a| a["name"] == format!("pmw-{leader}"))
        .unwrap()["pid"]
        .as_i64()
        .unwrap();
    let killed_at = Instant::now();
    assert!(std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while d.leader().await == leader {
        assert!(Instant::now() < deadline, "the standby never took over");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let takeover = killed_at.elapsed();
    traffic.await.unwrap().unwrap();
    d.drain().await;
    let f = d.figures();
    println!("kill -9 drill: takeover {} ms; {f}", takeover.as_millis());
    record(
        "kill-9",
        &format!("takeover {} ms; {f}", takeover.as_millis()),
    );
    let _ = d.caddy.kill().await;
    assert_eq!(
        (f.lost, f.duplicated, f.out_of_order),
        (0, 0, 0),
        "0 lost, 0 duplicated, 0 out of order"
    );
    assert!(
        f.reconnects >= 100,
        "every client resumed on the new leader"
    );
}

/// pm2's own log: how many times `app` exited at all.
fn any_exits(pm2: &Pm2, app: &str) -> usize {
    let log = std::fs::read_to_string(pm2.home.path().join("pm2.log")).unwrap_or_default();
    let needle = format!("App [{app}:");
    log.lines()
        .filter(|l| l.contains(&needle) && l.contains("exited with code"))
        .count()
}

/// pm2's own log of exits: how many times `app` exited with `code`.
fn exits(pm2: &Pm2, app: &str, code: i32) -> usize {
    let log = std::fs::read_to_string(pm2.home.path().join("pm2.log")).unwrap_or_default();
    let needle = format!("App [{app}:");
    log.lines()
        .filter(|l| l.contains(&needle) && l.contains(&format!("exited with code [{code}]")))
        .count()
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
    let poll_stop = CancellationToken::new();
    {
        let (log, stop, url) = (
            ready_log.clone(),
            poll_stop.clone(),
            format!("http://127.0.0.1:{}/v1/ready", d.site),
        );
        tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()
                .unwrap();
            while !stop.is_cancelled() {
                let status = http
                    .get(&url)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0);
                log.lock().unwrap().push((Instant::now(), status));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    let t0 = Instant::now();
    ps.run(&["pg-ctl", "restart", "-m", "fast", "-w"]);
    let pg_back = t0.elapsed();
    // All online again: every app restarted by pm2 and /v1/ready 200 again.
    let deadline = Instant::now() + Duration::from_secs(120);
    let all_online = loop {
        let ok200 = ready_log
            .lock()
            .unwrap()
            .iter()
            .any(|(t, s)| *t > t0 + pg_back && *s == 200);
        let jlist = d.pm2.run(&["jlist"]);
        let apps: Vec<serde_json::Value> =
            serde_json::from_slice(&jlist.stdout).unwrap_or_default();
        let online = !apps.is_empty() && apps.iter().all(|a| a["pm2_env"]["status"] == "online");
        if ok200 && online {
            break t0.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "services did not all come back: {apps:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    traffic.await.unwrap().unwrap();
    d.drain().await;
    poll_stop.cancel();
    let f = d.figures();
    let statuses = ready_log.lock().unwrap().clone();
    let saw_503 = statuses.iter().any(|(t, s)| *t >= t0 && *s != 200);
    let last_ok = statuses.last().is_some_and(|(_, s)| *s == 200);
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
    println!("postgres restart drill: {figures}");
    record("postgres-restart", &figures);
    for (app, n) in &exited {
        assert!(
            *n >= 1,
            "{app} lost its session and must exit 75 (pm2 log shows {n})"
        );
    }
    assert!(saw_503, "/v1/ready must not stay 200 through the gap");
    assert!(last_ok, "/v1/ready is 200 after");
    assert_eq!(
        (f.lost, f.duplicated, f.out_of_order),
        (0, 0, 0),
        "0 lost, 0 duplicated, 0 out of order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_down_30s_is_waited_out_and_loses_nothing() {
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
            count: Some(150),
            duration: None,
        },
        CancellationToken::new(),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    ps.run(&["down", "ch"]);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(30)).await;
    ps.run(&["up", "ch"]);
    let outage = t0.elapsed();
    traffic.await.unwrap().unwrap();
    d.drain().await;
    let caught_up = t0.elapsed();
    let f = d.figures();
    let restarts: Vec<(String, usize)> = ["pmw-live", "pmw-push-a", "pmw-push-b"]
        .iter()
        .map(|a| (a.to_string(), any_exits(&d.pm2, a)))
        .collect();
    let figures = format!(
        "ClickHouse unreachable for {} ms (stopped, 30 s, started); everything delivered {} ms after it stopped; service exits during the outage: {restarts:?}; {f}",
        outage.as_millis(),
        caught_up.as_millis()
    );
    println!("clickhouse outage drill: {figures}");
    record("clickhouse-outage", &figures);
    assert!(
        restarts.iter().all(|(_, n)| *n == 0),
        "live and push wait and retry, they do not exit: {restarts:?}"
    );
    assert_eq!(
        (f.lost, f.duplicated, f.out_of_order),
        (0, 0, 0),
        "0 lost, 0 duplicated, 0 out of order"
    );
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
    println!("rpc cut drill: {figures}");
    record("rpc-cut", &figures);
    assert!(lost_logged >= 1, "live must log `block listener lost`");
    assert_eq!(missed, 0, "0 blocks missed");
    assert_eq!(
        (f.lost, f.duplicated, f.out_of_order),
        (0, 0, 0),
        "0 lost, 0 duplicated, 0 out of order"
    );
}

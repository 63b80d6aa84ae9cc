//! The drill harness: pm2 with a private home running the production ecosystem file on this
//! build, real Caddy with the production Caddyfile, pmw-sim on a private anvil, a private
//! database, 100 resuming clients; and what the drills read back from pm2 and Postgres.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pmw_core::{Cursor, UnixMs};
use pmw_sim::anvil::Anvil;
use pmw_sim::{demo_wallets, Sim};
use pmw_testkit::{eventually, eventually_every, free_port, repo_root, stack_env, TestDb};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_util::sync::CancellationToken;

use crate::clients::{pct, resilient_client, ClientLog, Figures};
pub use crate::pm2::{any_exits, exits, App, Pm2};

/// An account on plan `pro` named `name`, with one API key (returned) and `wallets` followed,
/// written directly to Postgres (the caller notifies push when it needs to).
pub async fn account(
    pg: &tokio_postgres::Client,
    name: &str,
    wallets: &[pmw_core::Address],
) -> String {
    let now = UnixMs::now().0;
    let id: i64 = pg
        .query_one(
            "INSERT INTO accounts (name, plan, created_ms) VALUES ($1, 'pro', $2) RETURNING id",
            &[&name, &now],
        )
        .await
        .unwrap()
        .get(0);
    let (key, prefix) = pmw_core::auth::generate(pmw_core::auth::KEY_PREFIX);
    pg.execute(
        "INSERT INTO api_keys (account_id, prefix, key_hash, created_ms) VALUES ($1, $2, $3, $4)",
        &[
            &id,
            &prefix,
            &pmw_core::auth::hash_secret(&key).as_slice(),
            &now,
        ],
    )
    .await
    .unwrap();
    for w in wallets {
        pg.execute(
            "INSERT INTO subscriptions (account_id, wallet, created_ms) VALUES ($1, $2, $3)",
            &[&id, &w.as_bytes().as_slice(), &now],
        )
        .await
        .unwrap();
    }
    key
}

/// The drill stack: a private database and chain, pm2 running live + push-a + push-b + api (and
/// stats when asked) from the production ecosystem file, Caddy with the production Caddyfile,
/// 10 accounts and 100 resuming clients connected through Caddy.
pub struct Drill {
    pub db: TestDb,
    pub sim: Sim,
    pub anvil: Anvil,
    pub pm2: Pm2,
    pub caddy: tokio::process::Child,
    pub env: Vec<(String, String)>,
    pub site: u16,
    pub api_port: u16,
    pub stats_port: u16,
    pub accounts: Vec<(String, Vec<pmw_core::Address>)>,
    pub clients: Vec<(Vec<pmw_core::Address>, Arc<Mutex<ClientLog>>)>,
    pub start_cursor: Cursor,
    /// Private metrics ports: (Prometheus job, instance, port) of live, push-a, push-b, stats.
    pub metrics_ports: Vec<(&'static str, &'static str, u16)>,
    stop: CancellationToken,
    pub rpc_proxy: Option<pmw_testkit::TcpProxy>,
    /// With `Opts::rpc_providers`: each provider's proxies, in `PMW_LIVE_RPC_PROVIDERS` order.
    pub providers: Vec<ProviderProxy>,
}

/// One RPC provider of the drill: its WebSocket and its HTTP, each behind a breakable proxy to
/// the drill's anvil.
pub struct ProviderProxy {
    pub name: String,
    pub ws: pmw_testkit::TcpProxy,
    pub http: pmw_testkit::TcpProxy,
}

/// How a drill's stack is put together.
#[derive(Default)]
pub struct Opts {
    /// The stack holding Postgres/ClickHouse (default: the shared one).
    pub stack: Option<pmw_testkit::StackEnv>,
    /// Put live's WebSocket RPC behind a breakable proxy.
    pub rpc_proxy: bool,
    /// Race this many RPC providers (`PMW_LIVE_RPC_PROVIDERS`, named p0, p1, …), each with its
    /// WebSocket and HTTP behind proxies of their own (0: the one provider of `PMW_RPC_*`).
    pub rpc_providers: usize,
    /// The ecosystem apps pm2 starts (default: live, push-a, push-b, api).
    pub apps: Option<&'static str>,
    /// Extra environment for every app.
    pub env: Vec<(&'static str, &'static str)>,
    /// Resuming drill clients to start (default 100; `Some(0)` for none).
    pub clients: Option<usize>,
    /// Edge mode: this many pmw-edge apps serve `/v1/ws` through Caddy (0: push serves it).
    pub edges: usize,
}

impl Drill {
    pub async fn start() -> Drill {
        Drill::start_with(Opts::default()).await
    }

    pub async fn start_with(opts: Opts) -> Drill {
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
        let anvil_addr: std::net::SocketAddr =
            format!("127.0.0.1:{}", anvil.port()).parse().unwrap();
        let mut providers = Vec::new();
        for i in 0..opts.rpc_providers {
            providers.push(ProviderProxy {
                name: format!("p{i}"),
                ws: pmw_testkit::TcpProxy::start(anvil_addr).await,
                http: pmw_testkit::TcpProxy::start(anvil_addr).await,
            });
        }
        let (pa, pb, site, admin, api_port, stats_port) = (
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
        );
        let metrics_ports = vec![
            ("pmw-live", "live", free_port()),
            ("pmw-push", "push-a", free_port()),
            ("pmw-push", "push-b", free_port()),
            ("pmw-stats", "stats", free_port()),
        ];
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
            ("PMW_STATS_PORT".into(), stats_port.to_string()),
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
            (
                "PMW_LIVE_METRICS_PORT".into(),
                metrics_ports[0].2.to_string(),
            ),
            (
                "PMW_PUSH_A_METRICS_PORT".into(),
                metrics_ports[1].2.to_string(),
            ),
            (
                "PMW_PUSH_B_METRICS_PORT".into(),
                metrics_ports[2].2.to_string(),
            ),
            (
                "PMW_STATS_METRICS_PORT".into(),
                metrics_ports[3].2.to_string(),
            ),
            ("PMW_LIVE_START_BLOCK".into(), (head + 1).to_string()),
            ("PMW_LIVE_POLL_INTERVAL_MS".into(), "200".into()),
            ("PMW_GAMMA_URL".into(), "http://127.0.0.1:9".into()),
            ("PMW_PUSH_LOCK_SEGMENT_MS".into(), "1000".into()),
            ("PMW_PUSH_WS_HEARTBEAT_MS".into(), "1000".into()),
            // Readiness evaluated every 100 ms (default 1 s), so a sub-second Postgres restart
            // is seen as the 503 it is.
            ("PMW_API_READY_INTERVAL_MS".into(), "100".into()),
            ("PMW_PG_BIN".into(), stack.get("PMW_PG_BIN").into()),
            ("PMW_STACK_DIR".into(), stack.get("PMW_STACK_DIR").into()),
        ]);
        if !providers.is_empty() {
            let list: Vec<String> = providers
                .iter()
                .map(|p| format!("{}=ws://{}|http://{}", p.name, p.ws.addr, p.http.addr))
                .collect();
            env.push(("PMW_LIVE_RPC_PROVIDERS".into(), list.join(" ")));
        }
        let edges = crate::edge::Edges::new(opts.edges, stack.get("PMW_NATS_URLS"));
        env.extend(edges.env());
        env.extend(opts.env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let pm2 = Pm2 {
            home: tempfile::tempdir().unwrap(),
            env: env.clone(),
        };
        let eco = repo_root().join("deploy/pm2/ecosystem.config.js");
        let only = opts
            .apps
            .unwrap_or("pmw-live,pmw-push-a,pmw-push-b,pmw-api")
            .to_string()
            + &edges.apps();
        let out = pm2.run(&["start", eco.to_str().unwrap(), "--only", &only]);
        assert!(
            out.status.success(),
            "pm2 start: {}",
            String::from_utf8_lossy(&out.stderr)
        );

        let mut caddy_env = vec![
            ("PMW_SITE", format!("http://127.0.0.1:{site}")),
            ("PMW_PUSH_A", format!("127.0.0.1:{pa}")),
            ("PMW_PUSH_B", format!("127.0.0.1:{pb}")),
            ("PMW_API", format!("127.0.0.1:{api_port}")),
            ("PMW_CADDY_ADMIN", format!("127.0.0.1:{admin}")),
        ];
        caddy_env.extend(edges.caddy());
        let caddy = pmw_testkit::caddy(pm2.home.path(), &caddy_env);

        // Accounts and 100 clients through Caddy.
        let pg = db.connect().await;
        let wallets = demo_wallets(6);
        let mut accounts = Vec::new();
        for i in 0..10usize {
            let mine: Vec<pmw_core::Address> = (0..2).map(|k| wallets[(i + k * 3) % 6]).collect();
            let key = account(&pg, "drill", &mine).await;
            accounts.push((key, mine));
        }
        pg.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
            .await
            .unwrap();
        let url = format!("ws://127.0.0.1:{site}/v1/ws");
        // Wait until a leader serves through Caddy.
        let (within, t0) = (Duration::from_secs(90), Instant::now());
        let last_error = std::sync::Mutex::new(String::new());
        let reached = eventually_every(within, Duration::from_millis(200), || async {
            let mut req = url.as_str().into_client_request().unwrap();
            req.headers_mut().insert(
                "authorization",
                format!("Bearer {}", accounts[0].0).parse().unwrap(),
            );
            let r = tokio_tungstenite::connect_async(req).await;
            if let Err(e) = &r {
                *last_error.lock().unwrap() = e.to_string();
            }
            r.is_ok()
        })
        .await;
        // What the last attempt got (Caddy's 502/503, push's 401/429, a refused port) and
        // Caddy's own log (printed with the apps' on failure) say which hop it was.
        assert!(
            reached,
            "no push leader reachable through caddy (last attempt: {})",
            last_error.lock().unwrap()
        );
        // And, when the API runs, until it answers through Caddy (it starts beside push, and a
        // request before its port is bound is Caddy's 502).
        let apps = opts
            .apps
            .unwrap_or("pmw-live,pmw-push-a,pmw-push-b,pmw-api");
        if apps.split(',').any(|a| a == "pmw-api") {
            let http = reqwest::Client::new();
            let left = within.saturating_sub(t0.elapsed());
            let answered = eventually_every(left, Duration::from_millis(100), || async {
                http.get(format!("http://127.0.0.1:{site}/v1/health"))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            })
            .await;
            assert!(answered, "pmw-api not reachable through caddy");
        }
        let start_cursor = Cursor {
            block: sim.rpc().latest_block().await.unwrap().number.0,
            log_index: pmw_core::types::cursor::MAX_LOG_INDEX,
        };
        let stop = CancellationToken::new();
        let mut clients = Vec::new();
        for n in 0..opts.clients.unwrap_or(100) {
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
        let connected = eventually(Duration::from_secs(60), || async {
            clients
                .iter()
                .all(|(_, l)| l.lock().unwrap().first_hello.is_some())
        })
        .await;
        assert!(connected, "not every client connected through caddy");
        Drill {
            db,
            sim,
            anvil,
            pm2,
            caddy,
            env,
            site,
            api_port,
            stats_port,
            accounts,
            clients,
            start_cursor,
            metrics_ports,
            stop,
            rpc_proxy,
            providers,
        }
    }

    /// The push instance leading now (from push_epoch).
    pub async fn leader(&self) -> String {
        self.db
            .connect()
            .await
            .query_one("SELECT leader FROM push_epoch WHERE slot = 0", &[])
            .await
            .unwrap()
            .get(0)
    }

    /// Wait until the push cursor reaches the chain head, then let clients settle and stop them.
    pub async fn drain(&self) {
        let final_head = self.sim.rpc().latest_block().await.unwrap().number.0;
        let reached = eventually_every(
            Duration::from_secs(60),
            Duration::from_millis(100),
            || async {
                let b: Option<i64> = self
                    .db
                    .connect()
                    .await
                    .query_opt("SELECT block_number FROM push_cursor WHERE slot = 0", &[])
                    .await
                    .unwrap()
                    .map(|r| r.get(0));
                b.filter(|b| *b as u64 >= final_head).ok_or(b)
            },
        )
        .await;
        if let Err(b) = reached {
            panic!("push never reached {final_head}: {b:?}");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        self.stop.cancel();
    }

    /// (lost, duplicated, out of order, reconnects, gap p50, p99, max, frames) over all clients.
    pub fn figures(&self) -> Figures {
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

pub use crate::kill as signal;

impl Drill {
    /// A push instance's heartbeat: (role, pid, beat_ms).
    pub async fn push_beat(&self, instance: &str) -> Option<(String, i32, i64)> {
        self.db
            .connect()
            .await
            .query_opt(
                "SELECT coalesce(state->>'role', ''), pid, beat_ms FROM heartbeats \
                 WHERE service = 'pmw-push' AND instance = $1",
                &[&instance],
            )
            .await
            .unwrap()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
    }

    /// Wait until push `instance` beats as `role` from process `pid` (a beat after `since_ms`).
    pub async fn wait_push_role(
        &self,
        instance: &str,
        role: &str,
        pid: i64,
        since_ms: i64,
        within: Duration,
    ) {
        let polled = eventually(within, || async {
            let beat = self.push_beat(instance).await;
            let fresh = beat
                .as_ref()
                .is_some_and(|(r, p, at)| r == role && i64::from(*p) == pid && *at >= since_ms);
            if fresh {
                Ok(())
            } else {
                Err(beat)
            }
        })
        .await;
        if let Err(beat) = polled {
            panic!("{instance} (pid {pid}) never beat as {role} within {within:?}: {beat:?}");
        }
    }
}

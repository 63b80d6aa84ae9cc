//! The benchmark's world on the real local stack: a private migrated Postgres and ClickHouse
//! database (`pmw_testkit::TestDb`, dropped at the end), a private anvil mining at a fixed block
//! time, pmw-sim trading on it, accounts with API keys and subscriptions written straight to
//! Postgres, and pmw-live / pmw-push as child processes pointed at all of that.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use pmw_core::{Address, UnixMs};
use pmw_sim::anvil::Anvil;
use pmw_sim::{demo_wallets, Emitted, RunConfig, Sim, SimConfig};
use pmw_testkit::seed::Endpoint;
use pmw_testkit::{eventually, TestDb};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::procs::{sibling, Service};
use crate::Plan;

/// An account with an API key, following `wallets`.
#[derive(Debug, Clone)]
pub struct Account {
    pub id: i64,
    pub key: String,
    pub wallets: Vec<Address>,
}

/// A push instance that leads and has completed a round.
pub struct Push {
    pub svc: Service,
    pub addr: SocketAddr,
}

/// A simulator run in progress.
pub struct Running {
    after: u64,
    from_emitted: usize,
    from_ms: i64,
    started: Instant,
    handle: JoinHandle<anyhow::Result<u64>>,
}

impl Running {
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}

/// What a finished run emitted: its fills, in blocks `(after, upto]`.
pub struct Run {
    pub after: u64,
    pub upto: u64,
    pub fills: Vec<Emitted>,
    pub secs: f64,
    pub from_ms: i64,
    pub to_ms: i64,
}

impl Run {
    /// This run followed by `next` (started after it ended) as one: the blocks and time both
    /// span, and both runs' fills.
    pub fn join(mut self, next: Run) -> Run {
        self.upto = next.upto;
        self.fills.extend(next.fills);
        self.secs += next.secs;
        self.to_ms = next.to_ms;
        self
    }
}

pub struct Bench {
    pub db: TestDb,
    pub anvil: Anvil,
    pub sim: Sim,
    pub wallets: Vec<Address>,
    pub ws_accounts: Vec<Account>,
    pub hook_accounts: Vec<Account>,
    pub live: Option<Service>,
    pub logs: PathBuf,
    pub pg: tokio_postgres::Client,
    /// Services started so far: each one's log is named with its number, in start order.
    started: u32,
    /// The simulator's pause after each batch's receipts ([`Plan::send_pause`]).
    send_pause: Duration,
    /// The simulator's Gamma-compatible market server (pmw-live resolves names from it).
    gamma: (SocketAddr, JoinHandle<()>),
}

/// The bench world's markets: pmw-sim's demo markets and more plain ones, so the market step
/// can follow the 10 busiest of a dozen.
fn bench_markets() -> Vec<pmw_sim::Market> {
    let mut m = pmw_sim::demo_markets();
    m.extend((1..=8).map(|i| {
        pmw_sim::Market::demo(
            &format!("Will pmw bench market {i} resolve Yes?"),
            &format!("pmw-bench-market-{i}"),
            ["Yes", "No"],
            false,
        )
    }));
    m
}

/// A `pro` account named `name` with one API key (returned).
pub async fn account_with_key(
    tx: &tokio_postgres::Transaction<'_>,
    name: &str,
    now: i64,
) -> anyhow::Result<(i64, String)> {
    let id: i64 = tx
        .query_one(
            "INSERT INTO accounts (name, plan, created_ms) VALUES ($1, 'pro', $2) RETURNING id",
            &[&name, &now],
        )
        .await?
        .get(0);
    let (key, prefix) = pmw_core::auth::generate(pmw_core::auth::KEY_PREFIX);
    tx.execute(
        "INSERT INTO api_keys (account_id, prefix, key_hash, created_ms) VALUES ($1, $2, $3, $4)",
        &[
            &id,
            &prefix,
            &pmw_core::auth::hash_secret(&key).as_slice(),
            &now,
        ],
    )
    .await?;
    Ok((id, key))
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.gamma.1.abort();
    }
}

impl Bench {
    /// Databases, anvil at `plan.block_time`, the simulator's emitters, and every account.
    pub async fn new(plan: &Plan, logs: PathBuf) -> anyhow::Result<Bench> {
        std::fs::create_dir_all(&logs)?;
        let db = TestDb::new().await;
        let bt = format!("{}", plan.block_time);
        let anvil = Anvil::spawn_with(&["--block-time", &bt, "--gas-limit", "1000000000"]).await?;
        let wallets = demo_wallets(plan.wallets);
        let sim_cfg = SimConfig {
            wallets: wallets.clone(),
            markets: bench_markets(),
            ..SimConfig::default()
        };
        let sim = Sim::connect_with(&anvil.http_url(), sim_cfg).await?;
        sim.install_emitters().await?;
        let gamma =
            pmw_sim::markets::serve("127.0.0.1:0".parse()?, sim.config().markets.clone()).await?;
        let pg = db.connect().await;
        let mut b = Bench {
            db,
            anvil,
            sim,
            wallets,
            ws_accounts: Vec::new(),
            hook_accounts: Vec::new(),
            live: None,
            logs,
            pg,
            started: 0,
            send_pause: plan.send_pause,
            gamma,
        };
        b.ws_accounts = b.accounts(plan.ws_clients, 0, plan).await?;
        b.hook_accounts = b.accounts(plan.webhooks, plan.ws_clients, plan).await?;
        Ok(b)
    }

    /// `n` accounts, the `k`-th (counting from `offset`) following `per_account` consecutive
    /// wallets of the world starting at `k * per_account`.
    async fn accounts(
        &mut self,
        n: usize,
        offset: usize,
        plan: &Plan,
    ) -> anyhow::Result<Vec<Account>> {
        let now = UnixMs::now().0;
        let tx = self.pg.transaction().await?;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let k = offset + i;
            let (id, key) = account_with_key(&tx, &format!("bench {k}"), now).await?;
            let wallets: Vec<Address> = (0..plan.per_account)
                .map(|j| self.wallets[(k * plan.per_account + j) % self.wallets.len()])
                .collect();
            for w in &wallets {
                tx.execute(
                    "INSERT INTO subscriptions (account_id, wallet, created_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    &[&id, &w.as_bytes().as_slice(), &now],
                )
                .await?;
            }
            out.push(Account { id, key, wallets });
        }
        tx.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
            .await?;
        tx.commit().await?;
        Ok(out)
    }

    /// One enabled endpoint per webhook account, at `urls[i]`.
    pub async fn add_endpoints(&self, urls: &[String]) -> anyhow::Result<()> {
        let now = UnixMs::now().0;
        for (a, url) in self.hook_accounts.iter().zip(urls) {
            let secret = pmw_push::webhook::sign::Secret::generate().expose();
            Endpoint::new(a.id, url, &secret)
                .created(now)
                .try_insert(&self.pg)
                .await?;
        }
        self.pg
            .execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
            .await?;
        Ok(())
    }

    /// The environment of a service child: the private databases and the private anvil.
    fn child_env(&self, instance: &str) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = self
            .db
            .env()
            .into_iter()
            .filter(|(k, _)| !k.starts_with("PMW_RPC_"))
            .collect();
        env.push(("PMW_RPC_WS_URL".into(), self.anvil.ws_url()));
        env.push(("PMW_RPC_HTTP_URL".into(), self.anvil.http_url()));
        env.push(("PMW_INSTANCE".into(), instance.into()));
        // PMW_BENCH_SERVICE_LOG: the services' filter, e.g. `info,pmw_push=debug` to trace rounds.
        let filter = std::env::var("PMW_BENCH_SERVICE_LOG")
            .unwrap_or_else(|_| "warn,pmw_live=info,pmw_push=info".into());
        env.push(("PMW_LOG".into(), filter));
        env
    }

    /// Start pmw-live from the next block and wait until it has moved the ingest watermark.
    pub async fn start_live(&mut self) -> anyhow::Result<()> {
        self.start_live_with(Vec::new()).await
    }

    /// [`Bench::start_live`] with `extra` settings (the pending step's mempool watcher).
    pub async fn start_live_with(&mut self, extra: Vec<(String, String)>) -> anyhow::Result<()> {
        let head = self.head().await?;
        let mut env = self.child_env("bench-live");
        env.extend(extra);
        env.push(("PMW_LIVE_START_BLOCK".into(), (head + 1).to_string()));
        env.push(("PMW_LIVE_LOCK_SEGMENT_MS".into(), "1000".into()));
        env.push(("PMW_GAMMA_URL".into(), format!("http://{}", self.gamma.0)));
        self.started += 1;
        let log = self.logs.join(format!("pmw-live-{}.log", self.started));
        self.live = Some(Service::spawn(
            "pmw-live",
            &sibling("pmw-live")?,
            &env,
            &log,
        )?);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.cursors().await?.0.is_none() {
            if Instant::now() > deadline || !self.live.as_mut().is_some_and(Service::running) {
                bail!(
                    "pmw-live did not ingest a block within 60 s (log: {})",
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Start a push leader (`legacy`: the seed's design, no LISTEN, sleep that long between
    /// rounds) and wait until `/health` says it completed a round.
    pub async fn start_push(&mut self, legacy: Option<u64>) -> anyhow::Result<Push> {
        self.start_push_with(legacy, Vec::new()).await
    }

    /// [`Bench::start_push`] with `extra` settings (edge mode's broker).
    pub async fn start_push_with(
        &mut self,
        legacy: Option<u64>,
        extra: Vec<(String, String)>,
    ) -> anyhow::Result<Push> {
        self.started += 1;
        let port = pmw_testkit::free_port();
        let name = format!("bench-push-{}", self.started);
        let mut env = self.child_env(&name);
        env.push(("PMW_PUSH_LISTEN".into(), format!("127.0.0.1:{port}")));
        env.push(("PMW_PUSH_LOCK_SEGMENT_MS".into(), "1000".into()));
        env.push(("PMW_PUSH_ALLOW_PRIVATE_WEBHOOKS".into(), "true".into()));
        // The fan-out steps open thousands of sessions on few accounts: no connect limit here.
        env.push(("PMW_PUSH_WS_CONNECTS_PER_SEC".into(), "1000000".into()));
        env.push(("PMW_PUSH_WS_CONNECT_BURST".into(), "1000000".into()));
        if let Some(ms) = legacy {
            env.push(("PMW_BENCH_POLL_MS".into(), ms.to_string()));
        }
        env.extend(extra);
        self.serve(&name, "pmw-push", env, port).await
    }

    /// A pmw-edge on the stream of `bus` (its `PMW_EDGE_NATS_*` settings), ready.
    pub async fn start_edge(&mut self, bus: &[(String, String)]) -> anyhow::Result<Push> {
        self.started += 1;
        let port = pmw_testkit::free_port();
        let name = format!("bench-edge-{}", self.started);
        let mut env = self.child_env(&name);
        env.push(("PMW_EDGE_LISTEN".into(), format!("127.0.0.1:{port}")));
        env.push((
            "PMW_EDGE_METRICS_ADDR".into(),
            format!("127.0.0.1:{}", pmw_testkit::free_port()),
        ));
        env.push(("PMW_EDGE_WS_CONNECTS_PER_SEC".into(), "1000000".into()));
        env.push(("PMW_EDGE_WS_CONNECT_BURST".into(), "1000000".into()));
        env.extend(bus.iter().cloned());
        self.serve(&name, "pmw-edge", env, port).await
    }

    /// Spawn `bin` as `name` and wait until its `/health` on `port` answers 200.
    async fn serve(
        &self,
        name: &str,
        bin: &str,
        env: Vec<(String, String)>,
        port: u16,
    ) -> anyhow::Result<Push> {
        let log = self.logs.join(format!("{name}.log"));
        let mut svc = Service::spawn(name, &sibling(bin)?, &env, &log)?;
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let url = format!("http://{addr}/health");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = http.get(&url).send().await {
                if r.status().is_success() {
                    return Ok(Push { svc, addr });
                }
            }
            if Instant::now() > deadline || !svc.running() {
                bail!(
                    "{name} did not become ready within 60 s (log: {})",
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The chain head's number.
    pub async fn head(&self) -> anyhow::Result<u64> {
        self.sim.rpc().block_number().await
    }

    /// (ingest watermark block, push cursor block), when they exist.
    /// The pids of the Postgres backends connected to this run's database.
    pub async fn backends(&self) -> anyhow::Result<Vec<u32>> {
        let rows = self
            .pg
            .query(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()",
                &[],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get::<_, i32>(0) as u32).collect())
    }

    pub async fn cursors(&self) -> anyhow::Result<(Option<u64>, Option<u64>)> {
        let r = self
            .pg
            .query_one(
                "SELECT (SELECT block_number FROM ingest_cursor WHERE id = 1), \
                        (SELECT block_number FROM push_cursor WHERE slot = 0)",
                &[],
            )
            .await?;
        let f = |i: usize| r.get::<_, Option<i64>>(i).map(|v| v as u64);
        Ok((f(0), f(1)))
    }

    /// Start the simulator: `matches_per_block` matches in every block for `d`, each batch sent
    /// right after the previous one's receipts (the throughput steps: at high rates sending a
    /// batch takes much of the interval, and a pause could push it past the next block).
    pub async fn start_sim(&self, matches_per_block: u32, d: Duration) -> anyhow::Result<Running> {
        self.start_sim_paced(matches_per_block, d, Duration::ZERO)
            .await
    }

    /// [`Bench::start_sim`] with each batch sent `pause` after the previous one's receipts.
    async fn start_sim_paced(
        &self,
        matches_per_block: u32,
        d: Duration,
        pause: Duration,
    ) -> anyhow::Result<Running> {
        let after = self.head().await?;
        let from_emitted = self.sim.emitted().len();
        let run = RunConfig {
            matches_per_block,
            interval: pause,
            count: None,
            duration: Some(d),
        };
        Ok(Running {
            after,
            from_emitted,
            from_ms: UnixMs::now().0,
            started: Instant::now(),
            handle: self.sim.spawn(run, CancellationToken::new()),
        })
    }

    /// Wait for a run to end; what it emitted.
    pub async fn finish_sim(&self, r: Running) -> anyhow::Result<Run> {
        r.handle.await.context("simulator task")??;
        let secs = r.started.elapsed().as_secs_f64();
        let fills: Vec<Emitted> = self.sim.emitted()[r.from_emitted..]
            .iter()
            .filter(|e| !e.orphaned && e.block_number > r.after)
            .cloned()
            .collect();
        let upto = fills
            .iter()
            .map(|e| e.block_number)
            .max()
            .unwrap_or(r.after);
        Ok(Run {
            after: r.after,
            upto,
            fills,
            secs,
            from_ms: r.from_ms,
            to_ms: UnixMs::now().0,
        })
    }

    /// Run the simulator for `d` and wait for it to end; each batch is sent the plan's
    /// `send_pause` after the previous one's receipts (the latency, fan-out and market windows).
    pub async fn run_sim(&self, matches_per_block: u32, d: Duration) -> anyhow::Result<Run> {
        let r = self
            .start_sim_paced(matches_per_block, d, self.send_pause)
            .await?;
        self.finish_sim(r).await
    }

    /// Wait until ingest and the push cursor reached `block` (bounded); whether they did.
    pub async fn wait_pushed(&self, block: u64, within: Duration) -> anyhow::Result<bool> {
        // `Some` ends the wait: reached, or an error to return; `None` polls again.
        let outcome = eventually(within, || async {
            match self.cursors().await {
                Ok((Some(i), Some(p))) if i >= block && p >= block => Some(Ok(())),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            }
        })
        .await;
        Ok(outcome.transpose()?.is_some())
    }
}

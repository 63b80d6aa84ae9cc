//! The drill harness: pm2 with a private home running the production ecosystem file on this
//! build, real Caddy with the production Caddyfile, pmw-sim on a private anvil, a private
//! database ([`Chain`]), 100 resuming clients; and what the drills read back from pm2 and Postgres.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pmw_core::{Address, Cursor};
use pmw_sim::demo_wallets;
use pmw_testkit::{eventually, eventually_every, free_port, repo_root, stack_env, StackEnv};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_util::sync::CancellationToken;

pub use crate::chain::{account, Chain};
use crate::clients::{pct, resilient_client, ClientLog, Figures};
use crate::edge::Edges;
pub use crate::pm2::{any_exits, exits, App, Pm2};

mod setup;
use setup::{
    providers_env, proxies, seed_accounts, start_caddy, start_clients, start_pm2, tuning_env,
    wait_reachable, Ports, DEFAULT_APPS,
};

/// The drill stack: a private database and chain, pm2 running live + push-a + push-b + api (and
/// stats when asked) from the production ecosystem file, Caddy with the production Caddyfile,
/// 10 accounts and 100 resuming clients connected through Caddy. Derefs to its [`Chain`]
/// (`d.db`, `d.sim`, `d.anvil`).
pub struct Drill {
    pub chain: Chain,
    pub pm2: Pm2,
    pub caddy: tokio::process::Child,
    pub env: Vec<(String, String)>,
    pub site: u16,
    pub api_port: u16,
    pub stats_port: u16,
    pub accounts: Vec<(String, Vec<Address>)>,
    pub clients: Vec<(Vec<Address>, Arc<Mutex<ClientLog>>)>,
    pub start_cursor: Cursor,
    /// Private metrics ports: (Prometheus job, instance, port) of live, push-a, push-b, stats.
    pub metrics_ports: Vec<(&'static str, &'static str, u16)>,
    stop: CancellationToken,
    pub rpc_proxy: Option<pmw_testkit::TcpProxy>,
    /// With `Opts::rpc_providers`: each provider's proxies, in `PMW_LIVE_RPC_PROVIDERS` order.
    pub providers: Vec<ProviderProxy>,
    /// Multi-host mode: the launchers and forwarders, kept as long as pm2 may start an app.
    pub placed: Option<Arc<crate::placed::Placed>>,
}

impl Deref for Drill {
    type Target = Chain;
    fn deref(&self) -> &Chain {
        &self.chain
    }
}

impl DerefMut for Drill {
    fn deref_mut(&mut self) -> &mut Chain {
        &mut self.chain
    }
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
    /// The simulator's world (default: [`pmw_sim::SimConfig::default`]).
    pub sim: Option<pmw_sim::SimConfig>,
    /// Multi-host mode: the apps run on the hosts, through these launchers.
    pub placed: Option<Arc<crate::placed::Placed>>,
}

impl Drill {
    pub async fn start() -> Drill {
        Drill::start_with(Opts::default()).await
    }

    pub async fn start_with(opts: Opts) -> Drill {
        let stack = opts.stack.clone().unwrap_or_else(|| stack_env().clone());
        let chain = Chain::start_with(&stack, &[], opts.sim.clone().unwrap_or_default()).await;
        let head = chain.head().await;
        let (rpc_proxy, providers) = proxies(&chain, &opts).await;
        let ports = Ports::free();
        let edges = Edges::new(opts.edges, &stack);
        let mut env = chain.db.env();
        env.retain(|(k, _)| !k.starts_with("PMW_RPC"));
        let rpc_ws = match &rpc_proxy {
            Some(p) => format!("ws://{}", p.addr),
            None => chain.anvil.ws_url(),
        };
        env.extend(ports.env(&rpc_ws, &chain.anvil.http_url()));
        env.extend(tuning_env(&stack, head));
        env.extend(providers_env(&providers));
        env.extend(edges.env());
        env.extend(opts.env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        if let Some(placed) = &opts.placed {
            env.extend(placed.env());
            placed.forward(&env).await.expect("forwarders to the hosts");
            for (k, v) in env.iter_mut() {
                if k == "PMW_BIN_DIR" {
                    *v = placed.bin_dir().to_string_lossy().into_owned();
                }
            }
        }
        let apps = opts.apps.unwrap_or(DEFAULT_APPS);
        let pm2 = start_pm2(&env, apps, &edges);
        let caddy = start_caddy(&pm2, &ports, &edges, (apps, opts.placed.as_deref()));
        let accounts = seed_accounts(&chain.db.connect().await).await;
        let url = format!("ws://127.0.0.1:{}/v1/ws", ports.site);
        wait_reachable(&url, &accounts[0].0, ports.site, apps).await;
        let start_cursor = Cursor {
            block: chain.head().await,
            log_index: pmw_core::types::cursor::MAX_LOG_INDEX,
        };
        let stop = CancellationToken::new();
        let clients = start_clients(&url, &accounts, opts.clients.unwrap_or(100), &stop).await;
        Drill {
            chain,
            pm2,
            caddy,
            env,
            site: ports.site,
            api_port: ports.api,
            stats_port: ports.stats,
            accounts,
            clients,
            start_cursor,
            metrics_ports: ports.metrics,
            stop,
            rpc_proxy,
            providers,
            placed: opts.placed,
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
        self.wait_pushed_every(Duration::from_secs(60), Duration::from_millis(100))
            .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        self.stop.cancel();
    }

    /// (lost, duplicated, out of order, reconnects, gap p50, p99, max, frames) over all clients.
    pub fn figures(&self) -> Figures {
        let mut f = Figures::default();
        let mut gaps = Vec::new();
        for (mine, log) in &self.clients {
            let l = log.lock().unwrap();
            let expected: BTreeSet<Cursor> =
                self.expected(mine, self.start_cursor).into_iter().collect();
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
    /// A push instance's heartbeat: (role, pid, beat_ms); none while it cannot be read (no
    /// heartbeat yet, or on Patroni no node taking writes during a failover).
    pub async fn push_beat(&self, instance: &str) -> Option<(String, i32, i64)> {
        self.db
            .try_connect()
            .await
            .ok()?
            .query_opt(
                "SELECT coalesce(state->>'role', ''), pid, beat_ms FROM heartbeats \
                 WHERE service = 'pmw-push' AND instance = $1",
                &[&instance],
            )
            .await
            .ok()?
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

//! The steps that put a drill's stack together, in order: proxies in front of the chain, free
//! ports, the apps' environment, pm2 and Caddy, the accounts, a leader reachable through Caddy,
//! and the resuming clients.

use super::*;

/// The ecosystem apps a drill runs unless told otherwise.
pub(super) const DEFAULT_APPS: &str = "pmw-live,pmw-push-a,pmw-push-b,pmw-api";

/// Live's breakable WebSocket RPC proxy (with `Opts::rpc_proxy`) and the raced providers' proxies
/// (`Opts::rpc_providers`), all to the chain's anvil.
pub(super) async fn proxies(
    chain: &Chain,
    opts: &Opts,
) -> (Option<pmw_testkit::TcpProxy>, Vec<ProviderProxy>) {
    let anvil: SocketAddr = format!("127.0.0.1:{}", chain.anvil.port()).parse().unwrap();
    let rpc_proxy = if opts.rpc_proxy {
        Some(pmw_testkit::TcpProxy::start(anvil).await)
    } else {
        None
    };
    let mut providers = Vec::new();
    for i in 0..opts.rpc_providers {
        providers.push(ProviderProxy {
            name: format!("p{i}"),
            ws: pmw_testkit::TcpProxy::start(anvil).await,
            http: pmw_testkit::TcpProxy::start(anvil).await,
        });
    }
    (rpc_proxy, providers)
}

/// The drill's free ports.
pub(super) struct Ports {
    push_a: u16,
    push_b: u16,
    pub(super) site: u16,
    admin: u16,
    pub(super) api: u16,
    api_b: u16,
    pub(super) stats: u16,
    stats_b: u16,
    /// (Prometheus job, instance, port) of live, push-a, push-b, stats.
    pub(super) metrics: Vec<(&'static str, &'static str, u16)>,
}

impl Ports {
    pub(super) fn free() -> Ports {
        Ports {
            push_a: free_port(),
            push_b: free_port(),
            site: free_port(),
            admin: free_port(),
            api: free_port(),
            api_b: free_port(),
            stats: free_port(),
            stats_b: free_port(),
            metrics: vec![
                ("pmw-live", "live", free_port()),
                ("pmw-push", "push-a", free_port()),
                ("pmw-push", "push-b", free_port()),
                ("pmw-stats", "stats", free_port()),
            ],
        }
    }

    /// The apps' RPC URLs, ports and binaries.
    pub(super) fn env(&self, rpc_ws: &str, rpc_http: &str) -> Vec<(String, String)> {
        let bin_dir = repo_root().join("target/debug");
        [
            ("PMW_RPC_WS_URL", rpc_ws.to_string()),
            ("PMW_API_PORT", self.api.to_string()),
            ("PMW_API_B_PORT", self.api_b.to_string()),
            ("PMW_STATS_PORT", self.stats.to_string()),
            ("PMW_STATS_B_PORT", self.stats_b.to_string()),
            ("PMW_RPC_HTTP_URL", rpc_http.to_string()),
            ("PMW_BIN_DIR", bin_dir.to_string_lossy().into_owned()),
            ("PMW_PUSH_A_PORT", self.push_a.to_string()),
            ("PMW_PUSH_B_PORT", self.push_b.to_string()),
            ("PMW_LIVE_METRICS_PORT", self.metrics[0].2.to_string()),
            ("PMW_PUSH_A_METRICS_PORT", self.metrics[1].2.to_string()),
            ("PMW_PUSH_B_METRICS_PORT", self.metrics[2].2.to_string()),
            ("PMW_STATS_METRICS_PORT", self.metrics[3].2.to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .to_vec()
    }
}

/// The apps' pace (fast polls, 1 s lock segments and heartbeats) and their view of the stack.
pub(super) fn tuning_env(stack: &StackEnv, head: u64) -> Vec<(String, String)> {
    [
        ("PMW_LIVE_START_BLOCK", (head + 1).to_string()),
        ("PMW_LIVE_POLL_INTERVAL_MS", "200".into()),
        ("PMW_GAMMA_URL", "http://127.0.0.1:9".into()),
        ("PMW_PUSH_LOCK_SEGMENT_MS", "1000".into()),
        ("PMW_PUSH_WS_HEARTBEAT_MS", "1000".into()),
        // Readiness evaluated every 100 ms (default 1 s), so a sub-second Postgres restart
        // is seen as the 503 it is.
        ("PMW_API_READY_INTERVAL_MS", "100".into()),
        ("PMW_PG_BIN", stack.get("PMW_PG_BIN").into()),
        ("PMW_STACK_DIR", stack.get("PMW_STACK_DIR").into()),
    ]
    .map(|(k, v)| (k.to_string(), v))
    .to_vec()
}

/// `PMW_LIVE_RPC_PROVIDERS` naming each provider's proxies (nothing without providers).
pub(super) fn providers_env(providers: &[ProviderProxy]) -> Option<(String, String)> {
    if providers.is_empty() {
        return None;
    }
    let list: Vec<String> = providers
        .iter()
        .map(|p| format!("{}=ws://{}|http://{}", p.name, p.ws.addr, p.http.addr))
        .collect();
    Some(("PMW_LIVE_RPC_PROVIDERS".into(), list.join(" ")))
}

/// pm2 in a private home starting `apps` (and the edges) from the production ecosystem file.
pub(super) fn start_pm2(env: &[(String, String)], apps: &str, edges: &Edges) -> Pm2 {
    let pm2 = Pm2 {
        home: tempfile::tempdir().unwrap(),
        env: env.to_vec(),
    };
    let eco = repo_root().join("deploy/pm2/ecosystem.config.js");
    let only = apps.to_string() + &edges.apps();
    let out = pm2.run(&["start", eco.to_str().unwrap(), "--only", &only]);
    assert!(
        out.status.success(),
        "pm2 start: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    pm2
}

/// Caddy with the production Caddyfile in front of push, the API's and stats' members `apps`
/// runs (and the edges); in multi-host mode (`placed`) the upstreams are on the hosts.
pub(super) fn start_caddy(
    pm2: &Pm2,
    ports: &Ports,
    edges: &Edges,
    (apps, placed): (&str, Option<&crate::placed::Placed>),
) -> tokio::process::Child {
    let at = |instance: &str, port: u16| match placed {
        Some(p) => format!("{}:{port}", p.ip_of(instance)),
        None => format!("127.0.0.1:{port}"),
    };
    let mut caddy_env = vec![
        ("PMW_SITE", format!("http://127.0.0.1:{}", ports.site)),
        ("PMW_PUSH_A", at("push-a", ports.push_a)),
        ("PMW_PUSH_B", at("push-b", ports.push_b)),
        ("PMW_API", at("api", ports.api)),
        ("PMW_STATS", at("stats", ports.stats)),
        ("PMW_CADDY_ADMIN", format!("127.0.0.1:{}", ports.admin)),
    ];
    let runs = |app: &str| apps.split(',').any(|a| a == app);
    if runs("pmw-api-b") {
        caddy_env.push(("PMW_API_B", at("api-b", ports.api_b)));
    }
    if runs("pmw-stats-b") {
        caddy_env.push(("PMW_STATS_B", at("stats-b", ports.stats_b)));
    }
    caddy_env.extend(edges.caddy(placed));
    pmw_testkit::caddy(pm2.home.path(), &caddy_env)
}

/// 10 accounts, each following 2 of 6 demo wallets; push notified. Their keys and wallets.
pub(super) async fn seed_accounts(pg: &tokio_postgres::Client) -> Vec<(String, Vec<Address>)> {
    let wallets = demo_wallets(6);
    let mut accounts = Vec::new();
    for i in 0..10usize {
        let mine: Vec<Address> = (0..2).map(|k| wallets[(i + k * 3) % 6]).collect();
        let (_, key) = account(pg, "drill", &mine).await;
        accounts.push((key, mine));
    }
    crate::chain::notify(pg).await;
    accounts
}

/// Wait until a push leader serves `url` through Caddy for `key` and, when `apps` runs the API,
/// until it answers through Caddy too (it starts beside push, and a request before its port is
/// bound is Caddy's 502); 90 s in all.
pub(super) async fn wait_reachable(url: &str, key: &str, site: u16, apps: &str) {
    let (within, t0) = (Duration::from_secs(90), Instant::now());
    let last_error = std::sync::Mutex::new(String::new());
    let reached = eventually_every(within, Duration::from_millis(200), || async {
        let mut req = url.into_client_request().unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
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
}

/// `n` resuming clients of `url`, round-robin over `accounts`, all connected before it returns
/// (no trade is emitted before every client has its hello).
pub(super) async fn start_clients(
    url: &str,
    accounts: &[(String, Vec<Address>)],
    n: usize,
    stop: &CancellationToken,
) -> Vec<(Vec<Address>, Arc<Mutex<ClientLog>>)> {
    let mut clients = Vec::new();
    for i in 0..n {
        let (key, mine) = accounts[i % accounts.len()].clone();
        let log = Arc::new(Mutex::new(ClientLog::default()));
        tokio::spawn(resilient_client(
            url.to_string(),
            key,
            log.clone(),
            stop.clone(),
        ));
        clients.push((mine, log));
    }
    let connected = eventually(Duration::from_secs(60), || async {
        clients
            .iter()
            .all(|(_, l)| l.lock().unwrap().first_hello.is_some())
    })
    .await;
    assert!(connected, "not every client connected through caddy");
    clients
}

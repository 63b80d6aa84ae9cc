//! No secret in any log line (issue 30, item 10): pmw-live, pmw-push, pmw-api and pmw-stats run
//! as processes with a sentinel in every secret setting that still connects (the Postgres
//! password, the ClickHouse URL's path, the RPC URLs' query: `PMW_RPC_*` and live's two raced
//! providers, the Gamma URL's path, webhook URLs' path and query), errors are driven (the RPC
//! cut, ClickHouse cut, Gamma refused, one endpoint answering 410, one refusing connections, a
//! test event to it), and every line they wrote, the output of `pmwctl status`, the test event's
//! answer and ClickHouse `delivery_log`'s `error` column are searched for each sentinel, the API
//! key, the webhook secrets and a WebSocket ticket.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use pmw_sim::anvil::Anvil;
use pmw_sim::{RunConfig, Sim};
use pmw_testkit::hooks::{Receiver, Step};
use pmw_testkit::{
    eventually, free_port, run_bin, stack_env, workspace_bin, Http, TcpProxy, TestDb,
};
use pmw_tools::chain::Chain;
use serde_json::json;
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

/// Every sentinel contains this; no line may.
const SENTINEL: &str = "SENTINEL";

/// A service binary whose stdout and stderr go to a file.
struct Logged {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Logged {
    fn start(name: &'static str, dir: &Path, env: &[(String, String)]) -> Logged {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(workspace_bin(name))
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Logged { name, child, log }
    }

    /// SIGTERM, then wait (bounded) for the exit.
    async fn stop(mut self) -> (&'static str, String) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        (
            self.name,
            std::fs::read_to_string(&self.log).unwrap_or_default(),
        )
    }
}

/// The stack's services pointed at a proxied ClickHouse (a sentinel path), a proxied private
/// anvil (sentinel queries), a Postgres URL with a sentinel password, a refused Gamma URL.
struct Setup {
    db: TestDb,
    sim: Sim,
    _anvil: Anvil,
    rpc: TcpProxy,
    ch: TcpProxy,
    env: Vec<(String, String)>,
    api_port: u16,
    push_port: u16,
}

async fn setup() -> Setup {
    let Chain { db, anvil, sim } = Chain::start(stack_env(), &[]).await;
    let rpc = TcpProxy::start(([127, 0, 0, 1], anvil.port()).into()).await;
    let ch_url = url::Url::parse(&db.cfg.clickhouse_url).unwrap();
    let ch_addr = (ch_url.host_str().unwrap(), ch_url.port().unwrap());
    let ch = TcpProxy::start(
        tokio::net::lookup_host(ch_addr)
            .await
            .unwrap()
            .next()
            .unwrap(),
    )
    .await;
    let mut pg = url::Url::parse(
        &db.env()
            .into_iter()
            .find(|(k, _)| k == "PMW_POSTGRES_URL")
            .unwrap()
            .1,
    )
    .unwrap();
    // The stack's Postgres trusts loopback: a password is accepted and never asked for.
    pg.set_password(Some("SENTINEL_PG_PASSWORD")).unwrap();
    let head = sim.rpc().latest_block().await.unwrap().number.0;
    let (api_port, push_port) = (free_port(), free_port());
    let mut env: Vec<(String, String)> = db
        .env()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("PMW_RPC") && k != "PMW_CLICKHOUSE_URL")
        .filter(|(k, _)| k != "PMW_POSTGRES_URL")
        .collect();
    let (r, c) = (rpc.addr.port(), ch.addr.port());
    for (k, v) in [
        ("PMW_POSTGRES_URL", pg.to_string()),
        (
            "PMW_CLICKHOUSE_URL",
            format!("http://127.0.0.1:{c}/SENTINEL_CH_PATH"),
        ),
        (
            "PMW_RPC_HTTP_URL",
            format!("http://127.0.0.1:{r}/?key=SENTINEL_RPC_HTTP"),
        ),
        (
            "PMW_RPC_WS_URL",
            format!("ws://127.0.0.1:{r}/?key=SENTINEL_RPC_WS"),
        ),
        // live races two providers (their URLs are secrets too); the rest use PMW_RPC_*.
        (
            "PMW_LIVE_RPC_PROVIDERS",
            format!(
                "a=ws://127.0.0.1:{r}/?key=SENTINEL_PROVIDER_A_WS|http://127.0.0.1:{r}/?key=SENTINEL_PROVIDER_A_HTTP \
                 b=ws://127.0.0.1:{r}/?key=SENTINEL_PROVIDER_B_WS|http://127.0.0.1:{r}/?key=SENTINEL_PROVIDER_B_HTTP"
            ),
        ),
        (
            "PMW_GAMMA_URL",
            format!("http://127.0.0.1:{}/SENTINEL_GAMMA", free_port()),
        ),
        (
            "PMW_LOG",
            "info,pmw_live=debug,pmw_push=debug,pmw_api=debug,pmw_stats=debug,pmw_core=debug"
                .into(),
        ),
        ("PMW_LIVE_START_BLOCK", (head + 1).to_string()),
        ("PMW_LIVE_POLL_INTERVAL_MS", "200".into()),
        (
            "PMW_LIVE_METRICS_ADDR",
            format!("127.0.0.1:{}", free_port()),
        ),
        ("PMW_PUSH_LISTEN", format!("127.0.0.1:{push_port}")),
        (
            "PMW_PUSH_METRICS_ADDR",
            format!("127.0.0.1:{}", free_port()),
        ),
        ("PMW_PUSH_LOCK_SEGMENT_MS", "1000".into()),
        ("PMW_PUSH_ALLOW_PRIVATE_WEBHOOKS", "true".into()),
        ("PMW_API_LISTEN", format!("127.0.0.1:{api_port}")),
        ("PMW_API_ALLOW_PRIVATE_WEBHOOKS", "true".into()),
        ("PMW_STATS_LISTEN", format!("127.0.0.1:{}", free_port())),
        (
            "PMW_STATS_METRICS_ADDR",
            format!("127.0.0.1:{}", free_port()),
        ),
        ("PMW_STATS_INTERVAL_MS", "1000".into()),
    ] {
        env.push((k.into(), v));
    }
    Setup {
        db,
        sim,
        _anvil: anvil,
        rpc,
        ch,
        env,
        api_port,
        push_port,
    }
}

/// Lines of `text` holding any of `secrets`, each as `<source>: <line>`.
fn leaks(source: &str, text: &str, secrets: &[String]) -> Vec<String> {
    text.lines()
        .filter(|l| secrets.iter().any(|s| l.contains(s.as_str())))
        .map(|l| format!("{source}: {l}"))
        .collect()
}

/// Whether a service accepts TCP on `port` (push binds its port only once it leads).
async fn listens(port: u16) -> bool {
    tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_ok()
}

/// The account's two endpoints: one answering 410 (disabled at once), one refusing connections;
/// their ids and `whsec_` secrets.
async fn endpoints(api: &Http, key: &str, gone: &Receiver) -> Vec<(i64, String)> {
    let refused = format!(
        "http://127.0.0.1:{}/in/SENTINEL_HOOK_PATH_B?token=SENTINEL_HOOK_QUERY_B",
        free_port()
    );
    let gone = format!(
        "http://127.0.0.1:{}/hooks/SENTINEL_HOOK_PATH_A?token=SENTINEL_HOOK_QUERY_A",
        gone.addr.port()
    );
    let mut out = Vec::new();
    for url in [gone, refused] {
        let r = api.post("/v1/webhooks", key, json!({ "url": url })).await;
        r.expect(201, None);
        let secret = r.body["secret"].as_str().unwrap().to_string();
        assert!(secret.starts_with("whsec_"), "{}", r.text);
        out.push((r.body["id"].as_i64().unwrap(), secret));
    }
    out
}

/// The `error` column of every `delivery_log` row, one per line.
async fn delivery_errors(db: &TestDb) -> String {
    let rows: Vec<String> = db
        .ch
        .query("SELECT error FROM delivery_log")
        .fetch_all()
        .await
        .unwrap();
    rows.join("\n")
}

/// Trades until the 410 endpoint is disabled and the refusing one has a logged attempt.
async fn drive_deliveries(s: &Setup, gone_id: i64, refused_id: i64) {
    let pg = s.db.connect().await;
    let done = eventually(Duration::from_secs(90), || async {
        s.sim
            .spawn(
                RunConfig {
                    matches_per_block: 1,
                    interval: Duration::from_millis(200),
                    count: Some(2),
                    duration: None,
                },
                CancellationToken::new(),
            )
            .await
            .unwrap()
            .unwrap();
        let off: bool = pg
            .query_one(
                "SELECT NOT enabled FROM webhook_endpoints WHERE id = $1",
                &[&gone_id],
            )
            .await
            .unwrap()
            .get(0);
        let logged: u64 =
            s.db.ch
                .query("SELECT count() FROM delivery_log WHERE endpoint_id = ? AND error != ''")
                .bind(refused_id as u64)
                .fetch_one()
                .await
                .unwrap_or(0);
        (off && logged > 0).then_some(()).ok_or((off, logged))
    })
    .await;
    done.unwrap_or_else(|(off, logged)| {
        panic!(
            "deliveries not driven: 410 endpoint disabled {off}, refused attempts logged {logged}"
        )
    });
}

/// Cut the RPC (live loses its head subscription and polls fail) and then ClickHouse, a few
/// seconds each; `pmwctl status` runs while the RPC is cut. Returns what pmwctl printed.
async fn drive_outages(s: &Setup) -> String {
    s.rpc.cut();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, out, err) = run_bin(
        &workspace_bin("pmwctl"),
        &s.env,
        &["status"],
        Duration::from_secs(60),
    )
    .await;
    s.rpc.restore();
    s.ch.cut();
    tokio::time::sleep(Duration::from_secs(4)).await;
    s.ch.restore();
    tokio::time::sleep(Duration::from_secs(2)).await;
    format!("{out}\n{err}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_a_log_line_when_every_dependency_fails() {
    let s = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let pgc = s.db.connect().await;
    let key = pmw_tools::chain::account(&pgc, "log-secrets", &s.sim.config().wallets)
        .await
        .1;
    let services: Vec<Logged> = ["pmw-live", "pmw-push", "pmw-api", "pmw-stats"]
        .into_iter()
        .map(|name| Logged::start(name, dir.path(), &s.env))
        .collect();
    let api = Http::new(([127, 0, 0, 1], s.api_port).into());
    let up = eventually(Duration::from_secs(60), || async {
        // Http panics on a refused connection: the ports accept first.
        let serving = listens(s.api_port).await && listens(s.push_port).await;
        let me = serving && api.get("/v1/me", &key).await.status == 200;
        me.then_some(()).ok_or(())
    })
    .await;
    if up.is_err() {
        let mut tails = String::new();
        for svc in services {
            let (name, text) = svc.stop().await;
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            tails.push_str(&format!("--- {name}\n{tail}\n"));
        }
        panic!("the API did not answer or push did not lead within 60 s:\n{tails}");
    }
    let gone = Receiver::cycling(vec![Step::status(410)]).await;
    let eps = endpoints(&api, &key, &gone).await;
    let ticket = api.post("/v1/ws-ticket", &key, json!({})).await;
    ticket.expect(201, None);
    drive_deliveries(&s, eps[0].0, eps[1].0).await;
    let test_event = api
        .post(&format!("/v1/webhooks/{}/test", eps[1].0), &key, json!({}))
        .await;
    let ctl = drive_outages(&s).await;
    let mut logs = Vec::new();
    for svc in services {
        logs.push(svc.stop().await);
    }
    let mut secrets = vec![SENTINEL.to_string(), key.clone()];
    secrets.extend(eps.iter().map(|(_, secret)| secret.clone()));
    secrets.extend(ticket.body["ticket"].as_str().map(str::to_string));
    let live_log = logs.iter().find(|(n, _)| *n == "pmw-live").map(|(_, t)| t);
    assert!(
        live_log.is_some_and(|t| t.contains("provider demoted")),
        "the RPC cut reached live's raced providers"
    );
    let mut found = Vec::new();
    for (name, text) in &logs {
        found.extend(leaks(name, text, &secrets));
    }
    found.extend(leaks("pmwctl status", &ctl, &secrets));
    found.extend(leaks("test event answer", &test_event.text, &secrets));
    found.extend(leaks(
        "delivery_log.error",
        &delivery_errors(&s.db).await,
        &secrets,
    ));
    let all: String = logs.iter().map(|(_, t)| t.as_str()).collect();
    println!(
        "log secrets: {} lines from 4 services searched for {} secrets; {} leaked",
        all.lines().count(),
        secrets.len(),
        found.len()
    );
    // What was searched holds the errors driven: the test cannot pass on silence.
    for (name, text) in &logs {
        assert!(
            text.contains("starting"),
            "{name} logged its config line:\n{text}"
        );
    }
    for expected in [
        "block listener lost",
        "head poll failed",
        "market name resolution failed",
        "webhook endpoint disabled",
    ] {
        assert!(all.contains(expected), "`{expected}` was logged");
    }
    assert!(
        test_event.body["delivered"] == false && test_event.body["error"].is_string(),
        "the test event failed: {}",
        test_event.text
    );
    assert!(found.is_empty(), "secrets leaked:\n{}", found.join("\n"));
}

//! Issue 30, items 1–4 against the real stack: `/v1/ready` evaluated once per interval whatever
//! the number of callers and answering the public (through the real Caddy) without internals;
//! failed authentication throttled per client address before the key lookup (proven with
//! Postgres cut: a lookup would answer 503); a client's own `X-Forwarded-For` (direct, or
//! through Caddy) never changes the address it is throttled by.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use pmw_api::ApiConfig;
use pmw_core::client::TrustedProxies;
use pmw_testkit::{TcpProxy, TestDb};

use crate::caddy::Caddy;
use crate::common::{spawn_api, test_config, Api};

/// The value of an unlabelled counter in a Prometheus text page (0 when absent).
fn counter(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_is_evaluated_once_per_interval_and_public_without_internals() {
    let api = Api::start_with(ApiConfig {
        api_ready_interval_ms: 60_000,
        ..test_config()
    })
    .await;
    let http = reqwest::Client::new();
    let direct = format!("{}/v1/ready", api.base);
    // 200 concurrent callers (a flood): one evaluation between them.
    let answers = futures::future::join_all((0..200).map(|_| {
        let (http, url) = (http.clone(), direct.clone());
        async move { http.get(url).send().await.unwrap().status().as_u16() }
    }))
    .await;
    assert!(answers.iter().all(|s| *s == answers[0]), "{answers:?}");
    let page = http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let runs = counter(&page, "pmw_api_ready_evaluations_total");
    println!("200 concurrent /v1/ready callers and a scrape: {runs} evaluation(s)");
    assert!((1.0..=2.0).contains(&runs), "{runs} evaluations");

    // On the host (no proxy): every check with its reasons.
    let detailed: serde_json::Value = http
        .get(&direct)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(detailed["checks"]["postgres"].is_object(), "{detailed}");

    // Through Caddy: the status alone.
    let addr: SocketAddr = api.base.trim_start_matches("http://").parse().unwrap();
    let caddy = Caddy::start(addr, 65_536).await;
    let r = http
        .get(format!("{}/v1/ready", caddy.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), answers[0]);
    let text = r.text().await.unwrap();
    let public: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(public["status"], "not_ready", "{text}");
    assert_eq!(public.as_object().unwrap().len(), 2, "{text}");
    for internal in [
        "checks",
        "instance",
        "revision",
        "postgres",
        "heartbeat",
        "warnings",
    ] {
        assert!(
            !text.contains(internal),
            "{internal} in the public answer: {text}"
        );
    }
}

/// A throttled API (1 failure a second, 3 at once) over a Postgres that can be cut.
async fn throttled_api(
    trusted: &str,
) -> (TestDb, TcpProxy, SocketAddr, pmw_testkit::ServiceHandle) {
    let db = TestDb::new().await;
    let (core, proxy) = db.behind_proxy().await;
    let cfg = ApiConfig {
        api_rate_per_sec: 1,
        api_rate_burst: 3,
        api_trusted_proxies: trusted.parse::<TrustedProxies>().unwrap(),
        ..test_config()
    };
    let (addr, handle) = spawn_api(core, cfg).await;
    (db, proxy, addr, handle)
}

/// A client whose connections leave from `from` (any 127/8 address is this host's).
fn client_from(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(from.parse::<IpAddr>().unwrap())
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap()
}

async fn me(http: &reqwest::Client, base: &str, key: &str, xff: Option<String>) -> u16 {
    let mut req = http.get(format!("{base}/v1/me")).bearer_auth(key);
    if let Some(x) = xff {
        req = req.header("x-forwarded-for", x);
    }
    req.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_authentication_is_throttled_before_the_lookup() {
    let (_db, pg, addr, _api) = throttled_api("127.0.0.1").await;
    let base = format!("http://{addr}");
    let http = client_from("127.0.0.1");
    let unknown = format!("pmw_{}", "0".repeat(64));
    // The burst of failures, then 429 from the address.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(me(&http, &base, &unknown, None).await);
    }
    assert_eq!(statuses[..3], [401, 401, 401], "{statuses:?}");
    assert_eq!(statuses[3], 429, "{statuses:?}");
    // Over the limit, nothing is asked of the store: 429 with Postgres cut (a lookup would be
    // a 503), a malformed key the same.
    pg.cut();
    let r = http
        .get(format!("{base}/v1/me"))
        .bearer_auth(&unknown)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(me(&http, &base, "pmw_notakey", None).await, 429);
    // Another address is not affected, and a malformed key needs no lookup: 401 with Postgres
    // gone.
    let other = client_from("127.0.0.9");
    assert_eq!(me(&other, &base, "pmw_notakey", None).await, 401);
    assert_eq!(
        me(&other, &base, &format!("pmw_{}", "Z".repeat(64)), None).await,
        401
    );
    pg.restore();
}

/// Failures from `http` with a fresh `X-Forwarded-For` each time until 429 (at most 20).
async fn failures_until_429(http: &reqwest::Client, base: &str) -> Vec<u16> {
    let mut statuses = Vec::new();
    for i in 0..20u32 {
        let forged = format!("198.51.100.{}, 203.0.113.{}", i % 250, i % 250);
        let s = me(http, base, "pmw_notakey", Some(forged)).await;
        statuses.push(s);
        if s == 429 {
            break;
        }
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_own_forwarded_for_does_not_dodge_the_throttle() {
    // Only 127.0.0.1 (where Caddy connects from) is a proxy.
    let (_db, _pg, addr, _api) = throttled_api("127.0.0.1").await;
    let base = format!("http://{addr}");
    // Directly, from a peer that is no proxy: its header is ignored.
    let direct = failures_until_429(&client_from("127.0.0.2"), &base).await;
    println!("direct with forged X-Forwarded-For: {direct:?}");
    assert_eq!(direct.last(), Some(&429), "{direct:?}");
    assert!(direct.len() <= 5, "{direct:?}");
    // Through the real Caddy (a trusted proxy): the address Caddy saw counts, not the forgery.
    let caddy = Caddy::start(addr, 65_536).await;
    let proxied = failures_until_429(&client_from("127.0.0.3"), &caddy.base).await;
    println!("through Caddy with forged X-Forwarded-For: {proxied:?}");
    assert_eq!(proxied.last(), Some(&429), "{proxied:?}");
    assert!(proxied.len() <= 5, "{proxied:?}");
    // …and a different client behind Caddy still has its own budget.
    assert_eq!(
        me(&client_from("127.0.0.4"), &caddy.base, "pmw_notakey", None).await,
        401
    );
}

//! Issue 30 items 1–4 under load, in-process on the real stores (Postgres, ClickHouse): push's
//! `/v1/ws` throttles failed authentication per client address before the lookup (429 with
//! Postgres cut), and a bounded loopback flood (anonymous `/v1/ready` callers, bad keys on
//! `/v1/me` and on `/v1/ws`) leaves a paying client's `GET /v1/me` (median; the p99 with a
//! floor for scheduling noise) and push's rounds within 2× of the same run without it (printed).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmw_testkit::{ServiceHandle, TestDb};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_util::sync::CancellationToken;

/// Push in-process on `core`, leading (rounds every 200 ms when idle); its WebSocket address.
async fn push(
    core: pmw_core::CoreConfig,
    push: pmw_push::PushConfig,
) -> (ServiceHandle, SocketAddr) {
    let mut core = core;
    core.instance = Some("push-a".into());
    let hooks = pmw_push::webhook::WebhookConfig::default();
    ServiceHandle::start_bound(Duration::from_secs(60), move |stop, bound| {
        pmw_push::run_with(core, push, hooks, stop, Some(bound))
    })
    .await
}

fn push_config() -> pmw_push::PushConfig {
    pmw_push::PushConfig {
        push_listen: "127.0.0.1:0".parse().unwrap(),
        push_lock_segment_ms: 1_000,
        push_fallback_ms: 200,
        ..pmw_push::PushConfig::default()
    }
}

/// One WebSocket connect with `key`: the HTTP status of the handshake (101 when upgraded).
async fn ws_connect(addr: SocketAddr, key: &str) -> u16 {
    let mut req = format!("ws://{addr}/v1/ws").into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Ok((_, resp)) => resp.status().as_u16(),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Err(_) => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ws_failed_authentication_is_throttled_before_the_lookup() {
    let db = TestDb::new().await;
    let (core, proxy) = db.behind_proxy().await;
    let (_push, addr) = push(
        core,
        pmw_push::PushConfig {
            push_ws_auth_failures_per_sec: 1,
            push_ws_auth_failure_burst: 3,
            ..push_config()
        },
    )
    .await;
    let unknown = format!("pmw_{}", "0".repeat(64));
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(ws_connect(addr, &unknown).await);
    }
    println!("bad keys on /v1/ws: {statuses:?}");
    assert_eq!(
        statuses[..3],
        [101, 101, 101],
        "refused after the upgrade (1008)"
    );
    assert_eq!(statuses[3], 429, "{statuses:?}");
    // Nothing asked of the store while over the limit: 429 even with Postgres cut.
    proxy.cut();
    assert_eq!(ws_connect(addr, &unknown).await, 429);
    let ticket = format!("ws://{addr}/v1/ws?ticket=pmwt_{}", "0".repeat(64));
    let r = tokio_tungstenite::connect_async(ticket).await;
    assert!(
        matches!(&r, Err(tokio_tungstenite::tungstenite::Error::Http(resp)) if resp.status() == 429),
        "a ticket's redemption is throttled too: {r:?}"
    );
    proxy.restore();
}

/// Latencies of a paying client's `GET /v1/me`, one every 60 ms for `span` (under its
/// per-account rate), in ms. It connects from 127.0.0.2: the flood's address (127.0.0.1) is
/// throttled, and a client sharing it would share its throttle.
async fn paying_client(base: &str, key: &str, span: Duration) -> Vec<f64> {
    let http = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let end = Instant::now() + span;
    let mut ms = Vec::new();
    while Instant::now() < end {
        let t = Instant::now();
        let r = http
            .get(format!("{base}/v1/me"))
            .bearer_auth(key)
            .send()
            .await;
        let status = r.map(|r| r.status().as_u16());
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(
            matches!(status, Ok(200)),
            "the paying client must be served: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    ms
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() as f64 - 1.0) * p).round() as usize]
}

/// Push's rounds so far: (sum of seconds, count) of `pmw_push_round_duration_seconds`.
fn rounds() -> (f64, f64) {
    let page = pmw_core::metrics::render();
    let total = |suffix: &str| -> f64 {
        page.lines()
            .filter(|l| l.starts_with(&format!("pmw_push_round_duration_seconds{suffix}")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (total("_sum"), total("_count"))
}

/// The flood: `n` tasks each repeating `hit` with a 200 ms pause until `stop` (bounded: about
/// 400 requests a second from 80 tasks); counts the hits.
fn flood<F, Fut>(n: usize, stop: &CancellationToken, hits: &Arc<AtomicU64>, hit: F)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    for _ in 0..n {
        let (stop, hits, hit) = (stop.clone(), hits.clone(), hit.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                hit().await;
                hits.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_flood_of_anonymous_and_bad_credential_callers_spares_paying_clients_and_rounds()
{
    let db = TestDb::new().await;
    let api_cfg = pmw_api::ApiConfig {
        api_listen: "127.0.0.1:0".parse().unwrap(),
        ..pmw_api::ApiConfig::default()
    };
    let core = db.cfg.clone();
    let (_api, api) = ServiceHandle::start_bound(Duration::from_secs(30), move |stop, bound| {
        pmw_api::run_with(core, api_cfg, stop, Some(bound))
    })
    .await;
    let (_push, ws) = push(db.cfg.clone(), push_config()).await;
    let (key, abuser) = {
        let c = db.pg.get().await.unwrap();
        let payer = pmw_tools::chain::account(&c, "payer", &[]).await.1;
        (payer, pmw_tools::chain::account(&c, "abuser", &[]).await.1)
    };
    let base = format!("http://{api}");
    let span = Duration::from_secs(8);
    tokio::time::sleep(Duration::from_secs(1)).await;

    let r0 = rounds();
    let quiet = paying_client(&base, &key, span).await;
    let r1 = rounds();

    // The flood, bounded: 40 anonymous /v1/ready callers, 20 bad keys on /v1/me, 20 on /v1/ws,
    // and another paying account's 20 callers spending its own limits (issue 30 items 5 and 6):
    // keys created past its cap, no-op deletes that must not bump `subs_version`, history scans.
    let stop = CancellationToken::new();
    let counts: Vec<Arc<AtomicU64>> = (0..4).map(|_| Arc::default()).collect();
    let http = reqwest::Client::new();
    let bad = format!("pmw_{}", "0".repeat(64));
    let (h, url) = (http.clone(), format!("{base}/v1/ready"));
    flood(40, &stop, &counts[0], move || {
        let (h, url) = (h.clone(), url.clone());
        async move {
            let _ = h.get(url).send().await;
        }
    });
    let (h, url, k) = (http.clone(), format!("{base}/v1/me"), bad.clone());
    flood(20, &stop, &counts[1], move || {
        let (h, url, k) = (h.clone(), url.clone(), k.clone());
        async move {
            let _ = h.get(url).bearer_auth(k).send().await;
        }
    });
    let k = bad.clone();
    flood(20, &stop, &counts[2], move || {
        let k = k.clone();
        async move {
            ws_connect(ws, &k).await;
        }
    });
    let (h, b, k) = (http.clone(), base.clone(), abuser.clone());
    flood(20, &stop, &counts[3], move || {
        let (h, b, k) = (h.clone(), b.clone(), k.clone());
        async move {
            let keys = h.post(format!("{b}/v1/keys")).bearer_auth(&k);
            let _ = keys.json(&serde_json::json!({"name": "more"})).send().await;
            let _ = h
                .delete(format!("{b}/v1/keys/pmw_00000000"))
                .bearer_auth(&k)
                .send()
                .await;
            let wallet = format!("0x{}", "ab".repeat(20));
            let trades = h
                .get(format!("{b}/v1/trades?wallet={wallet}"))
                .bearer_auth(&k);
            let _ = trades.send().await;
        }
    });
    let flooded = paying_client(&base, &key, span).await;
    let r2 = rounds();
    stop.cancel();

    let mean = |a: (f64, f64), b: (f64, f64)| (b.0 - a.0) / (b.1 - a.1).max(1.0) * 1e3;
    let (round_quiet, round_flood) = (mean(r0, r1), mean(r1, r2));
    let n: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let figures = format!(
        "flood over {} s: {} /v1/ready, {} bad-key /v1/me, {} bad-key /v1/ws requests, {} rounds \
         of another account's key creation, no-op delete and history scan; \
         paying GET /v1/me p50/p99 {:.1}/{:.1} ms quiet vs {:.1}/{:.1} ms flooded ({} / {} samples); \
         push round mean {:.2} ms quiet ({} rounds) vs {:.2} ms flooded ({} rounds)",
        span.as_secs(),
        n[0],
        n[1],
        n[2],
        n[3],
        pct(&quiet, 0.5),
        pct(&quiet, 0.99),
        pct(&flooded, 0.5),
        pct(&flooded, 0.99),
        quiet.len(),
        flooded.len(),
        round_quiet,
        r1.1 - r0.1,
        round_flood,
        r2.1 - r1.1,
    );
    println!("security flood: {figures}");
    // Within 2×, with a floor for this shared 2-core debug build's noise: see the printed
    // figures for the ratios themselves. The flood's 80 tasks run on the same two worker threads
    // as the API and the paying client, so the p99 of ~130 samples is one or two requests that
    // waited for a thread: a CI run measured 5.3 ms quiet against 30.6 ms flooded while the p50s
    // stayed close. The median carries the 2× claim with a small floor; the p99 catches
    // starvation (hundreds of ms, or the 200 asserted above failing) with a 50 ms floor.
    let p50 = (pct(&quiet, 0.5), pct(&flooded, 0.5));
    assert!(p50.1 <= 2.0 * p50.0 + 5.0, "/v1/me p50 {p50:?}");
    let p99 = (pct(&quiet, 0.99), pct(&flooded, 0.99));
    assert!(p99.1 <= 2.0 * p99.0 + 50.0, "/v1/me p99 {p99:?}");
    assert!(
        round_flood <= 2.0 * round_quiet + 5.0,
        "round mean {round_quiet} -> {round_flood} ms"
    );
}

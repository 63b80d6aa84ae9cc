//! The churn drill (issue 12): while pmw-sim trades, other accounts create and delete webhook
//! endpoints and subscriptions, create and revoke keys (with sessions open on them) and open and
//! close sessions, as fast as their rate limits allow, through Caddy and the real API. A watched
//! account's WebSocket and webhook deliveries must continue throughout: 0 lost, and its
//! client-observed latency is compared with the same run's quiet phase.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::routing::post;
use futures::StreamExt;
use pmw_core::{Cursor, UnixMs};
use pmw_sim::{demo_wallets, RunConfig};
use pmw_tools::verdict;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::clients::pct;
use super::harness::{account, Drill, Opts};

const QUIET: Duration = Duration::from_secs(25);
const CHURN: Duration = Duration::from_secs(60);

/// Latency samples of the watched client: (receive time, detect→receive ms, cursor).
type Samples = Arc<Mutex<Vec<(Instant, i64, Cursor)>>>;

async fn watched_client(url: String, key: String, samples: Samples, stop: CancellationToken) {
    let mut last: Option<Cursor> = None;
    while !stop.is_cancelled() {
        let full = match last {
            Some(c) => format!("{url}?since={c}"),
            None => url.clone(),
        };
        let mut req = full.into_client_request().unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
        let Ok(Ok((ws, _))) = tokio::time::timeout(
            Duration::from_secs(5),
            tokio_tungstenite::connect_async(req),
        )
        .await
        else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (_sink, mut stream) = ws.split();
        loop {
            let msg = tokio::select! { m = stream.next() => m, _ = stop.cancelled() => return };
            let Some(Ok(Message::Text(t))) = msg else {
                break;
            };
            let v: serde_json::Value = serde_json::from_str(&t).unwrap();
            match v["type"].as_str() {
                Some("hello") if last.is_none() => {
                    last = v["cursor"].as_str().and_then(|c| c.parse().ok())
                }
                Some("trade") => {
                    let c: Cursor = v["cursor"].as_str().unwrap().parse().unwrap();
                    let lat = UnixMs::now().0 - v["t_detect_ms"].as_i64().unwrap();
                    samples.lock().unwrap().push((Instant::now(), lat, c));
                    last = Some(c);
                }
                _ => {}
            }
        }
    }
}

/// A receiver: the watched endpoint records trade cursors; the churn endpoints just answer 200.
async fn receiver(got: Arc<Mutex<BTreeSet<Cursor>>>) -> u16 {
    let app = axum::Router::new()
        .route(
            "/watched",
            post(move |body: String| {
                let got = got.clone();
                async move {
                    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                    if v["type"] == "trade" {
                        if let Some(c) = v["cursor"].as_str().and_then(|c| c.parse().ok()) {
                            got.lock().unwrap().insert(c);
                        }
                    }
                    "ok"
                }
            }),
        )
        .route("/churn", post(|| async { "ok" }));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(l, app).await });
    port
}

/// An API call through Caddy that waits out 429s; the JSON body (Null when none).
async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    key: &str,
    body: Option<serde_json::Value>,
) -> serde_json::Value {
    loop {
        let mut req = http.request(method.clone(), url).bearer_auth(key);
        if let Some(b) = &body {
            req = req.json(b);
        }
        let Ok(resp) = req.send().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        if resp.status() == 429 {
            let wait = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                .unwrap_or(1);
            tokio::time::sleep(Duration::from_millis(wait * 1000)).await;
            continue;
        }
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        if body.is_empty() {
            // 204 (a delete) has no body; anything else empty is an answer worth seeing.
            assert!(status.is_success(), "{method} {url}: {status} with no body");
            return serde_json::Value::Null;
        }
        return serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{method} {url}: {status} not JSON ({e}): {body}"));
    }
}

/// A churn account (key) created directly in Postgres, following two of the sim's wallets.
async fn churn_account(d: &Drill) -> String {
    account(&d.db.connect().await, "churn", &demo_wallets(2))
        .await
        .1
}

/// Open a session through Caddy and read its hello; the socket is returned open.
async fn open_session(
    ws_url: &str,
    key: &str,
) -> Option<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
> {
    let mut req = ws_url.into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.ok()?;
    match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
        Ok(Some(Ok(Message::Text(_)))) => Some(ws),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_churn_of_other_accounts_stalls_no_one() {
    let d = Drill::start_with(Opts {
        env: vec![
            ("PMW_API_ALLOW_PRIVATE_WEBHOOKS", "true"),
            ("PMW_PUSH_ALLOW_PRIVATE_WEBHOOKS", "true"),
        ],
        ..Opts::default()
    })
    .await;
    let site = format!("http://127.0.0.1:{}", d.site);
    let ws_url = format!("ws://127.0.0.1:{}/v1/ws", d.site);
    let http = reqwest::Client::new();
    let hooks: Arc<Mutex<BTreeSet<Cursor>>> = Arc::default();
    let port = receiver(hooks.clone()).await;
    let (watched_key, watched_wallets) = d.accounts[0].clone();
    let created = call(
        &http,
        reqwest::Method::POST,
        &format!("{site}/v1/webhooks"),
        &watched_key,
        Some(serde_json::json!({"url": format!("http://127.0.0.1:{port}/watched")})),
    )
    .await;
    assert!(
        created["id"].is_i64() || created["endpoint"]["id"].is_i64(),
        "watched endpoint created: {created}"
    );
    let hook_from = Cursor {
        block: d.sim.rpc().latest_block().await.unwrap().number.0,
        log_index: pmw_core::types::cursor::MAX_LOG_INDEX,
    };
    let samples: Samples = Arc::default();
    let stop = CancellationToken::new();
    tokio::spawn(watched_client(
        ws_url.clone(),
        watched_key.clone(),
        samples.clone(),
        stop.clone(),
    ));
    let traffic = d.sim.spawn(
        RunConfig {
            matches_per_block: 2,
            interval: Duration::from_millis(250),
            count: None,
            duration: Some(QUIET + CHURN),
        },
        CancellationToken::new(),
    );
    let t0 = Instant::now();
    tokio::time::sleep(QUIET).await;

    // Churn: four accounts, each as fast as its rate limit allows, until CHURN is over.
    let churn_at = Instant::now();
    let churn_stop = CancellationToken::new();
    let ops: Arc<[AtomicU64; 4]> = Arc::default();
    let mut tasks = Vec::new();
    for kind in 0..4usize {
        let (key, http, site, ws_url, ops, stop) = (
            churn_account(&d).await,
            http.clone(),
            site.clone(),
            ws_url.clone(),
            ops.clone(),
            churn_stop.clone(),
        );
        let hook = format!("http://127.0.0.1:{port}/churn");
        tasks.push(tokio::spawn(async move {
            let wallet = demo_wallets(6)[5].to_lower_hex();
            while !stop.is_cancelled() {
                match kind {
                    0 => {
                        let e = call(
                            &http,
                            reqwest::Method::POST,
                            &format!("{site}/v1/webhooks"),
                            &key,
                            Some(serde_json::json!({"url": hook})),
                        )
                        .await;
                        let id = e["id"].as_i64().or(e["endpoint"]["id"].as_i64());
                        if let Some(id) = id {
                            call(
                                &http,
                                reqwest::Method::DELETE,
                                &format!("{site}/v1/webhooks/{id}"),
                                &key,
                                None,
                            )
                            .await;
                        }
                    }
                    1 => {
                        call(
                            &http,
                            reqwest::Method::POST,
                            &format!("{site}/v1/subscriptions"),
                            &key,
                            Some(serde_json::json!({"wallet": wallet})),
                        )
                        .await;
                        call(
                            &http,
                            reqwest::Method::DELETE,
                            &format!("{site}/v1/subscriptions/{wallet}"),
                            &key,
                            None,
                        )
                        .await;
                    }
                    2 => {
                        let k = call(
                            &http,
                            reqwest::Method::POST,
                            &format!("{site}/v1/keys"),
                            &key,
                            Some(serde_json::json!({})),
                        )
                        .await;
                        if let (Some(new), Some(prefix)) = (k["key"].as_str(), k["prefix"].as_str())
                        {
                            let session = open_session(&ws_url, new).await;
                            call(
                                &http,
                                reqwest::Method::DELETE,
                                &format!("{site}/v1/keys/{prefix}"),
                                &key,
                                None,
                            )
                            .await;
                            drop(session);
                        }
                    }
                    _ => match open_session(&ws_url, &key).await {
                        Some(mut ws) => {
                            let _ = ws.close(None).await;
                        }
                        // Refused (429: the account's connect rate): back off as a client should.
                        None => tokio::time::sleep(Duration::from_millis(200)).await,
                    },
                }
                ops[kind].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(CHURN).await;
    churn_stop.cancel();
    for t in tasks {
        t.await.unwrap();
    }
    traffic.await.unwrap().unwrap();
    d.drain().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.cancel();

    let f = d.figures();
    let canonical = d.sim.canonical();
    let owed: BTreeSet<Cursor> = canonical
        .iter()
        .filter(|e| watched_wallets.contains(&e.maker))
        .map(|e| Cursor {
            block: e.block_number,
            log_index: e.log_index as u32,
        })
        .filter(|c| *c > hook_from)
        .collect();
    let got_ws: BTreeSet<Cursor> = samples.lock().unwrap().iter().map(|s| s.2).collect();
    let lost_ws = owed.difference(&got_ws).count();
    let lost_hooks = owed.difference(&hooks.lock().unwrap()).count();
    let (mut quiet, mut churn): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
    for (at, lat, _) in samples.lock().unwrap().iter() {
        let lat = (*lat).max(0) as u64;
        if *at < churn_at {
            quiet.push(lat);
        } else {
            churn.push(lat);
        }
    }
    let (q50, q99) = (pct(&mut quiet, 0.5), pct(&mut quiet, 0.99));
    let (c50, c99) = (pct(&mut churn, 0.5), pct(&mut churn, 0.99));
    let counts: Vec<u64> = ops.iter().map(|o| o.load(Ordering::Relaxed)).collect();
    let figures = format!(
        "churn for {} s after {} s quiet: endpoint create+delete {}, subscribe+unsubscribe {}, key create+session+revoke {}, session open+close {}; watched account: {} trades owed, lost over WebSocket {lost_ws}, lost over webhooks {lost_hooks}; detect→client p50/p99 quiet {q50}/{q99} ms ({} trades), during churn {c50}/{c99} ms ({} trades); 100 drill clients: {f}",
        CHURN.as_secs(),
        QUIET.as_secs(),
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        owed.len(),
        quiet.len(),
        churn.len()
    );
    let title = format!("churn ({} s)", t0.elapsed().as_secs());
    verdict(&title, "churn", &figures);
    assert!(
        counts.iter().all(|n| *n >= 20),
        "every churn kind ran: {counts:?}"
    );
    assert_eq!(
        (lost_ws, lost_hooks),
        (0, 0),
        "0 lost for the watched account"
    );
    f.assert_clean();
    assert!(
        !quiet.is_empty() && !churn.is_empty(),
        "trades in both phases"
    );
    // Within 2× of the quiet phase (issue 12's bound), with 100 ms for a shared 2-core
    // machine's scheduling noise on numbers this small (both are printed above and recorded).
    assert!(
        c99 <= 2 * q99 + 100,
        "p99 during churn {c99} ms vs quiet {q99} ms"
    );
}

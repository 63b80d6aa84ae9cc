//! `/v1/ready` on the real stack: 503 with a reason while push has no recent round (no leader,
//! stopped leader, stale heartbeat), while the detect→push median is too high, and while
//! Postgres is unreachable; 200 again as soon as each recovers. ClickHouse unreachable is a
//! warning (delivery does not read it), also when the API starts during the outage. `/v1/health`
//! answers regardless. A missing push standby (no fresh `standby` heartbeat) is reported in
//! `checks.push_standby` and `warnings` without flipping readiness.

use std::time::Duration;

use crate::api::{live_for, push_config, ready_becomes, spawn_api, start_push, test_config, Api};
use pmw_api::ApiConfig;
use pmw_core::ch::latency::insert_push;
use pmw_core::ch::PushLatencyRow;
use pmw_core::{CoreConfig, UnixMs};
use pmw_testkit::seed::Endpoint;
use pmw_testkit::{eventually, Http, Resp, ServiceHandle, TcpProxy, TestDb};
use secrecy::{ExposeSecret, SecretString};

const WITHIN: Duration = Duration::from_secs(20);

fn cfg() -> ApiConfig {
    ApiConfig {
        api_ready_round_max_age_ms: 2_000,
        ..test_config()
    }
}

fn latency(t_push_ms: i64, ms: i64, backfilled: u8) -> PushLatencyRow {
    PushLatencyRow {
        block_number: 1,
        log_index: 0,
        channel: "ws".into(),
        target_id: 1,
        t_detect_ms: t_push_ms - ms,
        t_push_ms,
        epoch: 1,
        backfilled,
        attempt: 0,
        pending_id: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_follows_push_rounds_and_latency() {
    let api = Api::start_with(cfg()).await;
    let _live = live_for(&api.db.cfg).await;
    let health = api
        .call(reqwest::Method::GET, "/v1/health", None, None)
        .await;
    health.expect(200, None);
    assert_eq!(health.body["status"], "ok");

    let r = ready_becomes(&api.base, 503, WITHIN).await;
    assert_eq!(r.code(), "not_ready");
    assert!(r.text.contains("no push leader heartbeat"), "{}", r.text);
    assert_eq!(r.body["checks"]["postgres"]["ok"], true);

    // Push leads and completes rounds: ready.
    let (push, _) = start_push(api.db.cfg.clone(), "push-a").await;
    let r = ready_becomes(&api.base, 200, WITHIN).await;
    assert_eq!(r.body["ready"], true);
    assert_eq!(r.body["checks"]["push"]["detail"]["instance"], "push-a");

    // Push stops: not ready.
    push.stop().await.unwrap();
    let r = ready_becomes(&api.base, 503, WITHIN).await;
    assert!(r.body["checks"]["push"]["ok"] == false, "{}", r.text);

    // Push back: ready again.
    let (push, _) = start_push(api.db.cfg.clone(), "push-b").await;
    ready_becomes(&api.base, 200, WITHIN).await;

    // A leader whose heartbeat went stale (hung or killed without a goodbye) is not ready.
    push.stop().await.unwrap();
    let c = api.db.pg.get().await.unwrap();
    let old = UnixMs::now().0 - 60_000;
    c.execute(
        "UPDATE heartbeats SET beat_ms = $1, state = jsonb_build_object('role', 'leader', 'last_round_ms', $1::bigint) \
         WHERE service = 'pmw-push'",
        &[&old],
    )
    .await
    .unwrap();
    let r = ready_becomes(&api.base, 503, WITHIN).await;
    assert!(r.text.contains("last beat"), "{}", r.text);
    let (_push, _) = start_push(api.db.cfg.clone(), "push-b").await;
    ready_becomes(&api.base, 200, WITHIN).await;

    // Detect→push median over the window above 5 s: not ready. Backfilled rows and rows outside
    // the window (a corrupt far-future one included) do not count.
    let now = UnixMs::now().0;
    let mut rows: Vec<PushLatencyRow> =
        (0..5).map(|i| latency(now - 1_000 - i, 8_000, 0)).collect();
    rows.extend((0..20).map(|i| latency(now - 1_000 - i, 10, 1)));
    rows.extend((0..20).map(|i| latency(now - 30 * 60_000 - i, 10, 0)));
    rows.extend((0..20).map(|i| latency(now + 86_400_000 + i, 10, 0)));
    insert_push(&api.db.ch, &rows).await.unwrap();
    let r = ready_becomes(&api.base, 503, WITHIN).await;
    assert_eq!(r.body["checks"]["latency"]["ok"], false, "{}", r.text);
    assert_eq!(r.body["checks"]["latency"]["detail"]["median_ms"], 8_000);
    assert_eq!(r.body["checks"]["latency"]["detail"]["samples"], 5);
    assert!(r.text.contains("detect→push median"), "{}", r.text);
    // Fast deliveries bring the median back under the threshold.
    let now = UnixMs::now().0;
    insert_push(
        &api.db.ch,
        &(0..10)
            .map(|i| latency(now - 500 - i, 40, 0))
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    let r = ready_becomes(&api.base, 200, WITHIN).await;
    assert_eq!(r.body["checks"]["latency"]["detail"]["median_ms"], 40);
}

/// A breakable proxy in front of the test's ClickHouse.
async fn clickhouse_proxy(cfg: &CoreConfig) -> TcpProxy {
    let target = cfg.clickhouse_url.trim_start_matches("http://");
    TcpProxy::start(target.parse().unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_is_503_while_postgres_is_unreachable_and_warns_while_clickhouse_is() {
    let db = TestDb::new().await;
    let pg_port = db.cfg.postgres().get_ports()[0];
    let pg_proxy = TcpProxy::start(format!("127.0.0.1:{pg_port}").parse().unwrap()).await;
    let ch_proxy = clickhouse_proxy(&db.cfg).await;
    let mut core = db.cfg.clone();
    core.postgres_url = SecretString::from(core.postgres_url.expose_secret().replace(
        &format!(":{pg_port}/"),
        &format!(":{}/", pg_proxy.addr.port()),
    ));
    core.clickhouse_url = format!("http://{}", ch_proxy.addr);
    let (addr, _api) = spawn_api(core, cfg()).await;
    let base = format!("http://{addr}");
    let _live = live_for(&db.cfg).await;
    let (_push, _) = start_push(db.cfg.clone(), "push-a").await;
    ready_becomes(&base, 200, WITHIN).await;

    pg_proxy.cut();
    let r = ready_becomes(&base, 503, WITHIN).await;
    assert_eq!(r.body["checks"]["postgres"]["ok"], false, "{}", r.text);
    assert!(r.text.contains("postgres unreachable"), "{}", r.text);
    // Health does not depend on the stores.
    let h = reqwest::get(format!("{base}/v1/health")).await.unwrap();
    assert_eq!(h.status().as_u16(), 200);
    pg_proxy.restore();
    ready_becomes(&base, 200, WITHIN).await;

    // ClickHouse is off the delivery path: down, it is a warning and readiness stays 200.
    ch_proxy.cut();
    let r = ready_until(&base, "clickhouse reported unreachable", |r| {
        r.body["checks"]["clickhouse"]["ok"] == false
    })
    .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    let warned = r.body["warnings"].as_array().unwrap();
    assert!(
        warned
            .iter()
            .any(|w| w.as_str().unwrap().contains("clickhouse unreachable")),
        "{}",
        r.text
    );
    assert_eq!(
        r.body["checks"]["latency"]["detail"]["unknown"],
        "clickhouse unreachable"
    );
    ch_proxy.restore();
    ready_until(&base, "clickhouse back", |r| {
        r.status.as_u16() == 200 && r.body["checks"]["clickhouse"]["ok"] == true
    })
    .await;
}

/// The API starts while ClickHouse is down (what it serves lives in Postgres): it binds, serves
/// an account's own data, and readiness reports ClickHouse until it answers again. It used to
/// exit 75 at start until ClickHouse was back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_starts_while_clickhouse_is_down_and_reports_it() {
    let db = TestDb::new().await;
    let ch_proxy = clickhouse_proxy(&db.cfg).await;
    ch_proxy.cut();
    let mut core = db.cfg.clone();
    core.clickhouse_url = format!("http://{}", ch_proxy.addr);
    let (addr, _api) = spawn_api(core, cfg()).await;
    let base = format!("http://{addr}");
    let key = {
        let c = db.pg.get().await.unwrap();
        pmw_tools::chain::account(&c, "during-outage", &[]).await.1
    };
    let me = reqwest::Client::new()
        .get(format!("{base}/v1/me"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(me.status().as_u16(), 200, "{:?}", me.text().await);
    let r = ready_until(&base, "clickhouse reported unreachable", |r| {
        r.body["checks"]["clickhouse"]["ok"] == false
    })
    .await;
    assert!(r.text.contains("clickhouse unreachable"), "{}", r.text);
    ch_proxy.restore();
    ready_until(&base, "clickhouse back", |r| {
        r.body["checks"]["clickhouse"]["ok"] == true
    })
    .await;
}

/// Poll `GET /v1/ready` until `pred` holds on the response (within [`WITHIN`]).
async fn ready_until(base: &str, what: &str, pred: impl Fn(&Resp) -> bool) -> Resp {
    Http::at(base).until("/v1/ready", WITHIN, what, pred).await
}

fn standby_ok(r: &Resp) -> bool {
    r.body["checks"]["push_standby"]["ok"] == true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_push_standby_is_a_warning_not_a_503() {
    let api = Api::start_with(cfg()).await;
    let _live = live_for(&api.db.cfg).await;
    let r = ready_becomes(&api.base, 503, WITHIN).await;
    assert_eq!(r.body["checks"]["push_standby"]["ok"], false, "{}", r.text);
    assert!(
        r.text.contains("no push standby: no standby heartbeat"),
        "{}",
        r.text
    );

    // A leader alone serves: ready, but the missing standby is reported and counted.
    let (leader, _) = start_push(api.db.cfg.clone(), "push-a").await;
    let r = ready_becomes(&api.base, 200, WITHIN).await;
    assert_eq!(r.body["ready"], true);
    assert_eq!(r.body["checks"]["push_standby"]["ok"], false, "{}", r.text);
    assert_eq!(r.body["checks"]["push_standby"]["detail"]["standbys"], 0);
    let reason = r.body["checks"]["push_standby"]["reason"].as_str().unwrap();
    assert!(reason.contains("single point of failure"), "{reason}");
    assert!(
        r.body["warnings"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(reason)),
        "{}",
        r.text
    );
    assert!(r.body.get("error").is_none(), "{}", r.text);

    // A standby waiting on the lock: the check passes, no warnings.
    let mut core = api.db.cfg.clone();
    core.instance = Some("push-b".into());
    let hooks = pmw_push::webhook::WebhookConfig::default();
    let standby = ServiceHandle::spawn(move |stop| {
        pmw_push::run_with(core, push_config(), hooks, stop, None)
    });
    let r = ready_until(&api.base, "a fresh standby", standby_ok).await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    assert_eq!(
        r.body["checks"]["push_standby"]["detail"]["instances"],
        serde_json::json!(["push-b"])
    );
    // No push standby warning left (pmw-stats and pmw-live are not running here: theirs stay).
    assert!(
        !r.body["warnings"].to_string().contains("no push standby"),
        "{}",
        r.text
    );
    // It keeps beating while it waits: fresh again long after the 2 s limit (one beat at start
    // would have gone stale for good). Its own heartbeat row tells when 5 s have passed.
    let beat_late = eventually(Duration::from_secs(30), || async {
        let c = api.db.pg.get().await.unwrap();
        c.query_opt(
            "SELECT beat_ms - started_ms FROM heartbeats WHERE service = 'pmw-push' AND instance = 'push-b'",
            &[],
        )
        .await
        .unwrap()
        .is_some_and(|r| r.get::<_, i64>(0) >= 5_000)
    })
    .await;
    assert!(beat_late, "the standby beat 5 s after it started");
    let r = ready_until(&api.base, "the standby still fresh", standby_ok).await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    assert!(!standby.is_finished());

    // A standby that died without a goodbye (kill -9): its beat goes stale, and the age is told.
    let c = api.db.pg.get().await.unwrap();
    c.execute(
        "INSERT INTO heartbeats (service, instance, pid, started_ms, beat_ms, state) \
         VALUES ('pmw-push', 'push-c', 1, 0, $1, '{\"role\": \"standby\"}')",
        &[&(UnixMs::now().0 - 60_000)],
    )
    .await
    .unwrap();
    standby.stop().await.unwrap();
    let r = ready_until(&api.base, "the standby missing", |r| !standby_ok(r)).await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    assert!(
        r.text.contains("no push standby: last standby beat"),
        "{}",
        r.text
    );
    assert_eq!(
        r.body["checks"]["push_standby"]["detail"]["stale"][0]["instance"], "push-c",
        "{}",
        r.text
    );
    leader.stop().await.unwrap();

    // The document describes what is served.
    let doc = api
        .call(reqwest::Method::GET, "/v1/openapi.json", None, None)
        .await;
    let schemas = &doc.body["components"]["schemas"];
    assert!(
        schemas["Checks"]["properties"]["push_standby"].is_object(),
        "{}",
        schemas["Checks"]
    );
    assert!(
        schemas["Checks"]["required"]
            .as_array()
            .unwrap()
            .contains(&"push_standby".into()),
        "{}",
        schemas["Checks"]
    );
    assert!(
        schemas["Readiness"]["properties"]["warnings"].is_object(),
        "{}",
        schemas["Readiness"]
    );
}

/// The live and stats pairs (issue 44): without a standby each is a warning, not a 503; a
/// standby beating `{"role":"standby"}` (not the writer lock's holder) passes the check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_and_stats_standbys_are_reported_and_a_missing_one_warns() {
    let api = Api::start_with(cfg()).await;
    let r = ready_until(&api.base, "both standbys missing", |r| {
        r.body["checks"]["live_standby"]["ok"] == false
            && r.body["checks"]["stats_standby"]["ok"] == false
    })
    .await;
    let warnings = r.body["warnings"].to_string();
    assert!(warnings.contains("no pmw-live standby"), "{}", r.text);
    assert!(warnings.contains("no pmw-stats standby"), "{}", r.text);
    // live-a holds the live lock; both beat as standbys, only live-b counts (the holder's row
    // is not a standby whatever it says).
    let c = api.db.pg.get().await.unwrap();
    c.execute(
        "INSERT INTO writer_epochs VALUES ($1, 1, 'live-a', 1, now(), 0, 0)",
        &[&pmw_core::lock::keys::LIVE],
    )
    .await
    .unwrap();
    let beats: Vec<_> = ["live-a", "live-b"]
        .map(|i| pmw_core::heartbeat::Heartbeat::new(api.db.pg.clone(), "pmw-live", i))
        .into_iter()
        .collect();
    let stop = tokio_util::sync::CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    tokio::spawn(async move {
        while !stop.is_cancelled() {
            for b in &beats {
                let _ = b.beat(&serde_json::json!({"role": "standby"})).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    let r = ready_until(&api.base, "a live standby", |r| {
        r.body["checks"]["live_standby"]["ok"] == true
    })
    .await;
    assert_eq!(
        r.body["checks"]["live_standby"]["detail"]["instances"],
        serde_json::json!(["live-b"]),
        "{}",
        r.text
    );
    let warnings = r.body["warnings"].to_string();
    assert!(!warnings.contains("no pmw-live standby"), "{}", r.text);
    assert!(warnings.contains("no pmw-stats standby"), "{}", r.text);
}

/// Ingest is part of the path: no pmw-live (never started, or stopped: a stale heartbeat) or a
/// watermark trailing the head is 503 naming ingest; a delivery due and never attempted names
/// the webhook dispatcher; a missing pmw-stats is only a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_covers_ingest_and_the_webhook_dispatcher() {
    let api = Api::start_with(cfg()).await;
    let (push, _) = start_push(api.db.cfg.clone(), "push-a").await;
    let r = ready_until(&api.base, "ingest failing", |r| {
        r.body["checks"]["ingest"]["ok"] == false
    })
    .await;
    assert_eq!(r.status.as_u16(), 503, "{}", r.text);
    assert!(r.text.contains("ingest is not running"), "{}", r.text);
    assert!(r.text.contains("no pmw-stats heartbeat"), "{}", r.text);

    let (anvil, live) = live_for(&api.db.cfg).await;
    let r = ready_becomes(&api.base, 200, WITHIN).await;
    assert_eq!(r.body["checks"]["ingest"]["ok"], true, "{}", r.text);
    assert!(
        r.body["warnings"].to_string().contains("pmw-stats"),
        "{}",
        r.text
    );

    // pmw-live stops: its last heartbeat ages past the limit.
    live.stop().await.unwrap();
    drop(anvil);
    let r = ready_becomes(&api.base, 503, WITHIN).await;
    assert!(r.text.contains("pmw-live"), "{}", r.text);
    assert!(r.text.contains("last beat"), "{}", r.text);

    // A writer that beats but trails the head.
    let c = api.db.pg.get().await.unwrap();
    c.execute(
        "INSERT INTO heartbeats (service, instance, pid, started_ms, beat_ms, state) \
         VALUES ('pmw-live', 'lagging', 1, $1, $1, jsonb_build_object('state', 'ingesting', 'cursor', 10, 'head', 100)) \
         ON CONFLICT (service, instance) DO UPDATE SET beat_ms = EXCLUDED.beat_ms, state = EXCLUDED.state",
        &[&UnixMs::now().0],
    )
    .await
    .unwrap();
    let r = ready_until(&api.base, "ingest lag", |r| {
        r.text.contains("trails the chain head by 90 blocks")
    })
    .await;
    assert_eq!(r.status.as_u16(), 503);

    // A delivery due for minutes that no dispatcher attempted (push, with its dispatcher, is
    // stopped).
    push.stop().await.unwrap();
    let account = pmw_testkit::seed::account(&c, "w", "pro").await;
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let endpoint = Endpoint::new(account, "http://127.0.0.1:9/x", secret)
        .insert(&c)
        .await;
    let due = UnixMs::now().0 - 300_000;
    c.execute(
        "INSERT INTO webhook_deliveries (id, endpoint_id, kind, block_number, log_index, payload, \
           state, attempts, next_attempt_ms, t_detect_ms, created_ms) \
         VALUES ('msg_overdue_trade', $1, 'trade', 1, 0, '{}', 'pending', 0, $2, $2, $2)",
        &[&endpoint, &due],
    )
    .await
    .unwrap();
    let r = ready_until(&api.base, "webhooks failing", |r| {
        r.body["checks"]["webhooks"]["ok"] == false
    })
    .await;
    assert!(r.text.contains("webhook dispatcher"), "{}", r.text);
    assert_eq!(r.body["checks"]["webhooks"]["detail"]["overdue"], 1);
    c.execute("DELETE FROM webhook_deliveries", &[])
        .await
        .unwrap();

    // The webhook lane behind the push cursor and unmoved for longer than the bound: webhooks
    // are not being queued. Caught up (even unmoved for long), it is fine.
    let old = UnixMs::now().0 - 300_000;
    c.execute(
        "UPDATE webhook_cursor SET block_number = 5, log_index = 999999, updated_ms = $1",
        &[&old],
    )
    .await
    .unwrap();
    c.execute(
        "UPDATE push_cursor SET block_number = 9, log_index = 3, updated_ms = $1",
        &[&UnixMs::now().0],
    )
    .await
    .unwrap();
    let r = ready_until(&api.base, "the webhook lane stuck", |r| {
        r.text.contains("the webhook lane is at block 5")
    })
    .await;
    assert_eq!(r.body["checks"]["webhooks"]["ok"], false, "{}", r.text);
    c.execute(
        "UPDATE webhook_cursor SET block_number = 9, log_index = 3",
        &[],
    )
    .await
    .unwrap();
    let r = ready_until(&api.base, "the webhook lane caught up", |r| {
        r.body["checks"]["webhooks"]["ok"] == true
    })
    .await;
    assert!(r.body["checks"]["webhooks"]["detail"]["lane_behind_since_ms"].is_null());

    // Every heartbeat carries its build's revision; an instance on another build is a warning.
    let rev: String = c
        .query_one(
            "SELECT state->>'revision' FROM heartbeats WHERE service = 'pmw-push'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rev, pmw_core::build_info::REVISION);
    c.execute(
        "INSERT INTO heartbeats (service, instance, pid, started_ms, beat_ms, state) \
         VALUES ('pmw-stats', 'old', 1, $1, $1, '{\"revision\": \"deadbeef0000\"}')",
        &[&UnixMs::now().0],
    )
    .await
    .unwrap();
    let r = ready_until(&api.base, "a build mismatch", |r| {
        r.body["checks"]["revisions"]["ok"] == false
    })
    .await;
    assert!(r.text.contains("different builds"), "{}", r.text);
    assert!(r.text.contains("pmw-stats/old@deadbeef0000"), "{}", r.text);
}

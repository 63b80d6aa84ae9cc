//! Published availability (issue 28 item 4) on the real stores: samples planted through the
//! sampler's own state machine and insert give the planned shares, unknown time and longest
//! gaps in `/latency.json`; the running sampler reads Postgres (watermark, push cursor, owed
//! blocks, pmw-live's heartbeat, the webhook lane and the facts that name causes) and writes
//! what it saw; an outage still going on is an open incident with its cause; the webhook figure
//! is split into first-attempt and eventually-delivered deliveries.

use std::time::Duration;

use crate::common::*;
use pmw_core::ch::latency;
use pmw_core::UnixMs;
use pmw_stats::StatsConfig;
use pmw_testkit::{eventually_every, TestDb};

fn no_sampler(interval_ms: u64) -> StatsConfig {
    StatsConfig {
        stats_availability_sampler: false,
        ..stats_config(interval_ms)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_gaps_show_as_shares_unknown_time_and_longest_gaps() {
    let db = TestDb::new().await;
    let now = UnixMs::now();
    let plan = plant_samples(&db, now).await;
    let (svc, addr) = start(db.cfg.clone(), no_sampler(3_600_000)).await;
    let json = json_after(addr, now.0).await;
    let a = &json["availability"];
    assert_eq!(a["push_within_ms"], 5_000, "{a}");
    assert_eq!(a["ingest_within_blocks"], 2, "{a}");
    let windows = a["windows"].as_array().unwrap();
    let names: Vec<&str> = windows
        .iter()
        .map(|w| w["window"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["1h", "24h", "7d", "30d"]);
    for (w, len_s) in windows
        .iter()
        .zip([3_600u64, 86_400, 7 * 86_400, 30 * 86_400])
    {
        let sampled = plan.sampled_s;
        assert_eq!(w["seconds"], len_s, "{w}");
        assert_eq!(w["sampled_s"], sampled, "{w}");
        assert_eq!(
            w["unknown_s"],
            len_s - sampled,
            "the hole and the time before: {w}"
        );
        let push_ok = sampled - plan.push_unavailable_s;
        let ingest_ok = sampled - plan.ingest_unavailable_s;
        assert_eq!(w["push"]["available_s"], push_ok, "{w}");
        assert_eq!(w["push"]["unavailable_s"], plan.push_unavailable_s, "{w}");
        assert_eq!(w["ingest"]["available_s"], ingest_ok, "{w}");
        assert_eq!(
            w["ingest"]["unavailable_s"], plan.ingest_unavailable_s,
            "{w}"
        );
        let share = w["push"]["available_share"].as_f64().unwrap();
        assert!((share - push_ok as f64 / len_s as f64).abs() < 1e-6, "{w}");
        let of_sampled = w["push"]["available_share_of_sampled"].as_f64().unwrap();
        assert!(
            (of_sampled - push_ok as f64 / sampled as f64).abs() < 1e-6,
            "{w}"
        );
        assert_eq!(w["push"]["longest_gap_ms"], plan.push_gap_ms, "{w}");
        assert_eq!(
            w["push"]["longest_gap_from"],
            UnixMs(plan.push_gap_from_ms).to_rfc3339().as_str(),
            "{w}"
        );
        assert_eq!(w["ingest"]["longest_gap_ms"], plan.ingest_gap_ms, "{w}");
        assert_eq!(w["push_max_lag_ms"], plan.push_max_lag_ms, "{w}");
        assert_eq!(
            w["ingest_max_lag_blocks"], plan.ingest_max_lag_blocks,
            "{w}"
        );
    }
    // The 1h window: 57.25 % of it push-available (2 061 of 3 600 s), 41.666 % unknown.
    assert_eq!(
        window_named(windows, "1h")["push"]["available_share"],
        0.5725
    );
    assert_eq!(window_named(windows, "1h")["unknown_share"], 0.416666);
    svc.stop().await.unwrap();
}

fn window_named<'a>(ws: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    ws.iter().find(|w| w["window"] == name).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_samples_is_unknown_never_available() {
    let db = TestDb::new().await;
    let now = UnixMs::now();
    let (svc, addr) = start(db.cfg.clone(), no_sampler(3_600_000)).await;
    let json = json_after(addr, now.0).await;
    for w in json["availability"]["windows"].as_array().unwrap() {
        assert_eq!(w["sampled_s"], 0, "{w}");
        assert_eq!(w["unknown_share"], 1.0, "{w}");
        assert_eq!(w["push"]["available_share"], 0.0, "{w}");
        assert!(w["push"]["available_share_of_sampled"].is_null(), "{w}");
        assert!(w["push"]["longest_gap_ms"].is_null(), "{w}");
        assert!(w["ingest"]["longest_gap_ms"].is_null(), "{w}");
        assert!(w["push_max_lag_ms"].is_null(), "{w}");
    }
    let (_, page) = get(&format!("http://{addr}/latency")).await;
    assert_eq!(
        page.matches("nothing measured: unknown").count(),
        4,
        "{page}"
    );
    // Nothing measured: every daily bar grey, no incident.
    let a = &json["availability"];
    assert_eq!(a["days"].as_array().unwrap().len(), 30, "{a}");
    for d in a["days"].as_array().unwrap() {
        assert_eq!(
            (&d["push"]["level"], &d["measured_s"]),
            (&"none".into(), &0.into()),
            "{d}"
        );
    }
    assert_eq!(a["incidents"], serde_json::json!([]), "{a}");
    assert_eq!(page.matches("data-level=\"none\"").count(), 60, "{page}");
    assert!(page.contains("No incidents recorded."), "{page}");
    svc.stop().await.unwrap();
}

/// One sample row as read back.
#[derive(Debug, clickhouse::Row, serde::Deserialize)]
struct Seen {
    t_ms: i64,
    push_lag_ms: i64,
    push_ok: u8,
    ingest_lag_blocks: i64,
    ingest_ok: u8,
    watermark: u64,
    head: u64,
    push_block: u64,
}

/// Wait for a sample taken after `after_ms` that satisfies `pred`.
async fn sample_after(db: &TestDb, after_ms: i64, pred: impl Fn(&Seen) -> bool) -> Seen {
    let found = eventually_every(
        Duration::from_secs(20),
        Duration::from_millis(200),
        || async {
            let rows: Vec<Seen> = db
            .ch
            .query(
                "SELECT t_ms, push_lag_ms, push_ok, ingest_lag_blocks, ingest_ok, watermark, head, \
                 push_block FROM availability_samples WHERE t_ms > ? ORDER BY t_ms",
            )
            .bind(after_ms)
            .fetch_all()
            .await
            .unwrap();
            rows.into_iter().find(|r| pred(r))
        },
    )
    .await;
    found.unwrap_or_else(|| panic!("no sample after {after_ms} as expected"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sampler_reads_postgres_and_writes_what_it_saw() {
    let db = TestDb::new().await;
    let pg = db.connect().await;
    let now = UnixMs::now().0;
    // Watermark 105; push delivered through block 100; block 101 (trades) detected 20 s ago;
    // blocks 102..105 without trades; pmw-live beats now with head 105.
    pg.batch_execute(&format!(
        "INSERT INTO chain_blocks (block_number, block_hash, parent_hash, block_time_ms, t_detect_ms, backfilled, trade_count) \
         SELECT b, '0x' || b, '0x' || (b - 1), 0, {t101}, false, CASE WHEN b = 101 THEN 2 ELSE 0 END \
         FROM generate_series(100, 105) b;
         INSERT INTO ingest_cursor (id, block_number, block_hash, updated_ms) VALUES (1, 105, '0x105', {now});
         INSERT INTO push_epoch (slot, epoch, leader, acquired_ms) VALUES (0, 1, 'push-a', {now});
         INSERT INTO push_cursor (slot, block_number, log_index, epoch, updated_ms) VALUES (0, 100, 0, 1, {now});",
        t101 = now - 20_000,
    ))
    .await
    .unwrap();
    let beat = |head: i64, at: i64| {
        let pg = &pg;
        async move {
            pg.execute(
                "INSERT INTO heartbeats (service, instance, pid, started_ms, beat_ms, state) \
                 VALUES ('pmw-live', 'live-a', 1, $1, $1, jsonb_build_object('state', 'ingesting', 'head', $2::bigint, 'cursor', 105)) \
                 ON CONFLICT (service, instance) DO UPDATE SET beat_ms = $1, state = EXCLUDED.state",
                &[&at, &head],
            )
            .await
            .unwrap();
        }
    };
    beat(105, UnixMs::now().0).await;
    let (svc, _addr) = start(db.cfg.clone(), stats_config(3_600_000)).await;

    // Push owes block 101, which was passed before the sampler ran: its lag counts from the
    // block's detect time, over the bound. Ingest is at the head.
    let s = sample_after(&db, now, |_| true).await;
    assert_eq!(
        (s.watermark, s.push_block, s.head),
        (105, 100, 105),
        "{s:?}"
    );
    assert!(s.push_lag_ms >= 20_000 && s.push_lag_ms < 60_000, "{s:?}");
    assert_eq!(s.push_ok, 0, "{s:?}");
    assert_eq!((s.ingest_lag_blocks, s.ingest_ok), (0, 1), "{s:?}");

    // Push delivers through 105: nothing owed. The head runs 3 blocks ahead: ingest behind.
    pg.execute("UPDATE push_cursor SET block_number = 105", &[])
        .await
        .unwrap();
    let moved = UnixMs::now().0;
    beat(108, moved).await;
    let s = sample_after(&db, moved, |s| s.push_block == 105 && s.head == 108).await;
    assert_eq!((s.push_lag_ms, s.push_ok), (0, 1), "{s:?}");
    assert_eq!((s.ingest_lag_blocks, s.ingest_ok), (3, 0), "{s:?}");

    // pmw-live's heartbeat goes stale: ingest unknown-lag, unavailable.
    let stale = UnixMs::now().0;
    beat(105, stale - 60_000).await;
    let s = sample_after(&db, stale, |s| s.head == 105).await;
    assert_eq!((s.ingest_lag_blocks, s.ingest_ok), (-1, 0), "{s:?}");
    assert!(s.t_ms > stale);
    svc.stop().await.unwrap();
}

/// The facts a sample records for incidents, as read back.
#[derive(Debug, clickhouse::Row, serde::Deserialize)]
struct Facts {
    t_ms: i64,
    webhook_lag_ms: i64,
    webhook_ok: u8,
    pg_ok: u8,
    ch_ok: u8,
    push_epoch: i64,
    live_instance: String,
    providers_demoted: u32,
    newest_start_ms: i64,
    newest_start_service: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sampler_records_the_webhook_lane_and_the_facts_that_name_causes() {
    let db = TestDb::new().await;
    let pg = db.connect().await;
    let now = UnixMs::now().0;
    // Push is through block 105, the webhook lane only through 100 (block 101, with trades,
    // detected 20 s ago); push epoch 7; live-a ingests with one of two providers lagging;
    // pmw-push started last (pmw-stats' own start is left out).
    pg.batch_execute(&format!(
        "INSERT INTO chain_blocks (block_number, block_hash, parent_hash, block_time_ms, t_detect_ms, backfilled, trade_count) \
         SELECT b, '0x' || b, '0x' || (b - 1), 0, {t101}, false, CASE WHEN b = 101 THEN 2 ELSE 0 END \
         FROM generate_series(100, 105) b;
         INSERT INTO ingest_cursor (id, block_number, block_hash, updated_ms) VALUES (1, 105, '0x105', {now});
         INSERT INTO push_epoch (slot, epoch, leader, acquired_ms) VALUES (0, 7, 'push-a', {now});
         INSERT INTO push_cursor (slot, block_number, log_index, epoch, updated_ms) VALUES (0, 105, 0, 7, {now});
         INSERT INTO webhook_cursor (slot, block_number, log_index, epoch, updated_ms) VALUES (0, 100, 0, 7, {now});
         INSERT INTO heartbeats (service, instance, pid, started_ms, beat_ms, state) VALUES
           ('pmw-live', 'live-a', 1, {live_start}, {beat}, jsonb_build_object('state', 'ingesting', 'head', 105,
              'providers', '[{{\"name\": \"a\", \"standing\": \"healthy\"}}, {{\"name\": \"b\", \"standing\": \"lagging\"}}]'::jsonb)),
           ('pmw-push', 'push-a', 2, {push_start}, {now}, '{{}}');",
        t101 = now - 20_000,
        live_start = now - 50_000,
        push_start = now - 40_000,
        beat = now + 600_000,
    ))
    .await
    .unwrap();
    let (svc, _addr) = start(db.cfg.clone(), stats_config(3_600_000)).await;
    let found = eventually_every(Duration::from_secs(20), Duration::from_millis(200), || async {
        let rows: Vec<Facts> = db
            .ch
            .query(
                "SELECT t_ms, webhook_lag_ms, webhook_ok, pg_ok, ch_ok, push_epoch, live_instance, \
                 providers_demoted, newest_start_ms, newest_start_service FROM availability_samples \
                 WHERE t_ms > ? ORDER BY t_ms LIMIT 1",
            )
            .bind(now)
            .fetch_all()
            .await
            .unwrap();
        rows.into_iter().next()
    })
    .await;
    let f = found.expect("a sample");
    assert!(
        f.webhook_lag_ms >= 20_000 && f.webhook_lag_ms < 60_000,
        "{f:?}"
    );
    assert_eq!((f.webhook_ok, f.pg_ok, f.ch_ok), (0, 1, 1), "{f:?}");
    assert_eq!(
        (f.push_epoch, f.live_instance.as_str()),
        (7, "live-a"),
        "{f:?}"
    );
    assert_eq!(f.providers_demoted, 1, "{f:?}");
    assert_eq!(
        (f.newest_start_ms, f.newest_start_service.as_str()),
        (now - 40_000, "pmw-push"),
        "{f:?}"
    );
    assert!(f.t_ms > now);
    svc.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_webhook_is_eventually_delivered_not_first_attempt() {
    let db = TestDb::new().await;
    let now = UnixMs::now();
    // 12 webhooks delivered by their first attempt in 100..200 ms; 3 retried ones (attempts 2
    // and 3) after 5 s and more.
    let mut rows = Vec::new();
    let mut first = Vec::new();
    let mut all = Vec::new();
    for i in 0..15i64 {
        let t = now.0 - 30 * 60_000 + i * 1_000;
        let (attempt, d) = if i % 4 == 3 {
            (2 + (i % 2) as u32, 5_000 + i * 100)
        } else {
            (1, 100 + i * 7)
        };
        let mut r = push(i as u64 + 1, "webhook", t, t + d);
        r.attempt = attempt;
        rows.push(r);
        all.push(d);
        if attempt == 1 {
            first.push(d);
        }
    }
    latency::insert_push(&db.ch, &rows).await.unwrap();
    assert_eq!((first.len(), all.len()), (12, 15));
    let snap = pmw_stats::query::compute(&db.ch, now).await.unwrap();
    let w = snap.window("1h").unwrap();
    let f = &w.stages.detect_push_webhook_first;
    let e = &w.stages.detect_push_webhook;
    assert_eq!((f.count, e.count), (12, 15));
    assert_eq!(f.p50_ms, rank(&first, 0.5));
    assert_eq!(f.p99_ms, rank(&first, 0.99));
    assert!(
        f.p99_ms.unwrap() < 5_000,
        "no retry in the first-attempt figure: {f:?}"
    );
    assert_eq!(e.p50_ms, rank(&all, 0.5));
    assert_eq!(e.p95_ms, rank(&all, 0.95));
    assert!(
        e.p99_ms.unwrap() >= 5_000,
        "retries in the eventual figure: {e:?}"
    );
    // The hourly series splits them the same way.
    let buckets = &snap.series.hourly_24h.buckets;
    let count = |f: fn(&pmw_stats::snapshot::Stages<pmw_stats::snapshot::P50P99>) -> u64| {
        buckets.iter().map(|b| f(&b.stages)).sum::<u64>()
    };
    assert_eq!(count(|s| s.detect_push_webhook.count), 15);
    assert_eq!(count(|s| s.detect_push_webhook_first.count), 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_still_going_on_is_an_open_incident_with_its_cause() {
    use pmw_core::ch::availability::insert_samples;
    use pmw_stats::sampler::{Observation, Sampler};
    let db = TestDb::new().await;
    let now = UnixMs::now();
    // 60 s all well, then 40 s during which Postgres does not answer, up to the last second:
    // push, ingest and the webhook lane all late; the newest sample is fresh.
    let base = now.0 - 100_000;
    let mut sampler = Sampler::new();
    let ok = |t: i64| Observation {
        watermark: Some((100, base - 1_000)),
        push_block: Some(100),
        live: Some((t - 100, Some(100))),
        webhook_block: Some(100),
        ..Observation::default()
    };
    let rows: Vec<_> = (0..100i64)
        .map(|i| {
            let t = base + i * 1_000;
            let o = (i < 60).then(|| ok(t));
            sampler.sample(t, o.as_ref())
        })
        .collect();
    insert_samples(&db.ch, &rows).await.unwrap();
    let snap = pmw_stats::query::compute(&db.ch, now).await.unwrap();
    let incidents = &snap.availability.incidents;
    assert_eq!(incidents.len(), 1, "{incidents:?}");
    let i = &incidents[0];
    assert_eq!(i.start_ms, base + 60_000, "{i:?}");
    assert!(i.open, "{i:?}");
    assert_eq!((i.end.as_deref(), i.end_ms), (None, None), "{i:?}");
    assert!(i.length_ms >= 40_000, "{i:?}");
    assert_eq!(i.late, ["ingest", "push", "webhooks"], "{i:?}");
    let kinds: Vec<&str> = i.causes.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(kinds, ["postgres"], "{i:?}");
    let mut page = String::new();
    pmw_stats::availability::render(&snap.availability, &mut page);
    assert!(page.contains("data-open=\"true\""), "{page}");
    assert!(
        page.contains("<span class=\"inc-state\">ongoing</span>"),
        "{page}"
    );
    assert!(page.contains(" so far; late: <span class=\"inc-late\">ingest behind the head, push behind ingest, webhooks behind</span>; cause: <span class=\"inc-cause\">Postgres not answering</span>"), "{page}");
}

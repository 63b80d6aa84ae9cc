//! Window figures against the real ClickHouse (Asia/Shanghai server), rows written through the
//! production write path: medians of per-row differences, two-sided bounds, distinct windows.

use crate::common::*;
use pmw_core::UnixMs;
use pmw_stats::query;
use pmw_testkit::TestDb;

/// A deterministic scatter of latencies with a heavy tail.
fn delay(i: i64, salt: i64) -> i64 {
    ((i * 37 + salt) % 101) * 13 + (i % 3) * 500 + salt
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p50_is_the_median_of_per_row_differences_of_exactly_the_rows_inside() {
    let db = TestDb::new().await;
    let now = UnixMs::now();
    let (from, to) = (now.0 - HOUR, now.0 + 1);
    let mut ingest_rows = Vec::new();
    let mut push_rows = Vec::new();
    // 101 blocks inside the last hour; early blocks are pushed slowly, late ones fast, so the
    // difference of medians disagrees with the median of differences.
    for i in 0..101i64 {
        let t = now.0 - 40 * 60_000 + i * 1_000;
        let b = i as u64 + 1;
        ingest_rows.push(ingest(b, t, delay(i, 1) % 97 + 1, delay(i, 5)));
        push_rows.push(push(b, "ws", t, t + delay(i, 3) + (100 - i) * 40));
        push_rows.push(push(b, "webhook", t, t + 2 * delay(i, 7) + 900));
        // `final`s of both channels make one stage.
        let channel = if i % 2 == 0 {
            "ws_final"
        } else {
            "webhook_final"
        };
        push_rows.push(push(b, channel, t, t + 3 * delay(i, 11) + 4_000));
    }
    // 50 more in the last 24 h but not the last hour, much slower: they must not leak into 1h.
    for i in 0..50i64 {
        let t = now.0 - 5 * HOUR + i * 1_000;
        let b = 1_000 + i as u64;
        ingest_rows.push(ingest(b, t, 5_000 + i, 9_000 + i));
        push_rows.push(push(b, "ws", t, t + 50_000 + i));
        push_rows.push(push(b, "webhook", t, t + 70_000 + i));
    }
    write(&db, &ingest_rows, &push_rows).await;

    let snap = query::compute(&db.ch, now).await.unwrap();
    let w1h = snap.window("1h").unwrap();
    assert_eq!((w1h.bounds.from_ms, w1h.bounds.to_ms), (from, to));

    // Independent computation over exactly the rows inside [from, to).
    let inside = |t: i64| t >= from && t < to;
    let logs: Vec<i64> = ingest_rows
        .iter()
        .filter(|r| inside(r.t_detect_ms))
        .map(|r| r.t_logs_ms - r.t_detect_ms)
        .collect();
    let stored: Vec<i64> = ingest_rows
        .iter()
        .filter(|r| inside(r.t_detect_ms))
        .map(|r| r.t_stored_ms - r.t_detect_ms)
        .collect();
    let ch_rows = |c: &str| -> Vec<&pmw_core::ch::PushLatencyRow> {
        push_rows
            .iter()
            .filter(|r| r.channel == c && inside(r.t_push_ms))
            .collect()
    };
    let ws: Vec<i64> = ch_rows("ws")
        .iter()
        .map(|r| r.t_push_ms - r.t_detect_ms)
        .collect();
    let webhook: Vec<i64> = ch_rows("webhook")
        .iter()
        .map(|r| r.t_push_ms - r.t_detect_ms)
        .collect();
    let finals: Vec<i64> = ch_rows("ws_final")
        .into_iter()
        .chain(ch_rows("webhook_final"))
        .map(|r| r.t_push_ms - r.t_detect_ms)
        .collect();
    for (name, got, diffs) in [
        ("detect_logs", &w1h.stages.detect_logs, &logs),
        ("detect_stored", &w1h.stages.detect_stored, &stored),
        ("detect_push_ws", &w1h.stages.detect_push_ws, &ws),
        (
            "detect_push_webhook",
            &w1h.stages.detect_push_webhook,
            &webhook,
        ),
        ("detect_final", &w1h.stages.detect_final, &finals),
    ] {
        assert_eq!(got.count, 101, "{name}: exactly the rows inside");
        assert_eq!(got.p50_ms, Some(median(diffs)), "{name} p50");
        assert_eq!(got.p95_ms, rank(diffs, 0.95), "{name} p95");
        assert_eq!(got.p99_ms, rank(diffs, 0.99), "{name} p99");
    }

    // The data set is built so that the difference of medians is a different number.
    let detects: Vec<i64> = ch_rows("ws").iter().map(|r| r.t_detect_ms).collect();
    let pushes: Vec<i64> = ch_rows("ws").iter().map(|r| r.t_push_ms).collect();
    let diff_of_medians = median(&pushes) - median(&detects);
    assert_ne!(
        Some(diff_of_medians),
        w1h.stages.detect_push_ws.p50_ms,
        "the data set must separate the two definitions"
    );
    assert_eq!(w1h.stages.detect_push_ws.p50_ms, Some(median(&ws)));

    // 24 h holds both groups (151 rows, odd: an unambiguous median).
    let w24 = snap.window("24h").unwrap();
    let all_ws: Vec<i64> = push_rows
        .iter()
        .filter(|r| r.channel == "ws")
        .map(|r| r.t_push_ms - r.t_detect_ms)
        .collect();
    assert_eq!(w24.stages.detect_push_ws.count, 151);
    assert_eq!(w24.stages.detect_push_ws.p50_ms, Some(median(&all_ws)));

    // The running service serves the same figures.
    let (svc, addr) = start(db.cfg.clone(), stats_config(60_000)).await;
    let json = json_after(addr, now.0).await;
    let served = &window(&json, "1h")["stages"]["detect_push_ws"];
    assert_eq!(served["p50_ms"].as_i64(), Some(median(&ws)), "{served}");
    assert_eq!(served["count"].as_u64(), Some(101));
    assert_eq!(
        json["headline"]["figures"][0]["p50_ms"].as_i64(),
        Some(median(&ws))
    );
    svc.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_future_and_far_past_rows_appear_in_no_window() {
    let db = TestDb::new().await;
    let now = UnixMs::now();
    let t = now.0 - 10 * 60_000;
    let far_past = [1, -5 * DAY, 946_684_800_000]; // 1970, before 1970, 2000-01-01
    let mut ingest_rows = vec![ingest(1, t, 7, 9)];
    let mut push_rows = vec![push(1, "ws", t, t + 42), push(1, "webhook", t, t + 43)];
    let mut b = 10;
    for bad in [FAR_FUTURE_MS, FAR_FUTURE_MS + DAY - 1]
        .into_iter()
        .chain(far_past)
    {
        b += 1;
        ingest_rows.push(ingest(b, bad, 1_000_000, 2_000_000));
        push_rows.push(push(b, "ws", bad, bad + 3_000_000));
        push_rows.push(push(b, "webhook", bad, bad + 4_000_000));
    }
    write(&db, &ingest_rows, &push_rows).await;

    let snap = query::compute(&db.ch, now).await.unwrap();
    for w in &snap.windows {
        let s = &w.stages;
        assert_eq!(
            (s.detect_logs.count, s.detect_logs.p99_ms),
            (1, Some(7)),
            "{}",
            w.window
        );
        assert_eq!(s.detect_stored.p99_ms, Some(9), "{}", w.window);
        assert_eq!(
            (s.detect_push_ws.count, s.detect_push_ws.p99_ms),
            (1, Some(42)),
            "{}",
            w.window
        );
        assert_eq!(s.detect_push_webhook.p99_ms, Some(43), "{}", w.window);
    }
    for series in [&snap.series.hourly_24h, &snap.series.daily_30d] {
        let n: u64 = series
            .buckets
            .iter()
            .map(|b| b.stages.detect_push_ws.count)
            .sum();
        assert_eq!(n, 1, "{}", series.name);
    }
    assert_eq!(snap.histogram_1h.count, 1);
    let after = &snap.diagnostics.rows_dated_after_now;
    assert_eq!((after.ingest_latency, after.push_latency), (2, 4));
    for lead in &snap.diagnostics.head_lead_ms {
        assert_eq!(lead.count, 1, "{}", lead.window);
    }

    // A push row whose detect time is corrupt but whose push time is now is flagged.
    write(&db, &[], &[push(99, "ws", FAR_FUTURE_MS, t)]).await;
    let snap = query::compute(&db.ch, now).await.unwrap();
    assert_eq!(snap.diagnostics.rows_dated_after_now.push_latency, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_window_shows_its_own_numbers() {
    let db = TestDb::new().await;
    let now = UnixMs::now();
    // Group g lies only in windows g.. and has its own latency; sizes make each window's median
    // fall in its newest group: 1h → 100, 24h → 200, 7d → 300, 30d → 400 (×k per stage).
    let groups = [
        (30 * 60_000, 5, 100),
        (12 * HOUR, 10, 200),
        (3 * DAY, 20, 300),
        (20 * DAY, 40, 400),
    ];
    let mut ingest_rows = Vec::new();
    let mut push_rows = Vec::new();
    let mut b = 0u64;
    for (age, n, lat) in groups {
        for i in 0..n {
            b += 1;
            let t = now.0 - age + i * 1_000;
            ingest_rows.push(ingest(b, t, lat, 2 * lat));
            push_rows.push(push(b, "ws", t, t + 3 * lat));
            push_rows.push(push(b, "webhook", t, t + 4 * lat));
        }
    }
    write(&db, &ingest_rows, &push_rows).await;
    let (svc, addr) = start(db.cfg.clone(), stats_config(60_000)).await;
    let json = json_after(addr, now.0).await;
    let expect = [
        ("1h", 5, 100),
        ("24h", 15, 200),
        ("7d", 35, 300),
        ("30d", 75, 400),
    ];
    for (name, count, lat) in expect {
        let w = window(&json, name);
        for (stage, k) in [
            ("detect_logs", 1),
            ("detect_stored", 2),
            ("detect_push_ws", 3),
            ("detect_push_webhook", 4),
        ] {
            let s = &w["stages"][stage];
            assert_eq!(s["count"].as_u64(), Some(count), "{name} {stage}: {s}");
            assert_eq!(s["p50_ms"].as_i64(), Some(k * lat), "{name} {stage}: {s}");
        }
    }
    let headline: Vec<i64> = json["headline"]["figures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["p50_ms"].as_i64().unwrap())
        .collect();
    assert_eq!(
        headline,
        vec![300, 600, 900, 1200],
        "four different numbers"
    );

    let (status, html) = get(&format!("http://{addr}/latency")).await;
    assert_eq!(status, 200);
    for (name, v) in [("1h", 300), ("24h", 600), ("7d", 900), ("30d", 1200)] {
        let needle = format!("data-window=\"{name}\" data-p50-ms=\"{v}\">{v} ms<");
        assert!(html.contains(&needle), "page shows {needle}");
    }
    svc.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_windows_say_no_data_never_zero() {
    let db = TestDb::new().await;
    let (svc, addr) = start(db.cfg.clone(), stats_config(300)).await;
    // Nothing at all: every window is empty, every figure null.
    let json = json_after(addr, 0).await;
    for w in json["windows"].as_array().unwrap() {
        assert_eq!(w["coverage"], "none", "{w}");
        for (stage, s) in w["stages"].as_object().unwrap() {
            assert_eq!(s["count"], 0, "{stage}");
            for p in ["p50_ms", "p95_ms", "p99_ms"] {
                assert!(s[p].is_null(), "{stage} {p} must be null: {s}");
            }
        }
    }
    let (_, html) = get(&format!("http://{addr}/latency")).await;
    assert_eq!(
        html.matches(">no data</div>").count(),
        4,
        "four empty cards"
    );
    assert!(!html.contains(">0 ms<"), "an empty window is never 0");
    assert!(
        html.contains("no data in this period"),
        "empty charts say so"
    );

    // Rows ten days old only: 1h, 24h and 7d stay empty, 30d is partial.
    let now = UnixMs::now();
    let t = now.0 - 10 * DAY;
    write(
        &db,
        &[
            ingest(1, t, 5, 8),
            ingest(2, t + 1, 6, 9),
            ingest(3, t + 2, 7, 10),
        ],
        &[
            push(1, "ws", t, t + 20),
            push(2, "ws", t, t + 30),
            push(3, "ws", t, t + 25),
        ],
    )
    .await;
    let json = json_after(addr, now.0).await;
    for name in ["1h", "24h", "7d"] {
        let w = window(&json, name);
        assert_eq!(w["stages"]["detect_push_ws"]["count"], 0, "{name}");
        assert!(w["stages"]["detect_push_ws"]["p50_ms"].is_null(), "{name}");
        assert!(w["stages"]["detect_logs"]["p99_ms"].is_null(), "{name}");
    }
    let figures = json["headline"]["figures"].as_array().unwrap();
    assert!(figures[..3].iter().all(|f| f["p50_ms"].is_null()));
    assert_eq!(figures[3]["p50_ms"], 25);
    let w30 = window(&json, "30d");
    assert_eq!(w30["coverage"], "partial");
    assert_eq!(w30["data_since"], pmw_core::UnixMs(t).to_rfc3339());
    let lead = &json["diagnostics"]["head_lead_ms"];
    assert!(lead[0]["p50_ms"].is_null() && lead[0]["min_ms"].is_null());
    assert_eq!(lead[3]["count"], 3);

    let (_, html) = get(&format!("http://{addr}/latency")).await;
    assert_eq!(
        html.matches(">no data</div>").count(),
        3,
        "1h, 24h, 7d empty"
    );
    assert!(html.contains("data-window=\"30d\" data-p50-ms=\"25\">25 ms<"));
    assert!(html.contains("partial window: data since"));
    assert!(!html.contains(">0 ms<"));
    assert!(
        html.contains("<td class=\"nodata\">no data</td>"),
        "the table says no data"
    );
    svc.stop().await.unwrap();
}

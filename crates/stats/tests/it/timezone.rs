//! The seed's −574 s incident, checked on the real server running in Asia/Shanghai: values written
//! through the production write path read back exactly, and window and bucket bounds computed in
//! UTC milliseconds select exactly the intended rows (including at UTC and Shanghai midnights).

use std::collections::BTreeSet;

use crate::common::*;
use pmw_core::ch::{latency, PushLatencyRow, Window};
use pmw_core::UnixMs;
use pmw_stats::model::{windows, SeriesSpec};
use pmw_stats::{query, Snapshot};
use pmw_testkit::TestDb;

/// Check every window and bucket of `snap` against an independent selection by UTC ms.
fn check(snap: &Snapshot, now: UnixMs, instants: &[i64], diff: impl Fn(usize) -> i64) {
    let expect = |from: i64, to: i64| -> Vec<i64> {
        instants
            .iter()
            .enumerate()
            .filter(|(_, t)| **t >= from && **t < to)
            .map(|(i, _)| diff(i))
            .collect()
    };
    for (w, nw) in snap.windows.iter().zip(windows(now)) {
        let (from, to) = (nw.window.from_ms, nw.window.to_ms);
        assert_eq!((w.bounds.from_ms, w.bounds.to_ms), (from, to));
        assert_eq!(w.bounds.from, UnixMs(from).to_rfc3339());
        assert!(w.bounds.from.ends_with('Z') && w.bounds.to.ends_with('Z'));
        let d = expect(from, to);
        let s = &w.stages.detect_push_ws;
        assert_eq!(s.count as usize, d.len(), "{} at {}", w.window, now.0);
        assert_eq!(s.p50_ms, rank(&d, 0.5), "{}", w.window);
        assert_eq!(s.p99_ms, rank(&d, 0.99), "{}", w.window);
        let s = &w.stages.detect_logs;
        assert_eq!(s.count as usize, d.len(), "{} ingest", w.window);
    }
    for (series, spec) in [
        (&snap.series.hourly_24h, SeriesSpec::hourly_24h(now)),
        (&snap.series.daily_30d, SeriesSpec::daily_30d(now)),
    ] {
        assert_eq!(series.buckets.len() as i64, spec.count);
        for (i, b) in series.buckets.iter().enumerate() {
            let Window { from_ms, to_ms } = spec.bucket(i as i64);
            assert_eq!((b.bounds.from_ms, b.bounds.to_ms), (from_ms, to_ms));
            let d = expect(from_ms, to_ms);
            let s = &b.stages.detect_push_ws;
            assert_eq!(s.count as usize, d.len(), "{} bucket {i}", series.name);
            assert_eq!(s.p50_ms, rank(&d, 0.5), "{} bucket {i}", series.name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shanghai_server_reads_back_exact_ms_and_utc_bounds_select_exact_rows() {
    let db = TestDb::new().await;
    let tz: String = db.ch.query("SELECT timezone()").fetch_one().await.unwrap();
    assert_eq!(
        tz, "Asia/Shanghai",
        "this test only means something on a server that is not in UTC"
    );

    let now2 = UnixMs::now();
    let now1 = UnixMs(now2.0 - 10 * DAY + 12_345);
    let hour = now2.0.div_euclid(HOUR) * HOUR;
    let midnight = now2.0.div_euclid(DAY) * DAY;
    let shanghai_midnight = midnight - 8 * HOUR;
    let mut instants = Vec::new();
    for now in [now1, now2] {
        for nw in windows(now) {
            let (f, t) = (nw.window.from_ms, nw.window.to_ms);
            instants.extend([f - 1, f, t - 1, t]);
        }
    }
    for edge in [
        hour,
        hour - HOUR,
        midnight,
        midnight - DAY,
        shanghai_midnight,
    ] {
        instants.extend([edge - 1, edge, edge + 1]);
    }
    instants.sort_unstable();
    instants.dedup();
    instants.retain(|t| *t <= now2.0 + 1);
    let diff = |i: usize| 1_000 + i as i64;
    let ingest_rows: Vec<_> = instants
        .iter()
        .enumerate()
        .map(|(i, t)| ingest(i as u64 + 1, *t, diff(i), diff(i) + 7))
        .collect();
    let push_rows: Vec<_> = instants
        .iter()
        .enumerate()
        .map(|(i, t)| push(i as u64 + 1, "ws", t - diff(i), *t))
        .collect();
    write(&db, &ingest_rows, &push_rows).await;

    // Read back exactly what was written, through the production read path and a plain SELECT.
    let all = Window {
        from_ms: i64::MIN / 2,
        to_ms: i64::MAX / 2,
    };
    let back = latency::ingest_in_window(&db.ch, all).await.unwrap();
    assert_eq!(back, ingest_rows, "ingest rows read back exactly");
    let back: Vec<PushLatencyRow> = db
        .ch
        .query(
            "SELECT block_number, log_index, channel, target_id, t_detect_ms, t_push_ms, epoch, \
             backfilled, attempt, pending_id FROM push_latency ORDER BY block_number",
        )
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(back, push_rows, "push rows read back exactly");

    // Partitions are UTC day numbers: the UTC midnight splits, the Shanghai one does not.
    let parts: BTreeSet<i64> = db
        .ch
        .query(
            "SELECT DISTINCT partition FROM system.parts \
             WHERE database = currentDatabase() AND table = 'push_latency' AND active",
        )
        .fetch_all::<String>()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.parse().unwrap())
        .collect();
    let days: BTreeSet<i64> = instants.iter().map(|t| t.div_euclid(DAY)).collect();
    assert_eq!(parts, days);

    // Figures as of both instants, checked against an independent selection.
    for now in [now1, now2] {
        let snap = query::compute(&db.ch, now).await.unwrap();
        assert_eq!(snap.generated_at, now.to_rfc3339());
        check(&snap, now, &instants, diff);
    }
    // The daily bucket that starts at UTC midnight has exactly the rows from midnight on.
    let snap = query::compute(&db.ch, now2).await.unwrap();
    let today = snap.series.daily_30d.buckets.last().unwrap();
    assert_eq!(today.bounds.from_ms, midnight);
    assert!(
        today.bounds.from.ends_with("T00:00:00.000Z"),
        "{}",
        today.bounds.from
    );
    let n = instants
        .iter()
        .filter(|t| **t >= midnight && **t <= now2.0)
        .count();
    assert_eq!(today.stages.detect_push_ws.count as usize, n);
}

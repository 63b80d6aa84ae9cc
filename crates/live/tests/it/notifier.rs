//! The BlockNotifier under a burst, against real Postgres LISTEN: coalesced, one NOTIFY in
//! flight at a time, the highest block always delivered last.

use std::sync::atomic::Ordering;
use std::time::Duration;

use pmw_core::pg;
use pmw_live::notifier::{BlockNotifier, CHANNEL};
use pmw_testkit::{eventually_every, TestDb};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_is_coalesced_in_order_and_ends_with_the_highest_block() {
    let db = TestDb::new().await;
    let mut listener = pg::dedicated(&db.cfg, "test-listener").await.unwrap();
    listener
        .client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .await
        .unwrap();

    let stop = CancellationToken::new();
    let notifier = BlockNotifier::spawn(db.pg.clone(), stop.clone());
    const LAST: u64 = 3_000;
    for block in 1..=LAST {
        notifier.notify(block);
        if block % 50 == 0 {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }
    // A lower block after the highest (a reorg) must not make the last payload lower.
    notifier.notify(LAST - 10);

    let mut got = Vec::new();
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), listener.notifications.recv())
            .await
            .expect("the highest block is notified")
            .unwrap();
        got.push(n.payload().parse::<u64>().unwrap());
        if *got.last().unwrap() == LAST {
            // Anything still pending (the post-reorg wake-up) carries LAST again.
            while let Ok(Some(n)) =
                tokio::time::timeout(Duration::from_millis(500), listener.notifications.recv())
                    .await
            {
                got.push(n.payload().parse::<u64>().unwrap());
            }
            break;
        }
    }
    println!(
        "burst of {LAST} notify() calls produced {} NOTIFYs",
        got.len()
    );
    assert!(
        got.windows(2).all(|w| w[0] <= w[1]),
        "payloads never go backwards: {got:?}"
    );
    assert_eq!(*got.last().unwrap(), LAST);
    assert!(
        (got.len() as u64) < LAST,
        "a burst must be coalesced, got {} NOTIFYs",
        got.len()
    );
    assert_eq!(
        notifier.stats.max_in_flight.load(Ordering::SeqCst),
        1,
        "never more than one NOTIFY in flight"
    );
    assert_eq!(notifier.stats.failed.load(Ordering::SeqCst), 0);
    stop.cancel();
}

/// A block seen live wakes push in its own commit: one NOTIFY per live block, each arriving only
/// once that block's watermark and `chain_blocks` row are committed (a reader woken by it always
/// finds the block). Every ingested block's `ingest_latency` row is written afterwards by the
/// latency writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_block_wakes_push_in_its_commit_and_its_latency_row_follows() {
    let h = crate::common::Harness::new().await;
    let mut listener = pg::dedicated(&h.db.cfg, "test-listener").await.unwrap();
    listener
        .client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .await
        .unwrap();
    let reader = h.db.connect().await;
    let live = h.start_live(h.core(), h.live_config().await);
    let run = h.sim.spawn(
        pmw_sim::RunConfig {
            matches_per_block: 1,
            interval: Duration::from_millis(300),
            count: Some(12),
            duration: None,
        },
        CancellationToken::new(),
    );
    // On every wake-up, the block it names is already committed.
    let mut woken = Vec::new();
    let mut early = Vec::new();
    let collect = async {
        while let Some(n) = listener.notifications.recv().await {
            let block: i64 = n.payload().parse().unwrap();
            let row = reader
                .query_one(
                    "SELECT (SELECT block_number FROM ingest_cursor WHERE id = 1), \
                            (SELECT count(*) FROM chain_blocks WHERE block_number = $1)",
                    &[&block],
                )
                .await
                .unwrap();
            if row.get::<_, Option<i64>>(0).unwrap_or(0) < block || row.get::<_, i64>(1) != 1 {
                early.push(block);
            }
            woken.push(block);
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(8), collect).await;
    run.await.unwrap().unwrap();
    h.wait_caught_up(Duration::from_secs(60)).await;
    let live_blocks: Vec<i64> = reader
        .query(
            "SELECT block_number FROM chain_blocks WHERE NOT backfilled AND block_number <= $1 \
             ORDER BY block_number",
            &[&woken.iter().copied().max().unwrap_or(0)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    println!(
        "{} wake-ups for {} live blocks; {} before their commit",
        woken.len(),
        live_blocks.len(),
        early.len()
    );
    assert!(
        live_blocks.len() >= 8,
        "live blocks ingested: {live_blocks:?}"
    );
    assert!(early.is_empty(), "woken before the commit: {early:?}");
    for b in &live_blocks {
        assert!(woken.contains(b), "live block {b} woke no one: {woken:?}");
    }

    // Every ingested block gets its latency row (written off the ingest path, shortly after).
    let (top, _) = h.cursor().await.unwrap();
    let first = *live_blocks.first().unwrap() as u64;
    let polled = eventually_every(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            let rows = pmw_core::ch::latency::ingest_in_window(
                &h.db.ch,
                pmw_core::ch::Window {
                    from_ms: 0,
                    to_ms: i64::MAX,
                },
            )
            .await
            .unwrap();
            let have: std::collections::BTreeSet<u64> =
                rows.iter().map(|r| r.block_number).collect();
            let missing: Vec<u64> = (first..=top).filter(|b| !have.contains(b)).collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(missing)
            }
        },
    )
    .await;
    if let Err(missing) = polled {
        panic!("ingest_latency rows missing for blocks {missing:?}");
    }
    live.stop().await.unwrap();
}

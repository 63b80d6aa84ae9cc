//! The BlockNotifier under a burst, against real Postgres LISTEN: coalesced, one NOTIFY in
//! flight at a time, the highest block always delivered last.

use std::sync::atomic::Ordering;
use std::time::Duration;

use pmw_core::pg;
use pmw_live::notifier::{BlockNotifier, CHANNEL};
use pmw_testkit::TestDb;
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

//! Epoch fencing: enqueue, claims and result updates land only while the epoch is current; a
//! dispatcher whose epoch was bumped lands no writes, stops, and a successor re-sends its
//! leftover claims (at least once).

use std::time::Duration;

use crate::webhook_support::{config, eventually, Env, Receiver, Step};
use pmw_push::webhook::sign::Secret;
use pmw_push::webhook::WebhookError;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_enqueue_is_fenced_and_idempotent() {
    let env = Env::new().await;
    let ep = env
        .endpoint("http://127.0.0.1:9/hook", &Secret::generate().expose())
        .await;
    env.enqueue(1, ep, &[1, 2]).await.unwrap();
    // Same ids again: nothing inserted (ON CONFLICT DO NOTHING).
    let again = {
        let items = vec![pmw_push::webhook::NewDelivery {
            id: pmw_push::webhook::webhook_id(
                pmw_core::Cursor::new(1, 3).unwrap(),
                "0xabcdef0123456789",
                ep,
                pmw_push::webhook::DeliveryKind::Trade,
            ),
            endpoint_id: ep,
            kind: pmw_push::webhook::DeliveryKind::Trade,
            cursor: pmw_core::Cursor::new(1, 3).unwrap(),
            payload: "{}".into(),
            t_detect_ms: 0,
        }];
        let mut c = env.db.connect().await;
        let tx = c.transaction().await.unwrap();
        let n = pmw_push::webhook::enqueue(&tx, 1, &items).await.unwrap();
        tx.commit().await.unwrap();
        n
    };
    assert_eq!(again, 0);
    // A stale epoch: refused, nothing inserted.
    let e = env.enqueue(7, ep, &[3]).await.unwrap_err();
    assert_eq!(e, WebhookError::Fenced { slot: 0, epoch: 7 });
    let n: i64 = env
        .db
        .connect()
        .await
        .query_one("SELECT count(*) FROM webhook_deliveries", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_bumped_epoch_lands_no_writes_and_successor_resends() {
    let env = Env::new().await;
    let rx = Receiver::gated(vec![Step::status(200)]).await;
    let ep = env.endpoint(&rx.url(), &Secret::generate().expose()).await;
    let first = env.enqueue(1, ep, &[10]).await.unwrap();
    let mut old = env.dispatcher(1, config());
    old.wake();
    rx.release(1);
    assert!(
        eventually(Duration::from_secs(15), || async {
            env.delivery(&first[0]).await.state == "delivered"
        })
        .await
    );

    // A second delivery is in flight (held by the receiver) when a new leader bumps the epoch.
    let held = env.enqueue(1, ep, &[11]).await.unwrap();
    old.wake();
    assert!(eventually(Duration::from_secs(15), || async { rx.count() == 2 }).await);
    let before = env.delivery(&held[0]).await;
    assert_eq!(before.claimed_epoch, Some(1));
    let epoch = env.bump_epoch().await;
    rx.release(1);
    let r = tokio::time::timeout(Duration::from_secs(15), old.wait())
        .await
        .expect("the old dispatcher stops");
    assert_eq!(r, Err(WebhookError::Fenced { slot: 0, epoch: 1 }));
    assert!(old.snapshot().fenced);
    // Its result update did not land: the row is exactly as claimed.
    assert_eq!(env.delivery(&held[0]).await, before);
    assert_eq!((before.state.as_str(), before.attempts), ("pending", 0));
    // Nor can it enqueue any more.
    assert!(matches!(
        env.enqueue(1, ep, &[12]).await,
        Err(WebhookError::Fenced { .. })
    ));
    let third = env.enqueue(epoch, ep, &[12]).await.unwrap();
    old.wake();
    // Negative check: the fenced dispatcher sends nothing within the window.
    pmw_testkit::observe_for(Duration::from_millis(600)).await;
    assert_eq!(
        rx.count(),
        2,
        "a fenced dispatcher delivers nothing further"
    );
    let lat = env
        .ch_count("SELECT count() FROM push_latency WHERE epoch = ?", 1)
        .await;
    assert_eq!(lat, 1, "no latency row for the unrecorded delivery");

    // The successor re-claims the leftover (claimed under epoch 1) and delivers both.
    rx.release(10);
    let new = env.dispatcher(epoch, config());
    new.wake();
    for id in [&held[0], &third[0]] {
        assert!(
            eventually(Duration::from_secs(15), || async {
                env.delivery(id).await.state == "delivered"
            })
            .await
        );
        assert_eq!(env.delivery(id).await.claimed_epoch, Some(epoch));
    }
    let ids: Vec<String> = rx.hits().into_iter().map(|h| h.id).collect();
    assert_eq!(
        ids.iter().filter(|i| **i == held[0]).count(),
        2,
        "at least once: re-sent: {ids:?}"
    );
    assert_eq!(ids.iter().filter(|i| **i == third[0]).count(), 1, "{ids:?}");
    new.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_idle_dispatcher_stops_when_epoch_bumped() {
    let env = Env::new().await;
    let mut d = env.dispatcher(1, config());
    // Negative check: an idle dispatcher does not end by itself within the window.
    pmw_testkit::observe_for(Duration::from_millis(300)).await;
    assert!(!d.is_finished());
    env.bump_epoch().await;
    let r = tokio::time::timeout(Duration::from_secs(10), d.wait())
        .await
        .expect("stops by itself");
    assert_eq!(r, Err(WebhookError::Fenced { slot: 0, epoch: 1 }));
    // Asking again gives the same answer.
    assert_eq!(
        d.wait().await,
        Err(WebhookError::Fenced { slot: 0, epoch: 1 })
    );
    assert!(d.snapshot().stopped);
}

/// Bodies are passed to the enqueue once per run of equal neighbours: every stored delivery
/// still carries exactly its own item's body, whatever the order of endpoints and messages
/// (read back from Postgres, and each sent as queued).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_enqueue_stores_each_delivery_its_own_body() {
    use pmw_push::webhook::{webhook_id, DeliveryKind, NewDelivery};
    let env = Env::new().await;
    let rx = Receiver::start(vec![Step::status(204)]).await;
    let mut eps = Vec::new();
    for _ in 0..3 {
        eps.push(env.endpoint(&rx.url(), &Secret::generate().expose()).await);
    }
    // Runs of one body, a body coming back after another, and a body per single item.
    let plan: [(u32, usize); 9] = [
        (1, 0),
        (1, 1),
        (1, 2),
        (2, 0),
        (3, 0),
        (2, 1),
        (3, 1),
        (2, 2),
        (4, 2),
    ];
    let items: Vec<NewDelivery> = plan
        .iter()
        .map(|&(log, e)| {
            let cursor = pmw_core::Cursor::new(50, log).unwrap();
            NewDelivery {
                id: webhook_id(cursor, "0xabcdef0123456789", eps[e], DeliveryKind::Trade),
                endpoint_id: eps[e],
                kind: DeliveryKind::Trade,
                cursor,
                payload: format!(
                    r#"{{"log_index":{log},"pad":"{}"}}"#,
                    "x".repeat(log as usize * 100)
                ),
                t_detect_ms: 0,
            }
        })
        .collect();
    let mut c = env.db.connect().await;
    let tx = c.transaction().await.unwrap();
    let n = pmw_push::webhook::enqueue(&tx, 1, &items).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(n, items.len() as u64);
    for d in &items {
        let stored: String = c
            .query_one(
                "SELECT payload FROM webhook_deliveries WHERE id = $1",
                &[&d.id],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(stored, d.payload, "the body stored for {}", d.id);
    }
    let d = env.dispatcher(1, config());
    d.wake();
    assert!(
        eventually(Duration::from_secs(30), || async {
            rx.count() == items.len()
        })
        .await,
        "every delivery sent"
    );
    let hits = rx.hits();
    for d in &items {
        let got = hits
            .iter()
            .find(|h| h.id == d.id)
            .unwrap_or_else(|| panic!("{} not received", d.id))
            .json();
        let want: serde_json::Value = serde_json::from_str(&d.payload).unwrap();
        assert_eq!(got["log_index"], want["log_index"]);
        assert_eq!(got["pad"], want["pad"]);
    }
    // Recorded delivered (in batches), without their bodies.
    assert!(
        eventually(Duration::from_secs(15), || async {
            let mut all = true;
            for d in &items {
                all &= env.delivery(&d.id).await.state == "delivered";
            }
            all
        })
        .await,
        "every delivery recorded"
    );
    for d in &items {
        let row = env.delivery(&d.id).await;
        assert!(!row.body_kept, "{} keeps no body: {row:?}", d.id);
    }
}

//! The pending tier to webhooks (#43): a `trade` naming a pending fill is not sent to an
//! endpoint while that fill's `pending` attempt to it is still in flight (the endpoint's queue
//! holds it), so the receiver never gets the trade first.

use std::time::Duration;

use crate::webhook_support::{config, eventually, Env, Receiver, Step};
use pmw_core::Cursor;
use pmw_push::webhook::sign::Secret;
use pmw_push::webhook::{self, DeliveryKind, NewDelivery};

/// An open pending fill (the mempool watcher's tables, migration 0023); its id.
async fn open_fill(c: &tokio_postgres::Client) -> i64 {
    c.execute(
        "INSERT INTO pending_txs (tx_hash, sender, nonce, target, first_seen_ms, seen_by, \
         seen_block) VALUES ('0xt1', '0xs', 7, '0xe', 1000, '{}', 1)",
        &[],
    )
    .await
    .unwrap();
    c.query_one(
        "INSERT INTO pending_fills (tx_hash, fill_index, order_hash, maker, taker, token_id, \
         side, making, taking, exchange) VALUES ('0xt1', 0, '0xo1', '0xm', '0xk', '9', 0, \
         '1', '2', '0xe') RETURNING id",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trade_waits_while_its_pendings_attempt_is_in_flight() {
    let env = Env::new().await;
    // Every request is held until released: the pending's attempt stays in flight.
    let rx = Receiver::gated(vec![Step::status(204), Step::status(204)]).await;
    let ep = env.endpoint(&rx.url(), &Secret::generate().expose()).await;
    let c = env.db.connect().await;
    let fill = open_fill(&c).await;
    let pending_id = format!("msg_pending-{fill}_{ep}_pending");
    let body = format!(r#"{{"type":"pending","pending_id":{fill},"t_seen_ms":1000}}"#);
    let queued = c
        .query_one(
            include_str!("../../src/webhook/sql/enqueue_pending.sql"),
            &[
                &0i16,
                &1i64,
                &pmw_core::UnixMs::now().0,
                &vec![pending_id.as_str()],
                &vec![ep],
                &vec!["pending"],
                &vec![body.as_str()],
                &vec![1000i64],
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        (queued.get::<_, bool>(0), queued.get::<_, i64>(1)),
        (true, 1)
    );
    let d = env.dispatcher(1, config());
    d.wake();
    assert!(eventually(Duration::from_secs(10), || async { rx.count() == 1 }).await);

    // Its block commits meanwhile: the fill is confirmed and its trade, naming it, is queued.
    c.execute(
        "UPDATE pending_fills SET status = 'confirmed' WHERE id = $1",
        &[&fill],
    )
    .await
    .unwrap();
    let cursor = Cursor::new(50, 1).unwrap();
    let trade = NewDelivery {
        id: webhook::webhook_id(cursor, "0xabcdef0123456789", ep, DeliveryKind::Trade),
        endpoint_id: ep,
        kind: DeliveryKind::Trade,
        cursor,
        payload: format!(
            r#"{{"type":"trade","cursor":"{cursor}","t_detect_ms":2000,"pending_id":{fill}}}"#
        ),
        t_detect_ms: 2000,
    };
    let trade_id = trade.id.clone();
    // Queued as the webhook lane queues it (claimed by the epoch) and handed to the running
    // queue in memory, as a round does.
    let items = vec![trade];
    let mut cc = env.db.connect().await;
    let tx = cc.transaction().await.unwrap();
    let fence = pmw_push::fence::Fence { slot: 0, epoch: 1 };
    let q = webhook::enqueue_in_slot(&tx, fence, true, &items)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(q.handed.len(), 1);
    d.handoff().send(&items, q.handed);
    // Scans go by (every 200 ms) while the pending is held: the trade stays put.
    pmw_testkit::observe_for(Duration::from_secs(2)).await;
    assert_eq!(
        rx.count(),
        1,
        "the trade went out while its pending was in flight"
    );
    assert_eq!(env.delivery(&trade_id).await.attempts, 0);

    // The pending's attempt ends: then the trade goes.
    rx.release(1);
    assert!(eventually(Duration::from_secs(10), || async { rx.count() == 2 }).await);
    rx.release(1);
    let hits = rx.hits();
    assert_eq!(
        (hits[0].id.as_str(), hits[1].id.as_str()),
        (pending_id.as_str(), trade_id.as_str())
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            env.delivery(&trade_id).await.state == "delivered"
        })
        .await
    );
    d.stop().await.unwrap();
}

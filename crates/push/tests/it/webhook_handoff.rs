//! The webhook lane's hand-off: trade deliveries queued claimed by the epoch reach the
//! dispatcher in memory (no claim statement can take them while fresh), each sent once and
//! recorded; retracts stay unclaimed for the claim path; claimed deliveries a leader never got
//! to send are sent by its successor's epoch.

use std::sync::Arc;
use std::time::Duration;

use crate::webhook_support::{config, eventually, Env, Receiver, Step};
use pmw_core::Cursor;
use pmw_push::webhook::sign::{Secret, Signing};
use pmw_push::webhook::{self, DeliveryKind, NewDelivery};

fn items(endpoint: i64, blocks: &[u64], kind: DeliveryKind) -> Vec<NewDelivery> {
    blocks
        .iter()
        .map(|b| {
            let cursor = Cursor::new(*b, 1).unwrap();
            let body = format!(r#"{{"block":{b},"audit":false}}"#);
            NewDelivery {
                id: webhook::webhook_id(cursor, "0x0123456789abcdef", endpoint, kind),
                endpoint_id: endpoint,
                kind,
                cursor,
                payload: pmw_core::message::stamp(kind, &body, 1),
                t_detect_ms: 1_000,
            }
        })
        .collect()
}

/// Queue `items` the way the webhook lane does (slot 0, `epoch`, claiming).
async fn queue_claimed(env: &Env, epoch: i64, items: &[NewDelivery]) -> webhook::Enqueued {
    let mut c = env.db.connect().await;
    let tx = c.transaction().await.unwrap();
    let q = webhook::enqueue_in_slot(&tx, pmw_push::fence::Fence { slot: 0, epoch }, true, items)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    q
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_handed_trades_are_sent_once_without_a_claim_and_retracts_wait_for_the_scan() {
    let env = Env::new().await;
    let rx = Receiver::start(vec![Step::status(204)]).await;
    let secret = Secret::generate().expose();
    let ep = env.endpoint(&rx.url(), &secret).await;

    let trades = items(ep, &[5, 6, 7], DeliveryKind::Trade);
    let q = queue_claimed(&env, 1, &trades).await;
    assert_eq!(q.inserted, 3);
    let mut handed: Vec<&str> = q
        .handed
        .iter()
        .map(|h| trades[h.item].id.as_str())
        .collect();
    handed.sort();
    let mut want: Vec<&str> = trades.iter().map(|t| t.id.as_str()).collect();
    want.sort();
    assert_eq!(handed, want, "every new trade delivery is handed over");
    let signing = Signing::parse(ep, &secret, None, None);
    assert!(q.handed.iter().all(|h| h.endpoint.url == rx.url()
        && h.endpoint.signing == signing
        && h.endpoint.account_id == env.account
        && h.endpoint.id == ep));
    // One endpoint target per endpoint, shared by its deliveries.
    assert!(q
        .handed
        .iter()
        .all(|h| Arc::ptr_eq(&h.endpoint, &q.handed[0].endpoint)));
    for t in &trades {
        assert_eq!(env.delivery(&t.id).await.claimed_epoch, Some(1));
    }

    // A dispatcher whose scans cannot take them (claimed by its own epoch, fresh): only the
    // hand-off can deliver them.
    let mut cfg = config();
    cfg.poll_interval = Duration::from_secs(3600);
    let d = env.dispatcher(1, cfg);
    d.handoff().send(&trades, q.handed);
    assert!(
        eventually(Duration::from_secs(15), || async {
            let mut n = 0;
            for t in &trades {
                n += usize::from(env.delivery(&t.id).await.state == "delivered");
            }
            n == 3
        })
        .await,
        "handed deliveries delivered"
    );
    let mut ids: Vec<String> = rx.hits().into_iter().map(|h| h.id).collect();
    ids.sort();
    assert_eq!(ids, want, "each handed delivery sent exactly once");
    for h in rx.hits() {
        let body = h.json();
        assert!(
            body["t_push_ms"].as_i64().unwrap() > 1,
            "stamped at the attempt: {body}"
        );
        assert_eq!(body["type"], "trade");
    }

    // A retract is queued unclaimed (it waits for its trade) and the scan sends it.
    let retract = items(ep, &[7], DeliveryKind::Retract);
    let q = queue_claimed(&env, 1, &retract).await;
    assert_eq!((q.inserted, q.handed.len()), (1, 0));
    assert_eq!(env.delivery(&retract[0].id).await.claimed_epoch, None);
    d.wake();
    assert!(
        eventually(Duration::from_secs(15), || async {
            env.delivery(&retract[0].id).await.state == "delivered"
        })
        .await,
        "the retract goes through the scan"
    );
    assert_eq!(rx.count(), 4);
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_claimed_deliveries_never_handed_over_are_sent_by_the_successor() {
    let env = Env::new().await;
    let rx = Receiver::start(vec![Step::status(200)]).await;
    let ep = env.endpoint(&rx.url(), &Secret::generate().expose()).await;
    // Epoch 1 queued them claimed and died before its dispatcher got them.
    let trades = items(ep, &[20, 21], DeliveryKind::Trade);
    assert_eq!(queue_claimed(&env, 1, &trades).await.handed.len(), 2);
    let epoch = env.bump_epoch().await;
    let d = env.dispatcher(epoch, config());
    d.wake();
    assert!(
        eventually(Duration::from_secs(15), || async {
            env.delivery(&trades[0].id).await.state == "delivered"
                && env.delivery(&trades[1].id).await.state == "delivered"
        })
        .await,
        "the successor's scan claims and sends them"
    );
    assert_eq!(rx.count(), 2);
    d.stop().await.unwrap();
}

/// Log every claim statement this database runs, as Postgres sees it: a statement trigger on
/// the table the claim updates (it fires even when the claim takes no row) that records the
/// statement's text when it is the claim. `pg_stat_statements` was the first oracle, but every
/// test database shares it and it evicts its least-used entries (5,000 at most): under the whole
/// suite it once counted a claim that local runs never saw.
async fn log_claims(c: &tokio_postgres::Client) {
    c.batch_execute(
        "CREATE TABLE claim_log (n bigserial PRIMARY KEY);
         CREATE FUNCTION log_claim() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF current_query() LIKE '%Claim due deliveries in ledger order%' THEN
             INSERT INTO claim_log DEFAULT VALUES;
           END IF;
           RETURN NULL;
         END $$;
         CREATE TRIGGER log_claim AFTER UPDATE ON webhook_deliveries
           FOR EACH STATEMENT EXECUTE FUNCTION log_claim();",
    )
    .await
    .unwrap();
}

/// Claim statements logged so far (see [`log_claims`]).
async fn claims_run(c: &tokio_postgres::Client) -> i64 {
    c.query_one("SELECT count(*) FROM claim_log", &[])
        .await
        .unwrap()
        .get(0)
}

/// A hand-off larger than one claim takes is exactly the new deliveries: the queue that sends
/// it runs no claim statement after it (under load that was one wasted claim per endpoint per
/// block, each walking the endpoint's in-flight rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_a_large_hand_off_runs_no_claim_statement() {
    let env = Env::new().await;
    let c = env.db.connect().await;
    log_claims(&c).await;
    let rx = Receiver::start(vec![Step::status(204)]).await;
    let ep = env.endpoint(&rx.url(), &Secret::generate().expose()).await;
    let blocks: Vec<u64> = (100..140).collect();
    let trades = items(ep, &blocks, DeliveryKind::Trade);
    let q = queue_claimed(&env, 1, &trades).await;
    assert_eq!(q.handed.len(), trades.len());

    let mut cfg = config();
    cfg.poll_interval = Duration::from_secs(3600);
    let d = env.dispatcher(1, cfg);
    // Its scan at start has run (and found nothing it may take).
    assert!(
        eventually(Duration::from_secs(15), || async {
            d.snapshot().last_scan_ms > 0
        })
        .await,
        "the dispatcher's first scan"
    );
    // The start scan's claim is logged (the oracle sees claims).
    let cr = &c;
    assert!(
        eventually(Duration::from_secs(15), || async move {
            claims_run(cr).await >= 1
        })
        .await,
        "the first scan's claim logged"
    );
    let before = claims_run(&c).await;
    d.handoff().send(&trades, q.handed);
    assert!(
        eventually(Duration::from_secs(30), || async {
            rx.count() == trades.len() && d.snapshot().active_endpoints == 0
        })
        .await,
        "every handed delivery sent and the queue ended"
    );
    let mut delivered = 0;
    for t in &trades {
        delivered += usize::from(env.delivery(&t.id).await.state == "delivered");
    }
    assert_eq!(delivered, trades.len());
    assert_eq!(
        claims_run(&c).await - before,
        0,
        "claim statements run for a hand-off"
    );
    d.stop().await.unwrap();
}

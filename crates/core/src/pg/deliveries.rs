//! Webhook deliveries as both writers queue them: push's rounds (fenced by the push epoch) and
//! the API's replays (unfenced, requeueing). One statement, `sql/enqueue_deliveries.sql`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio_postgres::{GenericClient, Row, Transaction};

use crate::message::Kind;
use crate::webhook::Signing;
use crate::{Cursor, UnixMs};

/// One message for one endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDelivery {
    /// The stable `webhook-id` of every attempt ([`crate::webhook::webhook_id`]).
    pub id: String,
    pub endpoint_id: i64,
    pub kind: Kind,
    pub cursor: Cursor,
    /// The JSON body (a `trade` or `retract` message, rendered once). When it is an object,
    /// its top-level `t_push_ms` is set to the send time of each attempt.
    pub payload: String,
    pub t_detect_ms: i64,
}

/// Who queues, and so how the insert is guarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// A push leader's round: lands only while `epoch` is the slot's current one; ids already
    /// queued are left as they are. With `claim`, new trade deliveries are inserted claimed by
    /// `epoch` and returned ([`Enqueued::handed`]) for the leader's dispatcher to attempt.
    Round { slot: i16, epoch: i64, claim: bool },
    /// An operator's or subscriber's replay through the API: unfenced, and deliveries already
    /// delivered or failed are put back to pending.
    Replay,
}

/// What one enqueue did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// Rows now `pending` that were not (new, or requeued by a replay).
    pub inserted: u64,
    /// Deliveries whose endpoint was deleted or disabled meanwhile: skipped, never an error.
    pub skipped: u64,
    /// Trade deliveries cancelled by their retract before any attempt (neither is sent).
    pub cancelled: Vec<Cancelled>,
    /// New trade deliveries inserted claimed by the writer's epoch (`Writer::Round` with
    /// `claim`), in the order of the items (ledger order, as the webhook lane builds them).
    pub handed: Vec<Handed>,
}

/// A trade delivery inserted already claimed, with the endpoint its attempt goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handed {
    /// Its place in the enqueued items (its id, body and cursor are there).
    pub item: usize,
    /// Shared by every delivery of the enqueue to the same endpoint.
    pub endpoint: Arc<EndpointTarget>,
}

/// What an attempt needs of its endpoint, read once per endpoint per enqueue or claim and
/// shared (`Arc`) by every delivery to it: where to post, how to sign, and since when it fails.
/// Its `Debug` shows the URL's host only (the path and query may be a credential).
#[derive(Clone, PartialEq, Eq)]
pub struct EndpointTarget {
    pub id: i64,
    pub account_id: i64,
    pub url: String,
    /// Its secrets, parsed (a `Debug` of it shows no key).
    pub signing: Signing,
    /// When the endpoint's current run of failed attempts began, if any.
    pub failing_since_ms: Option<i64>,
    /// A chat destination (Discord, Slack, Telegram) instead of signed JSON: its sealed secret
    /// opened ([`crate::chat::ChatTarget::from_stored`]).
    pub chat: Option<crate::chat::ChatTarget>,
}

impl std::fmt::Debug for EndpointTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointTarget")
            .field("id", &self.id)
            .field("account_id", &self.account_id)
            .field("url", &crate::redact::Url(&self.url))
            .field("signing", &self.signing)
            .field("failing_since_ms", &self.failing_since_ms)
            .field("chat", &self.chat)
            .finish()
    }
}

/// The trade deliveries of `items` the statement inserted claimed: those of a deliverable
/// endpoint (`endpoints`) the statement did not report as `unclaimed`, each with its endpoint.
fn handed(
    items: &[NewDelivery],
    endpoints: &HashMap<i64, Arc<EndpointTarget>>,
    unclaimed: &HashSet<String>,
) -> Vec<Handed> {
    items
        .iter()
        .enumerate()
        .filter(|(_, d)| d.kind == Kind::Trade && !unclaimed.contains(&d.id))
        .filter_map(|(item, d)| {
            let endpoint = endpoints.get(&d.endpoint_id)?.clone();
            Some(Handed { item, endpoint })
        })
        .collect()
}

/// A trade delivery its retract cancelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancelled {
    pub id: String,
    pub endpoint_id: i64,
    pub cursor: Cursor,
}

#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    /// The push epoch moved on: this leader's writes no longer land.
    #[error("fenced: push epoch {epoch} of slot {slot} is no longer current")]
    Fenced { slot: i16, epoch: i64 },
    #[error("postgres: {}", crate::pg::describe(.0))]
    Db(#[from] tokio_postgres::Error),
}

/// Queue `items` as `pending`, due now, inside the caller's transaction. Endpoints that are gone
/// or disabled by now are skipped (their rows are locked `FOR KEY SHARE` in the same statement,
/// so a concurrent delete is either seen or waits): one account's churn never fails a round.
pub async fn enqueue(
    tx: &Transaction<'_>,
    writer: Writer,
    items: &[NewDelivery],
) -> Result<Enqueued, EnqueueError> {
    if items.is_empty() {
        return Ok(Enqueued::default());
    }
    let (slot, epoch, requeue, claim) = match writer {
        Writer::Round { slot, epoch, claim } => (Some(slot), Some(epoch), false, claim),
        Writer::Replay => (None, None, true, false),
    };
    let now = UnixMs::now().as_i64();
    let c = Columns::of(items);
    // Sent as text, so it is planned with this batch's arrays: prepared, Postgres switches to a
    // generic plan after five runs, which knows no array's length, and at a busy block's 1,500
    // deliveries that plan took 0.4 s on average and up to 12 s (docs/PROFILE.md, session 31).
    let row = tx
        .query_one(
            include_str!("sql/enqueue_deliveries.sql"),
            &[
                &slot,
                &epoch,
                &now,
                &c.ids,
                &c.endpoints,
                &c.kinds,
                &c.blocks,
                &c.logs,
                &c.bodies,
                &c.detects,
                &requeue,
                &claim,
                &c.body_of,
            ],
        )
        .await?;
    if !row.get::<_, bool>(0) {
        let (slot, epoch) = (slot.unwrap_or_default(), epoch.unwrap_or_default());
        return Err(EnqueueError::Fenced { slot, epoch });
    }
    let live = row.get::<_, i64>(2) as u64;
    let handed = if claim {
        let unclaimed: HashSet<String> = row.get::<_, Vec<String>>(7).into_iter().collect();
        handed(items, &endpoints(&row), &unclaimed)
    } else {
        Vec::new()
    };
    Ok(Enqueued {
        inserted: row.get::<_, i64>(1) as u64,
        skipped: items.len() as u64 - live,
        cancelled: cancelled(&row),
        handed,
    })
}

/// The items as the statement's parallel arrays.
struct Columns<'a> {
    ids: Vec<&'a str>,
    endpoints: Vec<i64>,
    kinds: Vec<&'static str>,
    blocks: Vec<i64>,
    logs: Vec<i32>,
    /// The distinct bodies, each once (a round's deliveries of one message to many endpoints
    /// are adjacent and share it).
    bodies: Vec<&'a str>,
    /// Each item's body: its 1-based place in `bodies`.
    body_of: Vec<i32>,
    detects: Vec<i64>,
}

impl<'a> Columns<'a> {
    fn of(items: &'a [NewDelivery]) -> Columns<'a> {
        let (bodies, body_of) = bodies(items);
        Columns {
            ids: items.iter().map(|d| d.id.as_str()).collect(),
            endpoints: items.iter().map(|d| d.endpoint_id).collect(),
            kinds: items.iter().map(|d| d.kind.as_str()).collect(),
            blocks: items.iter().map(|d| d.cursor.block as i64).collect(),
            logs: items.iter().map(|d| d.cursor.log_index as i32).collect(),
            bodies,
            body_of,
            detects: items.iter().map(|d| d.t_detect_ms).collect(),
        }
    }
}

/// The items' bodies, each run of equal adjacent ones passed once: the distinct bodies in order
/// of appearance and each item's 1-based place among them. Only neighbours are compared (a
/// round builds a message's deliveries together), so a body that comes back later is passed
/// again, which costs a copy, never a wrong body.
fn bodies(items: &[NewDelivery]) -> (Vec<&str>, Vec<i32>) {
    let mut bodies: Vec<&str> = Vec::new();
    let mut body_of = Vec::with_capacity(items.len());
    for d in items {
        if bodies.last() != Some(&d.payload.as_str()) {
            bodies.push(&d.payload);
        }
        body_of.push(bodies.len() as i32);
    }
    (bodies, body_of)
}

/// The trade deliveries the statement cancelled (columns 3 to 6: ids, endpoints, blocks, log
/// indexes).
fn cancelled(row: &Row) -> Vec<Cancelled> {
    let ids: Vec<String> = row.get(3);
    let endpoints: Vec<i64> = row.get(4);
    let blocks: Vec<i64> = row.get(5);
    let logs: Vec<i32> = row.get(6);
    ids.into_iter()
        .zip(endpoints)
        .zip(blocks.into_iter().zip(logs))
        .map(|((id, endpoint_id), (b, l))| Cancelled {
            id,
            endpoint_id,
            cursor: Cursor {
                block: b as u64,
                log_index: l as u32,
            },
        })
        .collect()
}

/// The deliverable endpoints the statement described (columns 8 to 14: id, account, url,
/// secret, previous secret, its expiry, start of the run of failures), each built once.
fn endpoints(row: &Row) -> HashMap<i64, Arc<EndpointTarget>> {
    let ids: Vec<i64> = row.get(8);
    let accounts: Vec<i64> = row.get(9);
    let urls: Vec<String> = row.get(10);
    let secrets: Vec<String> = row.get(11);
    let previous: Vec<Option<String>> = row.get(12);
    let expires: Vec<Option<i64>> = row.get(13);
    let failing: Vec<Option<i64>> = row.get(14);
    (ids.into_iter().zip(accounts).zip(urls).zip(secrets))
        .zip(previous.into_iter().zip(expires).zip(failing))
        .map(
            |((((id, account_id), url), secret), ((prev, expires), f))| {
                let e = EndpointTarget {
                    id,
                    account_id,
                    url,
                    signing: Signing::parse(id, &secret, prev.as_deref(), expires),
                    failing_since_ms: f,
                    chat: crate::chat::ChatTarget::from_stored(&secret, id),
                };
                (id, Arc::new(e))
            },
        )
        .collect()
}

/// Expire the pending deliveries of an endpoint that is being disabled (or re-enabled: what is
/// still pending then was queued while it was disabled), inside the caller's transaction, which
/// must hold the endpoint row locked (`FOR NO KEY UPDATE`, as an `UPDATE` of it does). They
/// become `failed` with `last_error` `endpoint disabled: <reason>` and are never sent; a 2xx
/// already in flight still lands as `delivered`. The endpoint's run of failures is forgotten,
/// so a re-enabled endpoint starts afresh. Unfenced: push's dispatcher and the API both call
/// it. Returns how many deliveries expired.
pub async fn expire_pending(
    c: &impl GenericClient,
    endpoint_id: i64,
    reason: &str,
    now: i64,
) -> Result<u64, tokio_postgres::Error> {
    let error = format!("endpoint disabled: {reason}");
    let expired = c
        .execute(
            include_str!("sql/expire_pending.sql"),
            &[&endpoint_id, &error, &now],
        )
        .await?;
    forget_failing(c, endpoint_id).await?;
    Ok(expired)
}

/// End the endpoint's run of failed attempts (`webhook_failing`): after a success, and when it
/// is disabled or re-enabled ([`expire_pending`]).
pub async fn forget_failing(
    c: &impl GenericClient,
    endpoint_id: i64,
) -> Result<(), tokio_postgres::Error> {
    c.execute(include_str!("sql/forget_failing.sql"), &[&endpoint_id])
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, endpoint_id: i64, kind: Kind) -> NewDelivery {
        NewDelivery {
            id: id.into(),
            endpoint_id,
            kind,
            cursor: Cursor {
                block: 1,
                log_index: 0,
            },
            payload: "{}".into(),
            t_detect_ms: 0,
        }
    }

    fn target(id: i64) -> Arc<EndpointTarget> {
        Arc::new(EndpointTarget {
            id,
            account_id: 10 + id,
            url: format!("https://e{id}.example/"),
            signing: Signing::parse(1, "whsec_x", None, None),
            failing_since_ms: None,
            chat: None,
        })
    }

    #[test]
    fn deliveries_handed_are_the_claimed_trades_of_deliverable_endpoints_sharing_one_target() {
        let items = [
            item("a_trade", 1, Kind::Trade),
            item("b_retract", 1, Kind::Retract),
            item("c_trade", 2, Kind::Trade),
            item("d_trade", 1, Kind::Trade),
            item("e_trade", 3, Kind::Trade),
            item("f_final", 2, Kind::Final),
        ];
        let endpoints: HashMap<i64, Arc<EndpointTarget>> =
            [(1, target(1)), (2, target(2))].into_iter().collect();
        // c_trade was queued before (a conflict): not claimed by this insert.
        let unclaimed: HashSet<String> = ["c_trade".to_string()].into_iter().collect();
        let out = handed(&items, &endpoints, &unclaimed);
        // Endpoint 3 is gone or disabled; retracts and finals are never handed.
        assert_eq!(out.iter().map(|h| h.item).collect::<Vec<_>>(), [0, 3]);
        assert!(out.iter().all(|h| h.endpoint.id == 1));
        assert!(Arc::ptr_eq(&out[0].endpoint, &out[1].endpoint));
        assert!(handed(&items, &HashMap::new(), &HashSet::new()).is_empty());
    }

    #[test]
    fn deliveries_pass_each_run_of_equal_bodies_once() {
        let mut items: Vec<NewDelivery> = (1..=6).map(|e| item("x", e, Kind::Trade)).collect();
        for (d, body) in items.iter_mut().zip(["a", "a", "b", "b", "a", "c"]) {
            d.payload = body.to_string();
        }
        let (bodies, body_of) = bodies(&items);
        assert_eq!(bodies, ["a", "b", "a", "c"]);
        assert_eq!(body_of, [1, 1, 2, 2, 3, 4]);
        for (d, n) in items.iter().zip(&body_of) {
            assert_eq!(bodies[*n as usize - 1], d.payload);
        }
        assert_eq!(super::bodies(&[]), (Vec::<&str>::new(), Vec::new()));
    }
}

//! Postgres side of the delivery engine: enqueue, scan, claim and finish `webhook_deliveries`
//! rows, track each endpoint's run of failures (`webhook_failing`), disable endpoints and expire
//! their pending deliveries. Every write of push lands only while the slot's epoch is current,
//! checked in the same statement: enqueues take the `push_epoch` row `FOR SHARE`, claims and
//! results check it without a lock and land only on rows claimed by their epoch
//! (`EPOCH_CURRENT`), so a deposed leader's writes fail. Enqueueing and expiring are
//! [`pmw_core::pg::deliveries`]' (the API queues replays and expires too).

use std::collections::HashMap;
use std::sync::Arc;

use tokio_postgres::{GenericClient, Row, Transaction};

use super::error::WebhookError;
use crate::fence::Fence;

pub use pmw_core::pg::deliveries::{expire_pending, Enqueued, NewDelivery};
pub use pmw_core::webhook::{webhook_id, DeliveryKind};

use pmw_core::pg::deliveries::{self, forget_failing, EndpointTarget, EnqueueError, Writer};
use pmw_core::webhook::Signing;
use pmw_core::{Cursor, UnixMs};

/// The epoch check of claims and result writes: without a row lock. With `FOR SHARE` on the one
/// epoch row, every claim and every result of a hundred busy queues made Postgres build a
/// MultiXact of all current lockers and write that row: most of a core at 1000 deliveries/s. A
/// result lands only on a row still claimed by this epoch (`claimed_epoch = $2`, re-checked on
/// the row's latest version), so a deposed dispatcher's late result never overwrites a
/// successor's claim; once the bump is committed, every later claim or result of the old epoch
/// finds it and stops the dispatcher. The one race left, a claim in flight while the bump
/// commits, can send a delivery twice (both leaders claimed it), which at-least-once allows; a
/// graceful handover has no such race (the old dispatcher stops before the lock is released).
/// Cursor moves and enqueues keep the lock ([`pmw_core::pg::deliveries`], the round SQL).
pub(crate) const EPOCH_CURRENT: &str =
    "fence AS MATERIALIZED (SELECT 1 FROM push_epoch WHERE slot = $1 AND epoch = $2)";

/// Insert deliveries for slot 0 (see [`enqueue_in_slot`]).
pub async fn enqueue(
    tx: &Transaction<'_>,
    epoch: i64,
    items: &[NewDelivery],
) -> Result<u64, WebhookError> {
    Ok(enqueue_in_slot(tx, Fence { slot: 0, epoch }, false, items)
        .await?
        .inserted)
}

/// Insert a round's deliveries as `pending`, due now, inside the transaction that moves the
/// cursor, only while `fence` holds (otherwise [`WebhookError::Fenced`]).
/// Ids already present are left alone; endpoints gone or disabled meanwhile are skipped
/// ([`pmw_core::pg::deliveries::enqueue`]). With `claim`, new trade deliveries are inserted
/// claimed by `epoch` and returned in [`Enqueued::handed`] (see [`super::Handoff`]).
pub async fn enqueue_in_slot(
    tx: &Transaction<'_>,
    fence: Fence,
    claim: bool,
    items: &[NewDelivery],
) -> Result<Enqueued, WebhookError> {
    let Fence { slot, epoch } = fence;
    deliveries::enqueue(tx, Writer::Round { slot, epoch, claim }, items)
        .await
        .map_err(|e| match e {
            EnqueueError::Fenced { slot, epoch } => WebhookError::Fenced { slot, epoch },
            EnqueueError::Db(e) => e.into(),
        })
}

/// The backlog: pending deliveries of enabled endpoints, and how many are due.
pub(crate) async fn backlog(c: &impl GenericClient, now: i64) -> Result<(i64, i64), WebhookError> {
    let row = c
        .query_one(include_str!("sql/count_deliveries.sql"), &[&now])
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// A claimed delivery: the delivery as it was queued, its attempts so far, and its endpoint
/// (one `Arc` per endpoint per claim or hand-off, shared by its deliveries).
#[derive(Debug, Clone)]
pub(crate) struct Claimed {
    /// Its body as stored (`jsonb` rendering) or as the webhook lane rendered it (handed).
    pub delivery: NewDelivery,
    pub attempts: i32,
    pub endpoint: Arc<EndpointTarget>,
}

/// Which endpoints to claim for: one scan claims for every enabled endpoint whose queue is not
/// running, a running queue claims for its own endpoint.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Claim<'a> {
    /// Every enabled endpoint except these (their queues run).
    AllBut(&'a [i64]),
    /// This endpoint only.
    One(i64),
}

/// What one claim statement returned.
#[derive(Debug, Clone, Default)]
pub(crate) struct Claims {
    /// The claimed deliveries, in cursor order per endpoint.
    pub rows: Vec<Claimed>,
    /// When the next delivery not due yet falls due (scans only).
    pub next_due_ms: Option<i64>,
}

/// Claim up to `per_endpoint` due deliveries of each endpoint `which` names, in cursor order,
/// for `fence`'s epoch, in one statement. Unclaimed rows, rows claimed under another epoch (a
/// predecessor's leftovers: webhooks are at least once) and this epoch's abandoned claims
/// (older than `stale_before`) qualify. [`WebhookError::Fenced`] once the epoch is not current.
pub(crate) async fn claim(
    c: &impl GenericClient,
    fence: Fence,
    which: Claim<'_>,
    now: i64,
    stale_before: i64,
    per_endpoint: i64,
) -> Result<Claims, WebhookError> {
    let Fence { slot, epoch } = fence;
    let sql = format!(
        include_str!("sql/claim_deliveries.sql"),
        FENCE = EPOCH_CURRENT
    );
    let (one, but): (Option<i64>, &[i64]) = match which {
        Claim::AllBut(running) => (None, running),
        Claim::One(id) => (Some(id), &[]),
    };
    let rows = c
        .query(
            &sql,
            &[
                &slot,
                &epoch,
                &now,
                &stale_before,
                &per_endpoint,
                &one,
                &but,
            ],
        )
        .await?;
    if rows.first().map(|r| r.get::<_, i64>(0)) != Some(1) {
        return Err(WebhookError::Fenced { slot, epoch });
    }
    Ok(Claims {
        next_due_ms: rows.first().and_then(|r| r.get(1)),
        rows: claimed_of(&rows)?,
    })
}

/// The claimed deliveries of the claim statement's rows (columns 2 on; a row of NULLs when
/// none), sorted in ledger order, each endpoint built once.
fn claimed_of(rows: &[Row]) -> Result<Vec<Claimed>, WebhookError> {
    let mut endpoints: HashMap<i64, Arc<EndpointTarget>> = HashMap::new();
    let mut out = Vec::with_capacity(rows.len());
    for r in rows
        .iter()
        .filter(|r| r.get::<_, Option<String>>(2).is_some())
    {
        let endpoint_id: i64 = r.get(3);
        let endpoint = endpoints.entry(endpoint_id).or_insert_with(|| {
            let (secret, previous): (String, Option<String>) = (r.get(12), r.get(13));
            Arc::new(EndpointTarget {
                id: endpoint_id,
                account_id: r.get(4),
                url: r.get(11),
                signing: Signing::parse(endpoint_id, &secret, previous.as_deref(), r.get(14)),
                failing_since_ms: r.get(15),
                chat: pmw_core::chat::ChatTarget::from_stored(&secret, endpoint_id),
            })
        });
        let kind: String = r.get(5);
        let delivery = NewDelivery {
            id: r.get(2),
            endpoint_id,
            kind: kind.parse().map_err(WebhookError::Db)?,
            cursor: Cursor {
                block: r.get::<_, i64>(6) as u64,
                log_index: r.get::<_, i32>(7) as u32,
            },
            payload: r.get(8),
            t_detect_ms: r.get(10),
        };
        out.push(Claimed {
            delivery,
            attempts: r.get(9),
            endpoint: endpoint.clone(),
        });
    }
    out.sort_by(|a, b| {
        (a.delivery.cursor, &a.delivery.id).cmp(&(b.delivery.cursor, &b.delivery.id))
    });
    Ok(out)
}

/// The result of one attempt, written back to the row.
#[derive(Debug, Clone)]
pub(crate) struct Finish {
    pub state: &'static str,
    pub attempts: i32,
    pub next_attempt_ms: i64,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub done_ms: Option<i64>,
    /// What this attempt changes in the endpoint's run of failures.
    pub health: Health,
    /// Disable the endpoint.
    pub disable: Option<Disable>,
}

/// The endpoint's `webhook_failing` transition after an attempt. Only transitions write, so a
/// steadily succeeding (or steadily failing) endpoint costs no extra statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// Nothing changes.
    Keep,
    /// A failure after a success: the run of failures starts now.
    StartFailing,
    /// A success after failures: the run ends.
    Recovered,
}

/// Why an attempt disables its endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Disable {
    /// Unconditionally (410 Gone), with this reason.
    Gone(String),
    /// If its run of failures (re-read in the transaction) began at or before `cutoff_ms`.
    FailingSince { cutoff_ms: i64, period: String },
}

/// What writing an attempt's result did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Finished {
    /// The row was still ours and took the result.
    pub landed: bool,
    /// The endpoint was disabled, with this reason.
    pub disabled: Option<String>,
    /// Pending deliveries expired with it.
    pub expired: u64,
}

/// Write an attempt's result (releasing the claim when the delivery stays pending), fenced by
/// the epoch: one statement, or, when the endpoint's failure run changes or it is to be
/// disabled, one transaction with that transition and, when still true, the disabling and the
/// expiry of its pending deliveries. A result lands only
/// while the row is ours and still pending (an expired row takes a late 2xx, never a retry).
/// `landed: false` when the row was no longer ours (deleted, expired, or taken again after our
/// claim went stale).
pub(crate) async fn finish(
    client: &mut tokio_postgres::Client,
    fence: Fence,
    endpoint_id: i64,
    id: &str,
    f: &Finish,
    now: i64,
) -> Result<Finished, WebhookError> {
    if f.health == Health::Keep && f.disable.is_none() {
        // The common case: one statement, no transaction.
        let landed = update_delivery(&*client, fence, id, f).await?;
        return Ok(Finished {
            landed,
            ..Finished::default()
        });
    }
    let tx = client.transaction().await?;
    if !lock_endpoint(&tx, endpoint_id, f).await? {
        // Deleted with its deliveries.
        return Ok(Finished::default());
    }
    let mut out = Finished {
        landed: update_delivery(&tx, fence, id, f).await?,
        ..Finished::default()
    };
    if out.landed {
        record_health(&tx, endpoint_id, f.health, now).await?;
        if let Some(reason) = disable_reason(&tx, endpoint_id, f).await? {
            if let Some(expired) = disable(&tx, endpoint_id, &reason, now).await? {
                out.expired = expired;
                out.disabled = Some(reason);
            }
        }
    }
    tx.commit().await?;
    Ok(out)
}

/// Lock the endpoint before a failure run starts or it is disabled (as the API does before it
/// expires deliveries: no deadlock with it), so a concurrent delete waits for this transaction
/// (the insert into `webhook_failing` needs the row). `false` when it is gone.
async fn lock_endpoint(
    tx: &Transaction<'_>,
    endpoint_id: i64,
    f: &Finish,
) -> Result<bool, WebhookError> {
    let lock = if f.disable.is_some() {
        include_str!("sql/lock_endpoint_update.sql")
    } else if f.health == Health::StartFailing {
        include_str!("sql/lock_endpoint_share.sql")
    } else {
        return Ok(true);
    };
    Ok(tx.query_opt(lock, &[&endpoint_id]).await?.is_some())
}

/// Write the endpoint's failure-run transition.
async fn record_health(
    tx: &Transaction<'_>,
    endpoint_id: i64,
    health: Health,
    now: i64,
) -> Result<(), WebhookError> {
    match health {
        Health::Keep => {}
        Health::StartFailing => {
            tx.execute(include_str!("sql/start_failing.sql"), &[&endpoint_id, &now])
                .await?;
        }
        Health::Recovered => forget_failing(tx, endpoint_id).await?,
    }
    Ok(())
}

/// Why the endpoint is disabled now, if it is: a 410's reason, or a failure run (re-read in the
/// transaction) that began at or before the cutoff.
async fn disable_reason(
    tx: &Transaction<'_>,
    endpoint_id: i64,
    f: &Finish,
) -> Result<Option<String>, WebhookError> {
    Ok(match &f.disable {
        None => None,
        Some(Disable::Gone(reason)) => Some(reason.clone()),
        Some(Disable::FailingSince { cutoff_ms, period }) => tx
            .query_opt(include_str!("sql/failing_since.sql"), &[&endpoint_id])
            .await?
            .map(|r| r.get::<_, i64>(0))
            .filter(|since| since <= cutoff_ms)
            .map(|since| failing_reason(since, period, f.last_error.as_deref())),
    })
}

/// Disable the endpoint and expire its pending deliveries: how many expired, or `None` when it
/// was not enabled any more.
async fn disable(
    tx: &Transaction<'_>,
    endpoint_id: i64,
    reason: &str,
    now: i64,
) -> Result<Option<u64>, WebhookError> {
    let disabled = tx
        .execute(
            include_str!("sql/disable_endpoint.sql"),
            &[&endpoint_id, &reason, &now],
        )
        .await?;
    if disabled != 1 {
        return Ok(None);
    }
    Ok(Some(expire_pending(tx, endpoint_id, reason, now).await?))
}

/// The fenced update of the delivery row; `Ok(false)` when it was not ours any more.
async fn update_delivery(
    c: &impl GenericClient,
    fence: Fence,
    id: &str,
    f: &Finish,
) -> Result<bool, WebhookError> {
    let Fence { slot, epoch } = fence;
    let sql = format!(
        include_str!("sql/update_delivery.sql"),
        FENCE = EPOCH_CURRENT
    );
    let row = c
        .query_one(
            &sql,
            &[
                &slot,
                &epoch,
                &id,
                &f.state,
                &f.attempts,
                &f.next_attempt_ms,
                &f.last_status,
                &f.last_error,
                &f.done_ms,
            ],
        )
        .await?;
    if row.get::<_, i64>(0) == 0 {
        return Err(WebhookError::Fenced { slot, epoch });
    }
    Ok(row.get::<_, i64>(1) == 1)
}

/// The `disabled_reason` of an endpoint that failed every attempt since `since_ms`.
fn failing_reason(since_ms: i64, period: &str, last_error: Option<&str>) -> String {
    let mut s = format!(
        "every delivery attempt failed since {} (limit {period})",
        UnixMs(since_ms).to_rfc3339()
    );
    if let Some(e) = last_error.filter(|e| !e.is_empty()) {
        let e: String = e.chars().take(200).collect();
        s.push_str(&format!("; last error: {e}"));
    }
    s
}

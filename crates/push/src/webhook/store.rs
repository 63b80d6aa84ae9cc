//! Postgres side of the delivery engine: enqueue, scan, claim and finish `webhook_deliveries`
//! rows, track each endpoint's run of failures (`webhook_failing`), disable endpoints and expire
//! their pending deliveries. Every write of push takes the slot's `push_epoch` row `FOR SHARE`
//! in the same statement (or transaction) and lands only while the epoch is current, so a
//! deposed leader's writes fail. [`expire_pending`] is also the API's, unfenced.

use pmw_core::{Cursor, UnixMs};
use serde::{Deserialize, Serialize};
use tokio_postgres::{GenericClient, Transaction};

use super::WebhookError;

/// What a delivery carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryKind {
    Trade,
    Retract,
}

impl DeliveryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryKind::Trade => "trade",
            DeliveryKind::Retract => "retract",
        }
    }
}

impl std::str::FromStr for DeliveryKind {
    type Err = WebhookError;

    /// `"trade"` or `"retract"`.
    fn from_str(s: &str) -> Result<DeliveryKind, WebhookError> {
        match s {
            "trade" => Ok(DeliveryKind::Trade),
            "retract" => Ok(DeliveryKind::Retract),
            other => Err(WebhookError::Task(format!(
                "unknown delivery kind {other:?}"
            ))),
        }
    }
}

/// One message for one endpoint, enqueued by the push loop.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDelivery {
    /// The stable `webhook-id` of every attempt (see [`webhook_id`]).
    pub id: String,
    pub endpoint_id: i64,
    pub kind: DeliveryKind,
    pub cursor: Cursor,
    /// The JSON body (a `trade` or `retract` object). When it is an object, its top-level
    /// `t_push_ms` is set to the send time of each attempt.
    pub payload: serde_json::Value,
    pub t_detect_ms: i64,
}

/// A `webhook-id` stable across retries: `msg_<cursor>_<block hash prefix>_<endpoint>_<kind>`.
/// The block hash prefix keeps a trade re-mined at the same `(block, log_index)` after a reorg
/// from colliding with the orphaned one (which `ON CONFLICT DO NOTHING` would drop).
pub fn webhook_id(
    cursor: Cursor,
    block_hash: &str,
    endpoint_id: i64,
    kind: DeliveryKind,
) -> String {
    let h = block_hash.trim_start_matches("0x");
    let prefix = h.get(..8).unwrap_or(h);
    format!("msg_{cursor}_{prefix}_{endpoint_id}_{}", kind.as_str())
}

const FENCE: &str =
    "fence AS MATERIALIZED (SELECT 1 FROM push_epoch WHERE slot = $1 AND epoch = $2 FOR SHARE)";

/// Insert deliveries for slot 0 (see [`enqueue_in_slot`]).
pub async fn enqueue(
    tx: &Transaction<'_>,
    epoch: i64,
    items: &[NewDelivery],
) -> Result<u64, WebhookError> {
    Ok(enqueue_in_slot(tx, 0, epoch, items).await?.inserted)
}

/// What one enqueue did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Enqueued {
    /// New `pending` rows.
    pub inserted: u64,
    /// Deliveries whose endpoint was deleted or disabled meanwhile: skipped, never an error.
    pub skipped: u64,
}

/// Insert deliveries as `pending`, due now, inside the caller's transaction (the one that moves
/// the cursor). Ids already present are skipped (`ON CONFLICT (id) DO NOTHING`), and so are
/// deliveries to endpoints that are gone or disabled by now: the endpoints still there are
/// locked `FOR KEY SHARE` in the same statement, so a concurrent delete either is seen (and
/// skipped) or waits for this transaction; one account's churn never fails a round. The insert
/// happens only if the slot's epoch is still `epoch` (same statement, row `FOR SHARE`);
/// otherwise [`WebhookError::Fenced`].
pub async fn enqueue_in_slot(
    tx: &Transaction<'_>,
    slot: i16,
    epoch: i64,
    items: &[NewDelivery],
) -> Result<Enqueued, WebhookError> {
    if items.is_empty() {
        return Ok(Enqueued::default());
    }
    let now = UnixMs::now().as_i64();
    let ids: Vec<&str> = items.iter().map(|d| d.id.as_str()).collect();
    let endpoints: Vec<i64> = items.iter().map(|d| d.endpoint_id).collect();
    let kinds: Vec<&str> = items.iter().map(|d| d.kind.as_str()).collect();
    let blocks: Vec<i64> = items.iter().map(|d| d.cursor.block as i64).collect();
    let logs: Vec<i32> = items.iter().map(|d| d.cursor.log_index as i32).collect();
    let payloads: Vec<&serde_json::Value> = items.iter().map(|d| &d.payload).collect();
    let detects: Vec<i64> = items.iter().map(|d| d.t_detect_ms).collect();
    let row = tx
        .query_one(
            include_str!("../sql/enqueue_deliveries.sql"),
            &[
                &slot, &epoch, &now, &ids, &endpoints, &kinds, &blocks, &logs, &payloads, &detects,
            ],
        )
        .await?;
    if row.get::<_, i64>(0) == 0 {
        return Err(WebhookError::Fenced { slot, epoch });
    }
    let live = row.get::<_, i64>(2) as u64;
    Ok(Enqueued {
        inserted: row.get::<_, i64>(1) as u64,
        skipped: items.len() as u64 - live,
    })
}

/// What the dispatcher learns from one scan.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scan {
    pub current: bool,
    pub due_endpoints: Vec<i64>,
    pub backlog: i64,
    pub due: i64,
    pub next_due_ms: Option<i64>,
}

/// Which endpoints have claimable due deliveries (same conditions as [`claim`]), the backlog,
/// and whether `epoch` is still current.
pub(crate) async fn scan(
    c: &impl GenericClient,
    slot: i16,
    epoch: i64,
    now: i64,
    stale_before: i64,
) -> Result<Scan, WebhookError> {
    let row = c
        .query_one(
            "WITH p AS (SELECT d.endpoint_id, d.next_attempt_ms, d.claimed_epoch, d.claimed_ms \
               FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled \
               WHERE d.state = 'pending') \
             SELECT EXISTS (SELECT 1 FROM push_epoch WHERE slot = $1 AND epoch = $2), \
               coalesce((SELECT array_agg(DISTINCT endpoint_id) FROM p WHERE next_attempt_ms <= $3 \
                 AND (claimed_epoch IS DISTINCT FROM $2 OR claimed_ms < $4)), '{}'::bigint[]), \
               (SELECT count(*) FROM p), \
               (SELECT count(*) FROM p WHERE next_attempt_ms <= $3), \
               (SELECT min(next_attempt_ms) FROM p WHERE next_attempt_ms > $3)",
            &[&slot, &epoch, &now, &stale_before],
        )
        .await?;
    Ok(Scan {
        current: row.get(0),
        due_endpoints: row.get(1),
        backlog: row.get(2),
        due: row.get(3),
        next_due_ms: row.get(4),
    })
}

/// A claimed delivery with its endpoint's current settings.
#[derive(Debug, Clone)]
pub(crate) struct Claimed {
    pub id: String,
    pub endpoint_id: i64,
    pub account_id: i64,
    pub kind: String,
    pub block_number: i64,
    pub log_index: i32,
    pub payload: serde_json::Value,
    pub attempts: i32,
    pub t_detect_ms: i64,
    pub url: String,
    pub secret: String,
    pub previous_secret: Option<String>,
    pub previous_expires_ms: Option<i64>,
    /// When the endpoint's current run of failed attempts began (`webhook_failing`), if any.
    pub failing_since_ms: Option<i64>,
}

/// Claim up to `limit` due deliveries of one enabled endpoint, in cursor order, for `epoch`.
/// Unclaimed rows, rows claimed under another epoch (a predecessor's leftovers: webhooks are
/// at least once) and this epoch's abandoned claims (older than `stale_before`) qualify.
pub(crate) async fn claim(
    c: &impl GenericClient,
    slot: i16,
    epoch: i64,
    endpoint_id: i64,
    now: i64,
    stale_before: i64,
    limit: i64,
) -> Result<Vec<Claimed>, WebhookError> {
    let sql = format!(
        "WITH {FENCE}, due AS ( \
           SELECT d.id FROM webhook_deliveries d \
           WHERE d.endpoint_id = $3 AND d.state = 'pending' AND d.next_attempt_ms <= $4 \
             AND (d.claimed_epoch IS DISTINCT FROM $2 OR d.claimed_ms < $5) \
             AND EXISTS (SELECT 1 FROM fence) \
           ORDER BY d.block_number, d.log_index, d.id LIMIT $6 FOR UPDATE SKIP LOCKED), \
         upd AS ( \
           UPDATE webhook_deliveries d SET claimed_epoch = $2, claimed_ms = $4 \
           FROM due, webhook_endpoints e \
           WHERE d.id = due.id AND e.id = d.endpoint_id AND e.enabled \
           RETURNING d.id, d.endpoint_id, e.account_id, d.kind, d.block_number, d.log_index, d.payload, \
             d.attempts, d.t_detect_ms, e.url, e.secret, e.previous_secret, e.previous_expires_ms, \
             (SELECT f.since_ms FROM webhook_failing f WHERE f.endpoint_id = d.endpoint_id)) \
         SELECT (SELECT count(*) FROM fence), upd.* FROM (SELECT 1) one LEFT JOIN upd ON true"
    );
    let rows = c
        .query(
            &sql,
            &[&slot, &epoch, &endpoint_id, &now, &stale_before, &limit],
        )
        .await?;
    if rows.first().map(|r| r.get::<_, i64>(0)) != Some(1) {
        return Err(WebhookError::Fenced { slot, epoch });
    }
    let mut out: Vec<Claimed> = rows
        .iter()
        .filter(|r| r.get::<_, Option<String>>(1).is_some())
        .map(|r| Claimed {
            id: r.get(1),
            endpoint_id: r.get(2),
            account_id: r.get(3),
            kind: r.get(4),
            block_number: r.get(5),
            log_index: r.get(6),
            payload: r.get(7),
            attempts: r.get(8),
            t_detect_ms: r.get(9),
            url: r.get(10),
            secret: r.get(11),
            previous_secret: r.get(12),
            previous_expires_ms: r.get(13),
            failing_since_ms: r.get(14),
        })
        .collect();
    out.sort_by(|a, b| {
        (a.block_number, a.log_index, &a.id).cmp(&(b.block_number, b.log_index, &b.id))
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
    slot: i16,
    epoch: i64,
    endpoint_id: i64,
    id: &str,
    f: &Finish,
    now: i64,
) -> Result<Finished, WebhookError> {
    if f.health == Health::Keep && f.disable.is_none() {
        // The common case: one statement, no transaction.
        let landed = update_delivery(&*client, slot, epoch, id, f).await?;
        return Ok(Finished {
            landed,
            ..Finished::default()
        });
    }
    let tx = client.transaction().await?;
    if f.health == Health::StartFailing || f.disable.is_some() {
        // Lock the endpoint first, as the API does before it expires deliveries (no deadlock
        // with it), and so a concurrent delete waits for this transaction (the insert into
        // `webhook_failing` needs the row).
        let lock = if f.disable.is_some() {
            "SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR NO KEY UPDATE"
        } else {
            "SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR KEY SHARE"
        };
        if tx.query_opt(lock, &[&endpoint_id]).await?.is_none() {
            // Deleted with its deliveries.
            return Ok(Finished::default());
        }
    }
    let mut out = Finished {
        landed: update_delivery(&tx, slot, epoch, id, f).await?,
        ..Finished::default()
    };
    if !out.landed {
        tx.commit().await?;
        return Ok(out);
    }
    match f.health {
        Health::Keep => {}
        Health::StartFailing => {
            tx.execute(
                "INSERT INTO webhook_failing (endpoint_id, since_ms) VALUES ($1, $2) \
                 ON CONFLICT (endpoint_id) DO NOTHING",
                &[&endpoint_id, &now],
            )
            .await?;
        }
        Health::Recovered => {
            tx.execute(
                "DELETE FROM webhook_failing WHERE endpoint_id = $1",
                &[&endpoint_id],
            )
            .await?;
        }
    }
    let reason = match &f.disable {
        None => None,
        Some(Disable::Gone(reason)) => Some(reason.clone()),
        Some(Disable::FailingSince { cutoff_ms, period }) => tx
            .query_opt(
                "SELECT since_ms FROM webhook_failing WHERE endpoint_id = $1",
                &[&endpoint_id],
            )
            .await?
            .map(|r| r.get::<_, i64>(0))
            .filter(|since| since <= cutoff_ms)
            .map(|since| failing_reason(since, period, f.last_error.as_deref())),
    };
    if let Some(reason) = reason {
        let disabled = tx
            .execute(
                "UPDATE webhook_endpoints SET enabled = false, disabled_reason = $2, updated_ms = $3 \
                 WHERE id = $1 AND enabled",
                &[&endpoint_id, &reason, &now],
            )
            .await?;
        if disabled == 1 {
            out.expired = expire_pending(&tx, endpoint_id, &reason, now).await?;
            out.disabled = Some(reason);
        }
    }
    tx.commit().await?;
    Ok(out)
}

/// The fenced update of the delivery row; `Ok(false)` when it was not ours any more.
async fn update_delivery(
    c: &impl GenericClient,
    slot: i16,
    epoch: i64,
    id: &str,
    f: &Finish,
) -> Result<bool, WebhookError> {
    let sql = format!(
        "WITH {FENCE}, d AS ( \
           UPDATE webhook_deliveries SET state = $4, attempts = $5, next_attempt_ms = $6, \
             last_status = $7, last_error = $8, done_ms = $9, \
             claimed_epoch = CASE WHEN $4 = 'pending' THEN NULL ELSE claimed_epoch END, \
             claimed_ms = CASE WHEN $4 = 'pending' THEN NULL ELSE claimed_ms END \
           WHERE id = $3 AND claimed_epoch = $2 AND (state = 'pending' OR $4 = 'delivered') \
             AND EXISTS (SELECT 1 FROM fence) \
           RETURNING 1) \
         SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM d)"
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

/// Expire the pending deliveries of an endpoint that is being disabled (or re-enabled: what is
/// still pending then was queued while it was disabled), inside the caller's transaction, which
/// must hold the endpoint row locked (`FOR NO KEY UPDATE`, as an `UPDATE` of it does). They
/// become `failed` with `last_error` `endpoint disabled: <reason>` and are never sent; a 2xx
/// already in flight still lands as `delivered`. The endpoint's run of failures is forgotten,
/// so a re-enabled endpoint starts afresh. Returns how many deliveries expired.
pub async fn expire_pending(
    c: &impl GenericClient,
    endpoint_id: i64,
    reason: &str,
    now: i64,
) -> Result<u64, WebhookError> {
    let error = format!("endpoint disabled: {reason}");
    let expired = c
        .execute(
            "UPDATE webhook_deliveries SET state = 'failed', last_error = $2, done_ms = $3 \
             WHERE endpoint_id = $1 AND state = 'pending'",
            &[&endpoint_id, &error, &now],
        )
        .await?;
    c.execute(
        "DELETE FROM webhook_failing WHERE endpoint_id = $1",
        &[&endpoint_id],
    )
    .await?;
    Ok(expired)
}

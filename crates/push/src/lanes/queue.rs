//! The commit of the two queueing lanes (webhooks and finals): move the lane's cursor (fenced by
//! the epoch in the same statement) and queue the round's webhook deliveries in the same
//! transaction; then log the trade deliveries a retract cancelled before any attempt.

use pmw_core::pg::deliveries::Cancelled;
use pmw_core::UnixMs;

use super::Fence;
use crate::ledger::Batch;
use crate::round::RoundError;
use crate::webhook;
use pmw_session::recorder::{DeliveryLogRow, Fact, Recorder};
use pmw_session::subs::Index;

/// Move the lane's cursor to `batch.through` with `cursor_sql` and queue `deliveries` in the
/// same transaction. `claim`: new trade deliveries go in claimed by the epoch, for the hand-off.
/// Endpoints deleted or disabled meanwhile are skipped (counted), never an error.
pub(super) async fn move_and_queue(
    client: &mut deadpool_postgres::Object,
    fence: Fence,
    cursor_sql: &str,
    batch: &Batch,
    deliveries: &[webhook::NewDelivery],
    claim: bool,
) -> Result<webhook::Enqueued, RoundError> {
    let through = batch.through.cursor;
    let now = UnixMs::now().0;
    let tx = client.transaction().await?;
    let moved = tx
        .query_opt(
            cursor_sql,
            &[
                &fence.slot,
                &fence.epoch,
                &(through.block as i64),
                &(through.log_index as i32),
                &batch.reorg_id,
                &now,
            ],
        )
        .await?;
    if moved.is_none() {
        return Err(RoundError::Fenced);
    }
    let enqueued = match webhook::enqueue_in_slot(&tx, fence, claim, deliveries).await {
        Ok(n) => n,
        Err(webhook::WebhookError::Fenced { .. }) => return Err(RoundError::Fenced),
        Err(e) => return Err(RoundError::Webhook(e.to_string())),
    };
    tx.commit().await?;
    if enqueued.skipped > 0 {
        tracing::debug!(
            skipped = enqueued.skipped,
            "webhook deliveries skipped: endpoint deleted or disabled"
        );
    }
    Ok(enqueued)
}

/// One `delivery_log` row (outcome `cancelled`, attempt 0) per trade delivery a retract
/// cancelled before any attempt.
pub(super) fn log_cancelled(facts: &Recorder, idx: &Index, cancelled: &[Cancelled]) {
    let now = UnixMs::now().0;
    for c in cancelled {
        let account = idx
            .endpoints_by_account
            .iter()
            .find(|(_, eps)| eps.contains(&c.endpoint_id))
            .map_or(0, |(a, _)| *a);
        tracing::info!(id = %c.id, endpoint = c.endpoint_id, "webhook trade cancelled by its retract before delivery");
        facts.record(Fact::Attempt(DeliveryLogRow {
            delivery_id: c.id.clone(),
            endpoint_id: c.endpoint_id as u64,
            account_id: account as u64,
            attempt: 0,
            kind: "trade".into(),
            block_number: c.cursor.block,
            log_index: c.cursor.log_index,
            t_attempt_ms: now,
            duration_ms: 0,
            status_code: 0,
            outcome: "cancelled".into(),
            error: "retracted before delivery".into(),
        }));
    }
}

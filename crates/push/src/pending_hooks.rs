//! The pending lane's webhook deliveries (issue 43): each `pending` and `void` to the enabled
//! endpoints whose `events` opt in to `pending` (beside `trade`), chosen as a trade's are (the
//! followers of its wallet or market whose subscription and endpoint filters pass the fill),
//! signed and retried by the dispatcher like any delivery. Queued in one fenced statement
//! (`webhook/sql/enqueue_pending.sql`: a `void` only behind its `pending`'s delivery); the
//! dispatcher claims a `pending` only while its fill is open and a `void` once its `pending`'s
//! delivery is done (`claim_deliveries.sql`), and the lane cancels the `pending`s whose fill
//! ended before they went out (`cancel_ended_pending.sql`): a `pending` never follows its
//! `trade` or `void`.

use std::sync::Arc;

use pmw_core::message::stamp;
use pmw_core::pg::PgPool;
use pmw_core::UnixMs;
use pmw_session::hub::Item;
use pmw_session::pending::PendingRow;
use pmw_session::subs::{Index, Subscriptions};
use tokio::sync::Notify;

use crate::fence::Fence;

/// What the lane queues webhook deliveries with.
pub(crate) struct PendingHooks {
    pub pool: PgPool,
    pub fence: Fence,
    /// Wakes the dispatcher once deliveries are queued.
    pub waker: Arc<Notify>,
    pub subs: Subscriptions,
}

/// A delivery to queue: id, endpoint, kind, payload, detect time.
type Row = (String, i64, &'static str, String, i64);

impl PendingHooks {
    /// The index at the current `subs_version` (reloaded when it moved).
    async fn index(&self, c: &deadpool_postgres::Object) -> Result<Arc<Index>, String> {
        let version: i64 = c
            .query_one("SELECT seq FROM subs_version WHERE id = 1", &[])
            .await
            .map_err(|e| pmw_core::pg::describe(&e))?
            .get(0);
        let idx = self.subs.current().await;
        if idx.version == version {
            return Ok(idx);
        }
        self.subs
            .reload(&self.pool)
            .await
            .map_err(|e| e.to_string())
    }

    /// Queue the deliveries of `rows` (each with its rendered item), then cancel the `pending`s
    /// whose fill ended; wake the dispatcher when something was queued.
    pub async fn deliver(
        &self,
        c: &deadpool_postgres::Object,
        rows: &[PendingRow],
        items: &[Arc<Item>],
    ) -> Result<(), String> {
        let idx = self.index(c).await?;
        let opted: Vec<i64> = idx
            .all_endpoints()
            .into_iter()
            .filter(|e| idx.events_of(*e).pending)
            .collect();
        if opted.is_empty() {
            return Ok(());
        }
        let now = UnixMs::now().0;
        let mut out: Vec<Row> = Vec::new();
        for (row, item) in rows.iter().zip(items) {
            let endpoints = idx.endpoints_for(&row.maker, &row.token_id, Some(&item.facts));
            let kind = item.kind.as_str();
            for e in endpoints.into_iter().filter(|e| opted.contains(e)) {
                let id = format!("msg_pending-{}_{e}_{kind}", row.fill_id);
                out.push((
                    id,
                    e,
                    kind,
                    stamp(item.kind, &item.body, now),
                    row.first_seen_ms,
                ));
            }
        }
        let queued = self.enqueue(c, &out, now).await?;
        let fence = (self.fence.slot, self.fence.epoch);
        let cancelled = c
            .execute(
                include_str!("webhook/sql/cancel_ended_pending.sql"),
                &[&fence.0, &fence.1, &now],
            )
            .await
            .map_err(|e| pmw_core::pg::describe(&e))?;
        if queued > 0 {
            self.waker.notify_one();
        }
        if queued > 0 || cancelled > 0 {
            tracing::debug!(queued, cancelled, "pending webhook deliveries");
        }
        Ok(())
    }

    /// Insert `out` (fenced); the rows inserted.
    async fn enqueue(
        &self,
        c: &deadpool_postgres::Object,
        out: &[Row],
        now: i64,
    ) -> Result<i64, String> {
        if out.is_empty() {
            return Ok(0);
        }
        let ids: Vec<&str> = out.iter().map(|r| r.0.as_str()).collect();
        let endpoints: Vec<i64> = out.iter().map(|r| r.1).collect();
        let kinds: Vec<&str> = out.iter().map(|r| r.2).collect();
        let payloads: Vec<&str> = out.iter().map(|r| r.3.as_str()).collect();
        let detect: Vec<i64> = out.iter().map(|r| r.4).collect();
        let (slot, epoch) = (self.fence.slot, self.fence.epoch);
        let r = c
            .query_one(
                include_str!("webhook/sql/enqueue_pending.sql"),
                &[
                    &slot, &epoch, &now, &ids, &endpoints, &kinds, &payloads, &detect,
                ],
            )
            .await
            .map_err(|e| pmw_core::pg::describe(&e))?;
        if !r.get::<_, bool>(0) {
            return Err(format!("fenced: epoch {epoch} is no longer the slot's"));
        }
        Ok(r.get(1))
    }
}

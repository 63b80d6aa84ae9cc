//! Successful attempts' results, written in batches: every delivered attempt of every queue
//! hands its result here and waits for it; whatever is queued while a batch's statement runs
//! goes in the next one (no added wait when idle; one statement for many deliveries under load).
//! Each row lands only while claimed by this epoch, and the whole statement only while the
//! epoch is current, exactly as [`super::store::finish`]'s single-row write. Failures, retries,
//! health transitions and disabling keep that per-row path.

use std::collections::HashSet;

use pmw_core::pg::PgPool;
use tokio::sync::{mpsc, oneshot};

use super::error::WebhookError;
use crate::fence::Fence;

/// Deliveries written per statement at most.
const BATCH: usize = 512;

struct Delivered {
    id: String,
    attempts: i32,
    status: i32,
    done_ms: i64,
    reply: oneshot::Sender<Result<bool, WebhookError>>,
}

/// The writer's handle; it runs until every handle is dropped.
#[derive(Clone)]
pub(crate) struct Results {
    tx: mpsc::UnboundedSender<Delivered>,
}

impl Results {
    pub fn spawn(pool: PgPool, fence: Fence) -> Results {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(pool, fence, rx));
        Results { tx }
    }

    /// Record a delivered attempt; `Ok(false)` when the row was no longer ours.
    pub async fn delivered(
        &self,
        id: &str,
        attempts: i32,
        status: i32,
        done_ms: i64,
    ) -> Result<bool, WebhookError> {
        let (reply, rx) = oneshot::channel();
        let item = Delivered {
            id: id.to_string(),
            attempts,
            status,
            done_ms,
            reply,
        };
        self.tx
            .send(item)
            .map_err(|_| WebhookError::Task("result writer stopped".into()))?;
        rx.await
            .map_err(|_| WebhookError::Task("result writer stopped".into()))?
    }
}

async fn run(pool: PgPool, fence: Fence, mut rx: mpsc::UnboundedReceiver<Delivered>) {
    let sql = format!(
        include_str!("sql/delivered_batch.sql"),
        FENCE = super::store::EPOCH_CURRENT
    );
    let mut batch = Vec::with_capacity(BATCH);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(d) => batch.push(d),
                Err(_) => break,
            }
        }
        let written = write(&pool, &sql, fence, &batch).await;
        for d in batch.drain(..) {
            let r = match &written {
                Ok(landed) => Ok(landed.contains(&d.id)),
                Err(e) => Err(e.clone()),
            };
            let _ = d.reply.send(r);
        }
    }
}

/// One statement for the batch: the ids that landed.
async fn write(
    pool: &PgPool,
    sql: &str,
    fence: Fence,
    batch: &[Delivered],
) -> Result<HashSet<String>, WebhookError> {
    let Fence { slot, epoch } = fence;
    let ids: Vec<&str> = batch.iter().map(|d| d.id.as_str()).collect();
    let attempts: Vec<i32> = batch.iter().map(|d| d.attempts).collect();
    let status: Vec<i32> = batch.iter().map(|d| d.status).collect();
    let done: Vec<i64> = batch.iter().map(|d| d.done_ms).collect();
    let c = pool.get().await?;
    let stmt = c.prepare_cached(sql).await?;
    let row = c
        .query_one(&stmt, &[&slot, &epoch, &ids, &attempts, &status, &done])
        .await?;
    if row.get::<_, i64>(0) == 0 {
        return Err(WebhookError::Fenced { slot, epoch });
    }
    Ok(row.get::<_, Vec<String>>(1).into_iter().collect())
}

//! Taking leadership of a push slot: wait for the slot's advisory lock (in segments, on a
//! dedicated session) while beating `{"role":"standby"}` every second, so a live standby is
//! visible (`/v1/ready`'s `push_standby`, `pmwctl status`); then bump PushEpoch, void the
//! predecessor's open WS claims, make sure the push cursor exists. Only then does the caller
//! LISTEN and bind its port.

use std::time::Duration;

use pmw_core::heartbeat::Heartbeat;
use pmw_core::lock::{keys, WriterLock};
use pmw_core::pg::{PgError, PgPool};
use pmw_core::types::cursor::MAX_LOG_INDEX;
use pmw_core::{CoreConfig, Cursor, UnixMs};
use tokio_util::sync::CancellationToken;

/// What this process holds once it leads.
pub struct Leadership {
    pub lock: WriterLock,
    pub epoch: i64,
    pub cursor: Cursor,
    pub reorg_id: i64,
}

/// How often a standby beats while it waits for the lock.
pub const STANDBY_BEAT: Duration = Duration::from_secs(1);

pub fn lock_key(slot: i16) -> i64 {
    keys::PUSH_BASE + i64::from(slot)
}

/// Wait for the lock as the standby, beating every [`STANDBY_BEAT`], then take over.
/// `Ok(None)` if shutdown came first (the heartbeat then says `stopped`).
pub async fn take(
    cfg: &CoreConfig,
    pool: &PgPool,
    heartbeat: &Heartbeat,
    instance: &str,
    slot: i16,
    (segment, lease): (Duration, Duration),
    shutdown: &CancellationToken,
) -> Result<Option<Leadership>, PgError> {
    let app = format!("pmw-push:{instance}:lock");
    let acquire = WriterLock::acquire(cfg, &app, lock_key(slot), segment, shutdown);
    let lock = tokio::select! {
        biased;
        r = acquire => r?,
        never = standby_beats(heartbeat, slot) => match never {},
        // A frozen leader keeps its lock: its heartbeat is the lease (see `lease`).
        never = crate::lease::watch(pool, slot, lock_key(slot), lease) => match never {},
    };
    let Some(lock) = lock else {
        let _ = heartbeat
            .beat(&serde_json::json!({"role": "stopped"}))
            .await;
        return Ok(None);
    };
    let now = UnixMs::now().0;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let epoch: i64 = tx
        .query_one(
            include_str!("sql/bump_epoch.sql"),
            &[&slot, &instance, &now],
        )
        .await?
        .get(0);
    let voided = tx
        .execute(include_str!("sql/void_claims.sql"), &[&slot, &epoch, &now])
        .await?;
    // First leader ever: start at the ingest watermark (no history replay).
    let start = pmw_core::db::watermark(&*tx).await?.unwrap_or(0) as i64;
    tx.execute(
        "INSERT INTO push_cursor (slot, block_number, log_index, epoch, updated_ms) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (slot) DO NOTHING",
        &[&slot, &start, &(MAX_LOG_INDEX as i32), &epoch, &now],
    )
    .await?;
    let row = tx
        .query_one(
            "SELECT block_number, log_index, reorg_id FROM push_cursor WHERE slot = $1",
            &[&slot],
        )
        .await?;
    tx.commit().await?;
    let cursor = Cursor {
        block: row.get::<_, i64>(0) as u64,
        log_index: row.get::<_, i32>(1) as u32,
    };
    tracing::info!(slot, epoch, voided, cursor = %cursor, "leading");
    Ok(Some(Leadership {
        lock,
        epoch,
        cursor,
        reorg_id: row.get(2),
    }))
}

/// Beat `{"role":"standby"}` every [`STANDBY_BEAT`] until dropped (when the lock is acquired or
/// shutdown comes). A failed beat is logged and retried on the next tick.
async fn standby_beats(heartbeat: &Heartbeat, slot: i16) -> std::convert::Infallible {
    let since = UnixMs::now().0;
    let state = serde_json::json!({"role": "standby", "slot": slot, "waiting_since_ms": since});
    let mut tick = tokio::time::interval(STANDBY_BEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = heartbeat.beat(&state).await {
            tracing::warn!(error = %e, "standby heartbeat failed");
        }
    }
}

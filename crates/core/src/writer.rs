//! A single writer's leader/standby pair (pmw-live, pmw-stats), as push-a/push-b run: the
//! standby waits on the writer lock in segments ([`WriterLock::acquire`]) while it beats
//! `{"role":"standby"}` every second (so `pmwctl status` and `/v1/ready` see it) and watches the
//! holder's lease (`writer_epochs.renewed_ms`). A frozen holder (SIGSTOP, a paused VM) keeps its
//! session, so its lock, forever: past the lease the standby terminates the holder's lock
//! session, wins the lock, and takes the next epoch, which fences every later write of the old
//! holder. The holder renews its lease every second with [`renew`] while it leads.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::config::CoreConfig;
use crate::heartbeat::Heartbeat;
use crate::lock::{holder_sql, WriterLock};
use crate::pg::{PgError, PgPool};
use crate::UnixMs;

/// How often a standby beats and a holder renews its lease.
pub const BEAT: Duration = Duration::from_secs(1);
/// A holder silent for longer than this is deposed by its standby: several missed renewals, so
/// a slow Postgres round-trip never deposes a healthy holder.
pub const LEASE: Duration = Duration::from_secs(5);

/// Who waits for a writer lock, and how.
pub struct Candidate<'a> {
    /// The `application_name` of the lock session (`pmw-live:lock`).
    pub application_name: &'a str,
    /// This instance's name (`PMW_INSTANCE`), recorded as the holder.
    pub instance: &'a str,
    pub key: i64,
    /// One lock wait's length (`lock_timeout`) before it is asked again.
    pub segment: Duration,
    /// The holder's lease (normally [`LEASE`]).
    pub lease: Duration,
}

/// Wait for the lock as the standby, beating `{"role":"standby"}` every [`BEAT`] and deposing a
/// holder whose lease ran out; then take the next epoch. `Ok(None)` when shutdown came first.
pub async fn take(
    cfg: &CoreConfig,
    pool: &PgPool,
    heartbeat: &Heartbeat,
    c: Candidate<'_>,
    shutdown: &CancellationToken,
) -> Result<Option<WriterLock>, PgError> {
    let acquire = WriterLock::acquire(cfg, c.application_name, c.key, c.segment, shutdown);
    let lock = tokio::select! {
        biased;
        r = acquire => r?,
        never = standby_beats(heartbeat) => match never {},
        never = watch(pool, c.key, c.lease) => match never {},
    };
    let Some(mut lock) = lock else {
        return Ok(None);
    };
    lock.take_epoch(c.instance).await?;
    Ok(Some(lock))
}

/// Beat `{"role":"standby","waiting_ms":…}` every [`BEAT`] until dropped.
async fn standby_beats(heartbeat: &Heartbeat) -> Infallible {
    let since = Instant::now();
    let mut tick = tokio::time::interval(BEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let waiting_ms = since.elapsed().as_millis() as u64;
        let state = serde_json::json!({
            "role": "standby", "state": "waiting for lock", "waiting_ms": waiting_ms,
        });
        if let Err(e) = heartbeat.beat(&state).await {
            tracing::warn!(error = %e, "standby heartbeat failed");
        }
    }
}

/// Watch the holder's lease until dropped; past it, terminate the holder's lock session.
async fn watch(pool: &PgPool, key: i64, lease: Duration) -> Infallible {
    let every = (lease / 4).clamp(Duration::from_millis(100), BEAT);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = depose_if_silent(pool, key, lease).await {
            tracing::warn!(error = %e, "writer lease check failed");
        }
    }
}

/// Terminate the lock holder's session when its lease is older than `lease`; the number of
/// sessions terminated.
pub async fn depose_if_silent(pool: &PgPool, key: i64, lease: Duration) -> Result<u32, PgError> {
    let client = pool.get().await?;
    let now = UnixMs::now().0;
    let Some(row) = client
        .query_opt(include_str!("sql/writer_lease_age.sql"), &[&key, &now])
        .await?
    else {
        return Ok(0);
    };
    let (age, holder): (i64, String) = (row.get(0), row.get(1));
    if age <= lease.as_millis() as i64 {
        return Ok(0);
    }
    let mut n = 0;
    for row in client.query(&holder_sql(key), &[]).await? {
        let pid: i32 = row.get(0);
        let done: bool = client
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .await?
            .get(0);
        n += u32::from(done);
        tracing::warn!(
            key,
            holder,
            holder_pid = pid,
            silent_ms = age,
            lease_ms = lease.as_millis() as u64,
            terminated = done,
            "writer lease expired: terminating the holder's lock session"
        );
    }
    Ok(n)
}

/// Renew the lease of `lock` every [`BEAT`] until `stop`. A renewal that finds a newer epoch
/// (deposed) ends it and fires `deposed`; a failed one is retried at the next beat.
pub async fn renew(pool: PgPool, key: i64, epoch: i64, deposed: CancellationToken) {
    let mut tick = tokio::time::interval(BEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = deposed.cancelled() => return,
        }
        let now = UnixMs::now().0;
        let outcome = async {
            let c = pool.get().await?;
            let sql = c
                .prepare_cached(include_str!("sql/writer_epoch_renew.sql"))
                .await?;
            Ok::<_, PgError>(c.query_opt(&sql, &[&key, &epoch, &now]).await?)
        }
        .await;
        match outcome {
            Ok(Some(_)) => {}
            Ok(None) => {
                tracing::warn!(key, epoch, "writer deposed: a newer epoch holds the lock");
                deposed.cancel();
                return;
            }
            Err(e) => tracing::warn!(key, epoch, error = %e, "writer lease renewal failed"),
        }
    }
}

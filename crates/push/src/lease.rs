//! The leader's heartbeat as a lease. A frozen leader (SIGSTOP, a paused VM) keeps its Postgres
//! session, and so its lock, forever: its kernel still ACKs keepalives. While the standby waits
//! for the lock it watches the leader's heartbeat; when it is older than the lease, it terminates
//! the backend that holds the slot's lock (`pg_terminate_backend`), so its own lock wait
//! succeeds and it bumps the epoch. The old leader, if it ever wakes, finds its session gone, is
//! fenced by the epoch, and exits 75.

use std::convert::Infallible;
use std::time::Duration;

use pmw_core::lock::holder_sql;
use pmw_core::pg::PgPool;
use pmw_core::UnixMs;

/// How old the leader's last sign of life (`beat_ms`, or its takeover) is, in ms: `None` when
/// there is no leader on record.
const LEADER_AGE: &str = include_str!("sql/leader_beat_age.sql");

/// Watch the lease until dropped (the caller's lock wait wins, or shutdown comes).
pub async fn watch(pool: &PgPool, slot: i16, lock_key: i64, lease: Duration) -> Infallible {
    let every = (lease / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = check(pool, slot, lock_key, lease).await {
            tracing::warn!(error = %e, "leader lease check failed");
        }
    }
}

async fn check(
    pool: &PgPool,
    slot: i16,
    lock_key: i64,
    lease: Duration,
) -> Result<(), pmw_core::pg::PgError> {
    let client = pool.get().await?;
    let now = UnixMs::now().0;
    let Some(age) = client
        .query_opt(LEADER_AGE, &[&slot, &now])
        .await?
        .and_then(|r| r.get::<_, Option<i64>>(0))
    else {
        return Ok(());
    };
    if age <= lease.as_millis() as i64 {
        return Ok(());
    }
    for row in client.query(&holder_sql(lock_key), &[]).await? {
        let pid: i32 = row.get(0);
        let done: bool = client
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .await?
            .get(0);
        tracing::warn!(
            slot,
            holder_pid = pid,
            leader_silent_ms = age,
            lease_ms = lease.as_millis() as u64,
            terminated = done,
            "leader lease expired: terminating the lock holder's session"
        );
    }
    Ok(())
}

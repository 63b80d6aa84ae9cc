//! Writer locks: a session-level advisory lock held on a dedicated, unpooled session, waited for
//! in segments (`lock_timeout`, retry on 55P03 in the same session) so the waiting session never
//! pins `backend_xmin` for longer than one segment. Losing the session means losing the lock.
//! A single writer (live, stats) then takes the lock's next epoch (`writer_epochs`), which its
//! fenced writes carry ([`fence_sql`]), or which run on the lock session itself
//! ([`LockSession`], [`own_fence_sql`]).

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_util::sync::CancellationToken;

use crate::config::CoreConfig;
use crate::pg::{self, PgError, Session};

/// `pmw_lock_waiting{lock}`: 1 while this process waits for a writer lock (the standby), else 0.
pub const LOCK_WAITING: &str = "pmw_lock_waiting";
/// `pmw_lock_wait_segments_total{lock}`: `lock_timeout` segments waited for a writer lock.
pub const LOCK_WAIT_SEGMENTS: &str = "pmw_lock_wait_segments_total";

/// Advisory lock keys (one namespace per database).
pub mod keys {
    /// The single ingest writer.
    pub const LIVE: i64 = 7_001;
    /// The stats writer.
    pub const STATS: i64 = 7_002;
    /// Push leader of slot 0 (`PUSH_BASE + slot` for K slots).
    pub const PUSH_BASE: i64 = 7_100;
    /// Transaction lock serialising API instances publishing `plans` at start.
    pub const PLANS: i64 = 7_003;
}

/// A held writer lock. Dropping it closes the session, which releases the lock (once a
/// [`LockSession`] statement in flight, if any, has ended).
pub struct WriterLock {
    /// The only strong reference: [`LockSession`] handles are weak, so once this lock is
    /// released or dropped no statement can reach the session any more.
    session: Arc<Session>,
    key: i64,
    pid: i32,
    /// The epoch taken with [`WriterLock::take_epoch`]; 0 (fences nothing through) before.
    epoch: i64,
}

impl WriterLock {
    /// Wait for `key` on a new dedicated session, in segments of `segment`. Returns `Ok(None)`
    /// when `shutdown` fires first. Any error (including the session's loss) is returned.
    pub async fn acquire(
        cfg: &CoreConfig,
        application_name: &str,
        key: i64,
        segment: Duration,
        shutdown: &CancellationToken,
    ) -> Result<Option<WriterLock>, PgError> {
        let session = pg::dedicated(cfg, application_name).await?;
        let pid: i32 = session
            .client
            .query_one("SELECT pg_backend_pid()", &[])
            .await?
            .get(0);
        // SET cannot take a bind parameter; the value is an integer we format ourselves.
        let ms = segment.as_millis().max(1);
        session
            .client
            .batch_execute(&format!("SET lock_timeout = {ms}"))
            .await?;
        let mut segments = 0u64;
        // Lock waits: `pmw_lock_waiting{lock}` 1 while waiting, segments waited as a counter.
        let lock_label = [("lock", application_name.to_string())];
        metrics::gauge!(LOCK_WAITING, &lock_label).set(1.0);
        loop {
            // Its own autocommit statement: when it times out its snapshot is released.
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&key];
            let outcome = tokio::select! {
                r = session.client.execute("SELECT pg_advisory_lock($1)", &params) => r,
                _ = shutdown.cancelled() => return Ok(None),
            };
            match outcome {
                Ok(_) => {
                    metrics::gauge!(LOCK_WAITING, &lock_label).set(0.0);
                    tracing::info!(key, pid, segments, "writer lock acquired");
                    for_writes(&session, cfg).await?;
                    return Ok(Some(WriterLock {
                        session: Arc::new(session),
                        key,
                        pid,
                        epoch: 0,
                    }));
                }
                Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                    segments += 1;
                    metrics::counter!(LOCK_WAIT_SEGMENTS, &lock_label).increment(1);
                    tracing::debug!(key, segments, "writer lock wait segment elapsed");
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Try once without waiting.
    pub async fn try_acquire(
        cfg: &CoreConfig,
        application_name: &str,
        key: i64,
    ) -> Result<Option<WriterLock>, PgError> {
        let session = pg::dedicated(cfg, application_name).await?;
        let row = session
            .client
            .query_one("SELECT pg_try_advisory_lock($1), pg_backend_pid()", &[&key])
            .await?;
        let (got, pid): (bool, i32) = (row.get(0), row.get(1));
        if !got {
            return Ok(None);
        }
        for_writes(&session, cfg).await?;
        Ok(Some(WriterLock {
            session: Arc::new(session),
            key,
            pid,
            epoch: 0,
        }))
    }

    /// Backend pid of the lock session.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Take the lock's next epoch for `holder` (recording this session's pid and backend start
    /// in `writer_epochs`), on the lock session: from now on the predecessor's fenced writes
    /// fail, and ours carry [`WriterLock::epoch`].
    pub async fn take_epoch(&mut self, holder: &str) -> Result<i64, PgError> {
        let now = crate::UnixMs::now().0;
        let epoch: i64 = self
            .session
            .client
            .query_one(
                include_str!("sql/writer_epoch_bump.sql"),
                &[&self.key, &holder, &now],
            )
            .await?
            .get(0);
        self.epoch = epoch;
        tracing::info!(key = self.key, epoch, pid = self.pid, "writer epoch taken");
        Ok(epoch)
    }

    /// The epoch this holder's fenced writes carry (see [`fence_sql`]).
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    pub fn key(&self) -> i64 {
        self.key
    }

    /// Cancelled when the lock session is gone: the lock is lost, stop writing.
    pub fn lost(&self) -> CancellationToken {
        self.session.lost()
    }

    /// The lock session for this holder's hot fenced writes ([`LockSession`]), with the epoch
    /// taken so far (take it first).
    pub fn session(&self) -> LockSession {
        LockSession {
            session: Arc::downgrade(&self.session),
            epoch: self.epoch,
        }
    }

    /// Release the lock explicitly and close the session. With a [`LockSession`] statement
    /// still in flight the session is closed instead, when that statement ends: no statement
    /// runs on it after an explicit unlock.
    pub async fn release(self) -> Result<(), PgError> {
        let Ok(session) = Arc::try_unwrap(self.session) else {
            tracing::info!(key = self.key, "writer lock released with its session");
            return Ok(());
        };
        session
            .client
            .execute("SELECT pg_advisory_unlock($1)", &[&self.key])
            .await?;
        tracing::info!(key = self.key, "writer lock released");
        Ok(())
    }
}

/// A holder's way onto its own lock session, for fenced writes on the hot path: a statement run
/// there is fenced by [`own_fence_sql`], an index probe, where [`fence_sql`] copies the
/// server's lock table and activity array on every call (0.5–9 ms under load). The session
/// holding the lock is the proof that it is held: the lock ends only with the session or with
/// [`WriterLock::release`], after which this handle reaches nothing (it is weak).
#[derive(Clone)]
pub struct LockSession {
    session: Weak<Session>,
    epoch: i64,
}

impl LockSession {
    /// The session while the lock is held; `None` once released (the lock is lost: stop).
    pub fn get(&self) -> Option<Arc<Session>> {
        self.session.upgrade().filter(|s| !s.is_lost())
    }

    /// The epoch this holder's writes carry.
    pub fn epoch(&self) -> i64 {
        self.epoch
    }
}

/// Once the lock is held, the session's statements get the pooled sessions' timeouts
/// ([`pg::pooled_session_options`]): its hot writes must not wait for a lock, or run, forever.
async fn for_writes(session: &Session, cfg: &CoreConfig) -> Result<(), PgError> {
    let sql = format!(
        "SET lock_timeout = {}; SET statement_timeout = {}",
        cfg.postgres_lock_timeout_ms, cfg.postgres_statement_timeout_ms
    );
    session.client.batch_execute(&sql).await?;
    Ok(())
}

/// The backend pids holding advisory lock `key` in the current database (one at most): what a
/// standby terminates when the holder's lease ran out.
pub fn holder_sql(key: i64) -> String {
    with_key(include_str!("sql/lock_holder.sql"), key)
}

/// A SQL predicate true only while epoch `$epoch_param` (a bigint, [`WriterLock::epoch`]) is
/// lock `key`'s current epoch and the session that took it (its pid and backend start) still
/// holds the lock: add it to a write's WHERE clause so a writer that lost its lock, or was
/// deposed (a successor took a newer epoch, on this primary or a promoted one), writes nothing.
/// It is spliced into other statements, so its file has no comment line and it is returned as
/// one line.
pub fn fence_sql(key: i64, epoch_param: &str) -> String {
    let one_line = include_str!("sql/lock_fence.sql")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    with_key(&one_line, key)
        .replace("{key}", &key.to_string())
        .replace("{epoch}", epoch_param)
}

/// [`fence_sql`] for a statement run on the lock session itself ([`LockSession`]): true only
/// while epoch `$epoch_param` is lock `key`'s current epoch and this session took it. That this
/// session still runs is what proves the lock held (it ends only with the session, or with
/// [`WriterLock::release`], after which the session is unreachable), so the lock table is not
/// read. Spliced into other statements: one line.
pub fn own_fence_sql(key: i64, epoch_param: &str) -> String {
    include_str!("sql/lock_fence_own.sql")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("{key}", &key.to_string())
        .replace("{epoch}", epoch_param)
}

/// `sql` with advisory lock `key`'s halves (as `pg_locks` shows them) in `{classid}`, `{objid}`.
fn with_key(sql: &str, key: i64) -> String {
    let classid = (key >> 32) as u32;
    let objid = (key & 0xffff_ffff) as u32;
    sql.replace("{classid}", &classid.to_string())
        .replace("{objid}", &objid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(sql: &str) -> String {
        sql.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn key_halves_and_pid_fill_every_hole() {
        let key = (3_i64 << 32) | 7_001;
        let holder = flat(&holder_sql(key));
        let fence = flat(&fence_sql(key, "$4"));
        for sql in [&holder, &fence] {
            assert!(!sql.contains('{'), "a hole left unfilled: {sql}");
            assert!(
                sql.contains("classid = 3 AND l.objid = 7001 AND")
                    || sql.contains("classid = 3 AND objid = 7001 AND"),
                "{sql}"
            );
        }
        assert!(
            fence.starts_with("EXISTS (") && fence.ends_with("))"),
            "{fence}"
        );
        assert!(fence.contains(" w.epoch = $4 AND "), "{fence}");
        assert!(
            fence.contains(&format!("w.lock_key = {key} AND")),
            "{fence}"
        );
        assert!(!fence_sql(key, "$4").contains('\n'), "{fence}");
    }
}

//! Limits that hold for the whole fleet of processes serving `/v1/ws` (push's leader and every
//! pmw-edge), kept in Postgres (migration 0018), which every one of them already uses; touched
//! only when a session connects, authenticates or closes, never on the delivery path:
//!
//! - a session lease per open session ([`Fleet::lease`]): an account's session cap counts its
//!   unexpired leases fleet-wide; this process's upkeep ([`Fleet::upkeep`]) renews its leases
//!   every [`RENEW_EVERY`], so a crashed process's sessions stop counting within [`LEASE_TTL`];
//! - shared GCRA limits ([`Fleet::take`]): an account's connects and a client address's failed
//!   authentications, one upsert each.
//!
//! When Postgres does not answer, nothing is admitted (fail closed): the caller refuses the
//! connect with "try again later" (503 before the upgrade, 1013 after it).
//!
//! The same upkeep watches the hub's view of keys and subscriptions: a view older than the
//! configured bound closes every session with 1013 ([`crate::hub::Hub::close_if_stale`]), so a
//! revoked key never keeps streaming from a process that cannot see the revocation.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pmw_core::pg::{PgError, PgPool};
use tokio_util::sync::CancellationToken;

use crate::hub::Hub;

/// How long a lease counts without renewal: a crashed process's sessions free themselves
/// within it.
pub const LEASE_TTL: Duration = Duration::from_secs(30);
/// How often the upkeep renews this process's leases (and checks its view's age every second).
pub const RENEW_EVERY: Duration = Duration::from_secs(10);

/// Shared limits' scopes.
pub const CONNECTS: &str = "ws_connect";
pub const AUTH_FAILURES: &str = "ws_auth_failure";

/// A shared rate: `per_sec` a second, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub per_sec: u32,
    pub burst: u32,
}

impl Rate {
    /// The GCRA emission interval in ms (at least 1).
    fn interval_ms(self) -> i64 {
        (1_000 / i64::from(self.per_sec.max(1))).max(1)
    }
}

/// Why a fleet check refused.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// Over the shared limit; retry after this long.
    #[error("over the limit; retry in {0:?}")]
    Limited(Duration),
    /// The account has its plan's number of sessions open across the fleet.
    #[error("session limit reached: the plan allows {0} WebSocket sessions")]
    Full(u32),
    /// Postgres did not answer: nothing is admitted.
    #[error("limits store unavailable: {0}")]
    Store(String),
}

impl From<tokio_postgres::Error> for FleetError {
    fn from(e: tokio_postgres::Error) -> Self {
        FleetError::Store(pmw_core::pg::describe(&e))
    }
}

impl From<PgError> for FleetError {
    fn from(e: PgError) -> Self {
        FleetError::Store(e.to_string())
    }
}

/// This process's view of the fleet limits: its holder name and its open leases.
#[derive(Clone)]
pub struct Fleet {
    pool: PgPool,
    holder: Arc<str>,
    next: Arc<AtomicI64>,
    open: Arc<Mutex<HashSet<i64>>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fleet({})", self.holder)
    }
}

/// An open session's lease: released (best effort; the upkeep drops what it missed) on drop.
#[derive(Debug)]
pub struct Lease {
    fleet: Fleet,
    id: i64,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.fleet.open.lock().expect("leases").remove(&self.id);
        let (pool, holder, id) = (self.fleet.pool.clone(), self.fleet.holder.clone(), self.id);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Ok(c) = pool.get().await {
                    let release = include_str!("sql/lease_release.sql");
                    let _ = c.execute(release, &[&&*holder, &id]).await;
                }
            });
        }
    }
}

impl Fleet {
    /// A holder unique to this process and this server (two in one test process differ).
    pub fn new(pool: PgPool) -> Fleet {
        static SERVERS: AtomicI64 = AtomicI64::new(0);
        let n = SERVERS.fetch_add(1, Ordering::Relaxed);
        let holder = format!("{}-{}-{}", std::process::id(), pmw_core::UnixMs::now().0, n);
        Fleet {
            pool,
            holder: holder.into(),
            next: Arc::default(),
            open: Arc::default(),
        }
    }

    /// The name this process's leases carry.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// A lease for a new session of `account`, refused when the account already holds `max`
    /// unexpired leases fleet-wide (`None`: no cap).
    pub async fn lease(&self, account: i64, max: Option<u32>) -> Result<Lease, FleetError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut c = self.pool.get().await.map_err(PgError::from)?;
        let tx = c.transaction().await?;
        tx.execute(include_str!("sql/lease_lock.sql"), &[&account])
            .await?;
        let ttl = LEASE_TTL.as_millis() as i64;
        let cap = max.map(i64::from);
        let took = tx
            .query_opt(
                include_str!("sql/lease_take.sql"),
                &[&&*self.holder, &id, &account, &cap, &ttl],
            )
            .await?;
        tx.commit().await?;
        match took {
            Some(_) => {
                self.open.lock().expect("leases").insert(id);
                Ok(Lease {
                    fleet: self.clone(),
                    id,
                })
            }
            None => Err(FleetError::Full(max.unwrap_or(0))),
        }
    }

    /// Take one request of `scope` for `key` from the shared `rate`.
    pub async fn take(&self, scope: &str, key: &str, rate: Rate) -> Result<(), FleetError> {
        let c = self.pool.get().await.map_err(PgError::from)?;
        let row = c
            .query_one(
                include_str!("sql/rate_take.sql"),
                &[
                    &scope,
                    &key,
                    &rate.interval_ms(),
                    &i64::from(rate.burst.max(1)),
                ],
            )
            .await?;
        if row.get::<_, bool>(0) {
            return Ok(());
        }
        let wait: i64 = row.get(1);
        Err(FleetError::Limited(Duration::from_millis(
            wait.max(0) as u64
        )))
    }

    /// Renew this process's leases (dropping any it no longer holds) and purge what no longer
    /// counts.
    async fn renew(&self) -> Result<(), FleetError> {
        let open: Vec<i64> = self.open.lock().expect("leases").iter().copied().collect();
        let c = self.pool.get().await.map_err(PgError::from)?;
        let ttl = LEASE_TTL.as_millis() as i64;
        c.execute(
            include_str!("sql/lease_renew.sql"),
            &[&&*self.holder, &open, &ttl],
        )
        .await?;
        c.execute(include_str!("sql/lease_purge.sql"), &[]).await?;
        Ok(())
    }

    /// Until `stop`: renew the leases every [`RENEW_EVERY`], and every second close `hub`'s
    /// sessions (1013) once its view is older than `stale_after`. On stop, this process's
    /// leases are dropped.
    pub async fn upkeep(self, hub: Hub, stale_after: Duration, stop: CancellationToken) {
        let mut renewed = tokio::time::Instant::now();
        loop {
            if renewed.elapsed() >= RENEW_EVERY {
                match self.renew().await {
                    Ok(()) => renewed = tokio::time::Instant::now(),
                    Err(e) => tracing::warn!(error = %e, "session leases not renewed"),
                }
            }
            let closed = hub.close_if_stale(stale_after);
            if closed > 0 {
                tracing::warn!(
                    closed,
                    stale_after_ms = stale_after.as_millis() as u64,
                    "view of keys and subscriptions is stale: sessions closed (1013)"
                );
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.cancelled() => break,
            }
        }
        self.open.lock().expect("leases").clear();
        if let Ok(c) = self.pool.get().await {
            let ttl = LEASE_TTL.as_millis() as i64;
            let none: Vec<i64> = Vec::new();
            let renew = include_str!("sql/lease_renew.sql");
            let _ = c.execute(renew, &[&&*self.holder, &none, &ttl]).await;
        }
    }
}

/// The key an address's failed authentications are counted by: an IPv4 address, an IPv6 /64.
pub fn address_key(ip: IpAddr) -> String {
    pmw_core::client::address_unit(ip).to_string()
}

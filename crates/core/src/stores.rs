//! Opening a service's stores at start-up: Postgres pool and ClickHouse client, reachable and
//! carrying exactly the schema this build knows (otherwise exit 78); the delivery path's
//! services wait for Postgres when it is down instead of exiting, and start without ClickHouse.

use tokio_util::sync::CancellationToken;

use crate::backoff::{Backoff, Policy};
use crate::ch::{self, ChClient};
use crate::config::CoreConfig;
use crate::exit::ServiceError;
use crate::migrate::{self, SchemaError};
use crate::pg::{self, PgPool};

/// How long the delivery path's start-up waits for ClickHouse's schema check.
const CH_START_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// The shared stores handles of one service process.
#[derive(Clone)]
pub struct Stores {
    pub pg: PgPool,
    pub ch: ChClient,
}

impl Stores {
    /// Connect both stores and check the schema version. Unreachable stores are transient (75),
    /// an unknown schema is a configuration error (78).
    pub async fn open(cfg: &CoreConfig, service: &str) -> Result<Stores, ServiceError> {
        let (pool, ch) = clients(cfg, service)?;
        let client = postgres_now(&pool).await?;
        migrate::check_schema(&**client, &ch).await?;
        drop(client);
        tracing::info!(service, "schema checked");
        Ok(Stores { pg: pool, ch })
    }

    /// [`Stores::open`] for pmw-api: Postgres must answer now (75 otherwise), ClickHouse need not
    /// (its schema is checked once it answers): the API's accounts, keys, subscriptions and
    /// webhooks live in Postgres, and only history older than the hot window reads ClickHouse.
    pub async fn open_postgres_first(
        cfg: &CoreConfig,
        service: &'static str,
        shutdown: &CancellationToken,
    ) -> Result<Stores, ServiceError> {
        let (pool, ch) = clients(cfg, service)?;
        let client = postgres_now(&pool).await?;
        migrate::check_pg_schema(&**client).await?;
        drop(client);
        clickhouse_or_watch(&ch, service, shutdown).await?;
        Ok(Stores { pg: pool, ch })
    }

    /// [`Stores::open`] for the delivery path (push and live), waiting (the store policy of
    /// [`crate::backoff`], logged) while Postgres is unreachable, until shutdown. A process
    /// that exits 75 while a store is down is restarted by pm2 after a delay that grows with
    /// each exit (up to 15 s), so the store could be back for seconds before the service tried
    /// again (seed 10149: a push pair crash-looping through a ClickHouse outage came back 7 s
    /// after ClickHouse did). Waiting in-process notices a store that is back within a second.
    ///
    /// ClickHouse is off the delivery path (the hot ledger, docs/ARCHITECTURE.md §3.2), so it does not hold
    /// the start up: its schema is checked now when it answers, otherwise in the background
    /// once it does ([`watch_clickhouse_schema`]), and the service starts without it (a leader
    /// killed or deployed during a ClickHouse outage leads again at once).
    /// `None`: shutdown came while waiting (a clean stop).
    pub async fn open_waiting(
        cfg: &CoreConfig,
        service: &'static str,
        shutdown: &CancellationToken,
    ) -> Result<Option<Stores>, ServiceError> {
        let (pool, ch) = clients(cfg, service)?;
        let mut backoff = Backoff::new(Policy::STORE);
        loop {
            let checked = match postgres_now(&pool).await {
                Ok(client) => migrate::check_pg_schema(&**client)
                    .await
                    .map_err(ServiceError::from),
                Err(e) => Err(e),
            };
            match checked {
                Ok(()) => break,
                Err(ServiceError::Transient(why)) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(service, error = %why, retry_in_ms = wait.as_millis() as u64, failures = backoff.failures(), "postgres unreachable at start; waiting");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = shutdown.cancelled() => return Ok(None),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        clickhouse_or_watch(&ch, service, shutdown).await?;
        Ok(Some(Stores { pg: pool, ch }))
    }
}

/// Both stores' clients (nothing connects yet); a malformed Postgres setting is a
/// configuration error (78).
fn clients(cfg: &CoreConfig, service: &str) -> Result<(PgPool, ChClient), ServiceError> {
    let pool = pg::pool(cfg, service).map_err(|e| ServiceError::Config(e.to_string()))?;
    Ok((pool, ch::client(cfg)))
}

/// A Postgres connection now, or the transient error (75) that names it unreachable.
async fn postgres_now(pool: &PgPool) -> Result<deadpool_postgres::Object, ServiceError> {
    pool.get()
        .await
        .map_err(|e| ServiceError::transient(format!("postgres unreachable: {e}")))
}

/// Check ClickHouse's schema now when it answers within [`CH_START_CHECK`]; otherwise start
/// without it and check in the background ([`watch_clickhouse_schema`]). An unknown schema
/// that answers now is refused (78).
async fn clickhouse_or_watch(
    ch: &ChClient,
    service: &'static str,
    shutdown: &CancellationToken,
) -> Result<(), ServiceError> {
    // A frozen ClickHouse (a paused VM) accepts and never answers: bounded like a refusal.
    let why = match tokio::time::timeout(CH_START_CHECK, migrate::check_ch_schema(ch)).await {
        Ok(Ok(())) => {
            tracing::info!(service, "schema checked");
            return Ok(());
        }
        Ok(Err(SchemaError::ClickHouse(e))) => e.to_string(),
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => format!("no answer within {} ms", CH_START_CHECK.as_millis()),
    };
    tracing::warn!(service, error = %why, "clickhouse unreachable at start; starting without it (off the delivery path), its schema is checked once it answers");
    tokio::spawn(watch_clickhouse_schema(
        ch.clone(),
        service,
        shutdown.clone(),
    ));
    Ok(())
}

/// Check ClickHouse's schema once it answers (the store policy between tries, until shutdown).
/// A schema this build does not know is the deploy error start-up refuses with 78, found late:
/// the process stops with 78 at once (its supervisor does not restart it; every cursor is
/// fenced, so an abrupt stop loses nothing).
pub async fn watch_clickhouse_schema(
    ch: ChClient,
    service: &'static str,
    shutdown: CancellationToken,
) {
    let mut backoff = Backoff::new(Policy::STORE);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(backoff.next_wait()) => {}
            _ = shutdown.cancelled() => return,
        }
        let checked = tokio::select! {
            c = tokio::time::timeout(CH_START_CHECK, migrate::check_ch_schema(&ch)) => c,
            _ = shutdown.cancelled() => return,
        };
        match checked {
            Ok(Ok(())) => {
                tracing::info!(service, "clickhouse answers; schema checked");
                return;
            }
            Ok(Err(SchemaError::ClickHouse(_))) | Err(_) => {}
            Ok(Err(e)) => {
                tracing::error!(service, error = %e, "clickhouse schema refused; stopping (78)");
                std::process::exit(i32::from(crate::exit::CONFIG));
            }
        }
    }
}

//! Opening a service's stores at start-up: Postgres pool and ClickHouse client, reachable and
//! carrying exactly the schema this build knows (otherwise exit 78); the delivery path's
//! services wait for a store that is down instead of exiting.

use tokio_util::sync::CancellationToken;

use crate::backoff::{Backoff, Policy};
use crate::ch::{self, ChClient};
use crate::config::CoreConfig;
use crate::exit::ServiceError;
use crate::migrate;
use crate::pg::{self, PgPool};

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
        let pool = pg::pool(cfg, service).map_err(|e| ServiceError::Config(e.to_string()))?;
        let ch = ch::client(cfg);
        let client = pool
            .get()
            .await
            .map_err(|e| ServiceError::transient(format!("postgres unreachable: {e}")))?;
        migrate::check_schema(&**client, &ch).await?;
        drop(client);
        tracing::info!(service, "schema checked");
        Ok(Stores { pg: pool, ch })
    }

    /// [`Stores::open`], waiting (the store policy of [`crate::backoff`], logged) while a store
    /// is unreachable, until shutdown. For push and live: a process that exits 75 while
    /// ClickHouse or Postgres is down is restarted by pm2 after a delay that grows with each
    /// exit (up to 15 s), so the store could be back for seconds before the service tried
    /// again (seed 10149: a push pair crash-looping through a ClickHouse outage came back 7 s
    /// after ClickHouse did). Waiting in-process notices a store that is back within a second.
    /// `None`: shutdown came while waiting (a clean stop).
    pub async fn open_waiting(
        cfg: &CoreConfig,
        service: &str,
        shutdown: &CancellationToken,
    ) -> Result<Option<Stores>, ServiceError> {
        let mut backoff = Backoff::new(Policy::STORE);
        loop {
            match Stores::open(cfg, service).await {
                Err(ServiceError::Transient(why)) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(service, error = %why, retry_in_ms = wait.as_millis() as u64, failures = backoff.failures(), "stores unreachable at start; waiting");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = shutdown.cancelled() => return Ok(None),
                    }
                }
                other => return other.map(Some),
            }
        }
    }
}

//! Opening a service's stores at start-up: Postgres pool and ClickHouse client, reachable and
//! carrying exactly the schema this build knows (otherwise exit 78).

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
}

//! How readiness asks the stores: every probe bounded in time, its failure a reason (text).

use std::future::Future;
use std::time::Duration;

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::AppState;

/// Each readiness probe of a store gives up after this long.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// `f`'s answer within [`PROBE_TIMEOUT`], or why there is none.
pub async fn bounded<T, E: std::fmt::Display>(
    f: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(PROBE_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} ms", PROBE_TIMEOUT.as_millis())),
    }
}

/// The rows of a Postgres probe, or why there are none.
pub async fn rows(st: &AppState, sql: &str, params: &[i64]) -> Result<Vec<Row>, String> {
    bounded(async {
        let c = st.ready_pg.get().await.map_err(|e| e.to_string())?;
        c.query(sql, &as_params(params))
            .await
            .map_err(|e| e.to_string())
    })
    .await
}

/// One row of a Postgres probe, or why there is none.
pub async fn probe(st: &AppState, sql: &str, params: &[i64]) -> Result<Option<Row>, String> {
    bounded(async {
        let c = st.ready_pg.get().await.map_err(|e| e.to_string())?;
        c.query_opt(sql, &as_params(params))
            .await
            .map_err(|e| e.to_string())
    })
    .await
}

fn as_params(params: &[i64]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

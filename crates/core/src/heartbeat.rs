//! Service heartbeats in Postgres (`heartbeats`, a tiny HOT-updated table) for status and readiness.

use crate::pg::PgPool;
use crate::types::UnixMs;

/// One instance's heartbeat row.
#[derive(Clone)]
pub struct Heartbeat {
    pool: PgPool,
    service: String,
    instance: String,
    started_ms: i64,
}

impl Heartbeat {
    pub fn new(pool: PgPool, service: &str, instance: &str) -> Heartbeat {
        Heartbeat {
            pool,
            service: service.into(),
            instance: instance.into(),
            started_ms: UnixMs::now().0,
        }
    }

    /// Upsert this instance's row with a fresh beat and `state` (plus `revision`: the build's
    /// git revision, [`crate::build_info::REVISION`]; and `secret_keys`: whether it runs with
    /// `PMW_SECRET_KEYS`, which `pmwctl status` warns about).
    pub async fn beat(&self, state: &serde_json::Value) -> Result<(), crate::pg::PgError> {
        let mut state = state.clone();
        if let Some(o) = state.as_object_mut() {
            o.insert("revision".into(), crate::build_info::REVISION.into());
            let keys = crate::sealed::keyring().is_some();
            o.insert("secret_keys".into(), keys.into());
        }
        let client = self.pool.get().await?;
        client
            .execute(
                include_str!("sql/heartbeat_upsert.sql"),
                &[
                    &self.service,
                    &self.instance,
                    &(std::process::id() as i32),
                    &self.started_ms,
                    &UnixMs::now().0,
                    &tokio_postgres::types::Json(&state),
                ],
            )
            .await?;
        Ok(())
    }
}

/// The warnings pmw-live's provider quorum facts (its heartbeat's `rpc_quorum`) warrant, as
/// `pmwctl status` and `/v1/ready` give them: a single provider, a wait for a quorum. None for
/// `null` (before live reports them).
pub fn rpc_quorum_warnings(q: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    if q["providers"].as_u64() == Some(1) {
        out.push(
            "one RPC provider: its word alone makes blocks and fills (configure three with a quorum of 2; README: provider quorum)"
                .into(),
        );
    }
    let w = &q["waiting"];
    if !w.is_null() {
        out.push(format!(
            "ingest waits for a quorum of RPC providers on block {}: {} of {} agree (quorum {})",
            w["block"], w["agree"], w["asked"], q["quorum"]
        ));
    }
    out
}

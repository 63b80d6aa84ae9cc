//! What readiness reports: one [`Check`] per probe, the [`Checks`] of a verdict and the
//! [`Readiness`] they add up to (which checks gate it, which only warn).

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::error::ErrorDetail;

/// One readiness check.
#[derive(Debug, Serialize, ToSchema)]
pub struct Check {
    pub ok: bool,
    /// Why not, when not ok.
    pub reason: Option<String>,
    /// Measurements behind the verdict (`null` when there are none, e.g. a store unreachable).
    #[schema(schema_with = detail_schema)]
    pub detail: Value,
}

/// `Check.detail`: an object of measurements, a list (`revisions`), or `null`.
fn detail_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{SchemaType, Type};
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([
            Type::Object,
            Type::Array,
            Type::Null,
        ]))
        .description(Some(
            "Measurements behind the verdict: an object, a list (`revisions`), or `null` when \
             there are none (e.g. a store unreachable).",
        ))
        .build()
}

impl Check {
    pub fn pass(detail: Value) -> Check {
        Check {
            ok: true,
            reason: None,
            detail,
        }
    }
    pub fn fail(reason: String, detail: Value) -> Check {
        Check {
            ok: false,
            reason: Some(reason),
            detail,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Checks {
    pub postgres: Check,
    /// ClickHouse answers. Never gating: delivery reads the Postgres hot ledger; REST history
    /// older than the hot window and the dashboard wait while it is down.
    pub clickhouse: Check,
    /// pmw-live holds the writer lock, beats, and keeps up with the chain head.
    pub ingest: Check,
    pub push: Check,
    /// The webhook dispatcher claims what is due.
    pub webhooks: Check,
    pub latency: Check,
    /// A push standby waits on the lock (a fresh `standby` heartbeat). Failing it does not make
    /// the service unready: the leader serves, but it is a single point of failure.
    pub push_standby: Check,
    /// A pmw-live standby waits on the live writer lock (issue 44). Never gating.
    pub live_standby: Check,
    /// A pmw-stats standby waits on the stats writer lock (issue 44). Never gating.
    pub stats_standby: Check,
    /// pmw-stats beats (the dashboard's writer). Never gating.
    pub stats: Check,
    /// Every live instance runs the same build revision (`detail` lists them). Never gating.
    pub revisions: Check,
    /// Every index of pmw's schema is valid and ready (`detail.broken` lists those that are
    /// not). Never gating.
    pub indexes: Check,
    /// ClickHouse is at most a minute behind the Postgres hot ledger (the projector's lag).
    /// Never gating: delivery does not read ClickHouse.
    pub projector: Check,
    /// More than one RPC provider, and no wait for a quorum of them on a block (`detail`:
    /// pmw-live's quorum facts). Never gating: a single provider works, unguarded.
    pub rpc_providers: Check,
    /// No contract outside pmw-live's exchange list emitted Polymarket fill or match events
    /// (`detail`: the count and the most recently seen). Never gating: their logs are never
    /// delivered; an operator checks each and lists a real exchange.
    pub unlisted_emitters: Check,
}

/// The readiness verdict. When not ready, `error` carries the reasons (503).
#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    pub ready: bool,
    pub checks: Checks,
    /// Reasons of the failed checks that do not flip readiness (a missing push standby, a stale
    /// pmw-stats); empty when there are none.
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

impl Readiness {
    /// The verdict of a set of checks: ready unless a gating check failed (the reasons, joined,
    /// are the error); the non-gating ones' reasons are warnings.
    pub fn of(checks: Checks) -> Readiness {
        let warnings: Vec<String> = [
            &checks.clickhouse,
            &checks.push_standby,
            &checks.live_standby,
            &checks.stats_standby,
            &checks.stats,
            &checks.revisions,
            &checks.indexes,
            &checks.projector,
            &checks.rpc_providers,
            &checks.unlisted_emitters,
        ]
        .iter()
        .filter_map(|c| c.reason.clone())
        .collect();
        let reasons: Vec<&str> = [
            &checks.postgres,
            &checks.ingest,
            &checks.push,
            &checks.webhooks,
            &checks.latency,
        ]
        .iter()
        .filter_map(|c| c.reason.as_deref())
        .collect();
        if reasons.is_empty() {
            return Readiness {
                ready: true,
                checks,
                warnings,
                error: None,
            };
        }
        let error = Some(ErrorDetail {
            code: "not_ready".into(),
            message: reasons.join("; "),
        });
        Readiness {
            ready: false,
            checks,
            warnings,
            error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_pass() -> Checks {
        let ok = || Check::pass(Value::Null);
        Checks {
            postgres: ok(),
            clickhouse: ok(),
            ingest: ok(),
            push: ok(),
            webhooks: ok(),
            latency: ok(),
            push_standby: ok(),
            live_standby: ok(),
            stats_standby: ok(),
            stats: ok(),
            revisions: ok(),
            indexes: ok(),
            projector: ok(),
            rpc_providers: ok(),
            unlisted_emitters: ok(),
        }
    }

    #[test]
    fn ready_when_every_check_passes() {
        let r = Readiness::of(all_pass());
        assert!(r.ready && r.error.is_none() && r.warnings.is_empty());
    }

    #[test]
    fn a_failed_gating_check_makes_it_unready_with_every_reason() {
        let mut checks = all_pass();
        checks.ingest = Check::fail("ingest behind".into(), Value::Null);
        checks.latency = Check::fail("too slow".into(), Value::Null);
        let r = Readiness::of(checks);
        assert!(!r.ready);
        let e = r.error.expect("an error");
        assert_eq!(e.code, "not_ready");
        assert_eq!(e.message, "ingest behind; too slow");
    }

    #[test]
    fn clickhouse_standby_stats_revisions_and_indexes_only_warn() {
        let mut checks = all_pass();
        checks.clickhouse = Check::fail("clickhouse unreachable".into(), Value::Null);
        checks.push_standby = Check::fail("no standby".into(), Value::Null);
        checks.live_standby = Check::fail("no live standby".into(), Value::Null);
        checks.stats_standby = Check::fail("no stats standby".into(), Value::Null);
        checks.stats = Check::fail("stale stats".into(), Value::Null);
        checks.revisions = Check::fail("two builds".into(), Value::Null);
        checks.indexes = Check::fail("index x invalid".into(), Value::Null);
        checks.projector = Check::fail("clickhouse behind".into(), Value::Null);
        checks.rpc_providers = Check::fail("one RPC provider".into(), Value::Null);
        checks.unlisted_emitters = Check::fail("1 unlisted contract".into(), Value::Null);
        let r = Readiness::of(checks);
        assert!(r.ready && r.error.is_none());
        assert_eq!(
            r.warnings,
            [
                "clickhouse unreachable",
                "no standby",
                "no live standby",
                "no stats standby",
                "stale stats",
                "two builds",
                "index x invalid",
                "clickhouse behind",
                "one RPC provider",
                "1 unlisted contract"
            ]
        );
    }
}

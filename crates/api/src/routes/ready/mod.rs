//! `/v1/ready`: 200 when the whole push path works now, 503 with every reason otherwise.
//! Gating checks: Postgres reachable; pmw-live ingesting (a fresh writer
//! heartbeat, its watermark within `PMW_API_READY_INGEST_MAX_LAG_BLOCKS` of the newest head it
//! saw); the push leader completing rounds; no webhook delivery due and unclaimed for longer than
//! `PMW_API_READY_WEBHOOK_DUE_MAX_AGE_MS` (the dispatcher runs); the recent detect→push median
//! (WebSocket deliveries, or webhook ones when there are none; unknown while ClickHouse is
//! down). Reported in `warnings` without flipping readiness: ClickHouse unreachable (delivery
//! reads the Postgres hot ledger), no push, live or stats standby, a stale pmw-stats, services on different builds, an
//! index Postgres does not use or maintain (`pg_index.indisvalid`/`indisready` false),
//! ClickHouse more than a minute behind the Postgres hot ledger (the projector's lag), a single
//! RPC provider or ingest waiting for a quorum of providers ([`providers`]), a contract outside
//! pmw-live's exchange list that emitted Polymarket fill or match events ([`emitters`]).
//! Computed at most once per interval on a pool of its own ([`cache`]); the public (proxied)
//! answer is the status alone, the checks only for callers on the host.

mod cache;
mod check;
mod emitters;
mod indexes;
mod ingest;
mod latency;
pub mod metrics;
mod probe;
mod projector;
mod providers;
mod push;
mod services;
mod standbys;
mod webhooks;

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pmw_core::UnixMs;
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;
pub use cache::ReadyCache;
pub use check::{Check, Checks, Readiness};

/// A pmw-stats heartbeat older than this is reported (stats beats every few seconds).
const STATS_MAX_AGE_MS: i64 = 60_000;

/// What anyone may see: the verdict, without instance names, revisions or store errors.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadyStatus {
    pub ready: bool,
    /// `ready` or `not_ready`.
    #[schema(example = "ready")]
    pub status: &'static str,
}

/// The public status, or the detailed verdict for a caller on the API's host (the document's
/// schema of the two forms; the handler answers the detailed one from the shared verdict).
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum ReadyAnswer {
    Public(ReadyStatus),
    Detailed(Box<Readiness>),
}

/// Whether a proxy forwarded this request (Caddy always sets `X-Forwarded-For`). The API
/// listens on loopback only, so a request no proxy forwarded comes from the host: an operator,
/// `pmwctl`, a deploy script.
fn forwarded(headers: &HeaderMap) -> bool {
    ["x-forwarded-for", "forwarded", "x-real-ip"]
        .iter()
        .any(|h| headers.contains_key(*h))
}

/// 200 when the push path works now; 503 otherwise. Evaluated at most once per
/// `PMW_API_READY_INTERVAL_MS` ([`ReadyCache`]). Through a proxy (Caddy: the public), only the
/// status; on the API's own loopback listener, every check with its reasons and measurements
/// (a missing push standby is reported in `checks.push_standby` and `warnings` but does not
/// make it 503).
#[utoipa::path(get, path = "/v1/ready", tag = "ops",
    responses((status = 200, body = ReadyAnswer), (status = 503, body = ReadyAnswer)))]
pub async fn ready(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    let r = st.ready.get(&st).await;
    let status = if r.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    if forwarded(&headers) || !peer.ip().is_loopback() {
        let public = ReadyStatus {
            ready: r.ready,
            status: if r.ready { "ready" } else { "not_ready" },
        };
        return (status, Json(ReadyAnswer::Public(public))).into_response();
    }
    (status, Json(&*r)).into_response()
}

/// Every check, now: the verdict `/v1/ready` answers and `/metrics` exports
/// ([`metrics`]).
pub async fn evaluate(st: &AppState) -> Readiness {
    ::metrics::counter!(cache::EVALUATIONS).increment(1);
    let now = UnixMs::now().0;
    let (
        (postgres, push),
        (clickhouse, latency),
        push_standby,
        ingest,
        webhooks,
        stats,
        revisions,
        (indexes, projector, rpc_providers, unlisted_emitters),
        (live_standby, stats_standby),
    ) = tokio::join!(
        push::postgres_and_push(st, now),
        latency::clickhouse_and_latency(st, now),
        push::push_standby(st, now),
        ingest::ingest(st, now),
        webhooks::webhooks(st, now),
        services::stats(st, now, STATS_MAX_AGE_MS),
        services::revisions(st, now, STATS_MAX_AGE_MS),
        async {
            tokio::join!(
                indexes::indexes(st),
                projector::projector(st, now),
                providers::providers(st),
                emitters::unlisted_emitters(st)
            )
        },
        async { tokio::join!(standbys::live(st, now), standbys::stats(st, now)) },
    );
    let checks = Checks {
        postgres,
        clickhouse,
        ingest,
        push,
        webhooks,
        latency,
        push_standby,
        live_standby,
        stats_standby,
        stats,
        revisions,
        indexes,
        projector,
        rpc_providers,
        unlisted_emitters,
    };
    let mut r = Readiness::of(checks);
    // This process seals new webhook secrets: without keys it stores them as they are.
    r.warnings
        .extend(pmw_core::sealed::unset_warning().map(String::from));
    r
}

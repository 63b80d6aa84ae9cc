//! Authentication by API key (`Authorization: Bearer pmw_…`, checked by core's key rule,
//! [`pmw_core::auth::key_holder`]: not revoked, account not disabled) and per-account rate
//! limiting (a `governor` GCRA limiter keyed by account id, so more keys buy no more requests;
//! over the limit → 429 with `Retry-After`). Failed
//! authentications (no key, a malformed, unknown or revoked one) are limited per client address
//! at the same rate ([`pmw_core::client::FailureThrottle`], checked before the lookup): past it
//! an address gets 429 without a database lookup; a malformed key is refused without one
//! ([`pmw_core::auth::plausible`]). Requests without any key are limited per client address
//! before any other work ([`anonymous_limit`]). The client address is core's rule:
//! `X-Forwarded-For` only from `PMW_API_TRUSTED_PROXIES`.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use crate::config::ApiConfig;
use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use governor::clock::{Clock, DefaultClock, QuantaInstant};
use governor::NotUntil;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use pmw_core::auth::{key_holder, AuthError};
use pmw_core::client::FailureThrottle;

use crate::error::ApiError;
use crate::AppState;

/// Per-account limiter (keyed by account id).
pub type Limiter = DefaultKeyedRateLimiter<i64>;

/// The per-second quota of `PMW_API_RATE_PER_SEC` / `PMW_API_RATE_BURST` (validated > 0).
fn quota(cfg: &ApiConfig) -> Quota {
    let rate = NonZeroU32::new(cfg.api_rate_per_sec).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(cfg.api_rate_burst).unwrap_or(rate);
    Quota::per_second(rate).allow_burst(burst)
}

/// The per-account limiter, at [`quota`].
pub fn limiter(cfg: &ApiConfig) -> Arc<Limiter> {
    Arc::new(RateLimiter::keyed(quota(cfg)))
}

/// `POST /v1/webhooks/{id}/test` per account: `PMW_API_WEBHOOK_TEST_PER_MIN` a minute, all of
/// them at once at most.
pub fn test_limiter(cfg: &ApiConfig) -> Arc<Limiter> {
    let n = NonZeroU32::new(cfg.api_webhook_test_per_min).unwrap_or(NonZeroU32::MIN);
    Arc::new(RateLimiter::keyed(Quota::per_minute(n).allow_burst(n)))
}

/// Failed authentications per client address, at the per-account rate and burst.
pub fn failure_limiter(cfg: &ApiConfig) -> Arc<FailureThrottle> {
    let rate = NonZeroU32::new(cfg.api_rate_per_sec).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(cfg.api_rate_burst).unwrap_or(rate);
    Arc::new(FailureThrottle::new(rate, burst))
}

/// 429 with `Retry-After` for an address over its failures.
fn throttled(wait: Duration) -> ApiError {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    ApiError::address_limited(secs, "too many failed authentications")
}

/// Requests without a key per client address, at `PMW_API_ANON_RATE_PER_SEC` and its burst.
pub fn anonymous_limiter(cfg: &ApiConfig) -> Arc<FailureThrottle> {
    let rate = NonZeroU32::new(cfg.api_anon_rate_per_sec).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(cfg.api_anon_rate_burst).unwrap_or(rate);
    Arc::new(FailureThrottle::new(rate, burst))
}

/// Every request that carries no `Authorization` header is counted against its client
/// address before any other work (routing, body, store): past the limit, 429 saying the limit
/// is the address's. One address flooding `/v1/ready` or unknown routes then costs a paying
/// client's requests nothing but the 429s.
pub async fn anonymous_limit(
    axum::extract::State(st): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if !req.headers().contains_key(AUTHORIZATION) {
        let (parts, body) = req.into_parts();
        let ip = crate::client_ip::client_ip(&parts, &st.cfg.api_trusted_proxies);
        if let Err(wait) = st.anonymous.take(ip) {
            let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
            return ApiError::address_limited(secs, "too many unauthenticated requests")
                .into_response();
        }
        return next
            .run(axum::extract::Request::from_parts(parts, body))
            .await;
    }
    next.run(req).await
}

/// 429 with `Retry-After`: the limiter refused until `not_until`.
pub fn limited(not_until: NotUntil<QuantaInstant>) -> ApiError {
    let wait = not_until.wait_time_from(DefaultClock::default().now());
    ApiError::rate_limited(wait.as_secs_f64().ceil() as u64)
}

/// The caller, once its key checked out and its request fits the rate limit.
#[derive(Debug, Clone)]
pub struct Auth {
    pub account_id: i64,
    pub key_id: i64,
    pub key_prefix: String,
    /// The account's plan name as stored (resolved against the config by [`ApiConfig::plan`]).
    pub plan: String,
}

/// The presented key, from `Authorization: Bearer <key>` (scheme case-insensitive).
fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let value = parts
        .headers
        .get(AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer pmw_… header"))?
        .to_str()
        .map_err(|_| ApiError::unauthorized("Authorization header is not valid text"))?;
    let (scheme, key) = value
        .split_once(' ')
        .ok_or_else(|| ApiError::unauthorized("Authorization must be: Bearer pmw_…"))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ApiError::unauthorized(
            "Authorization must be: Bearer pmw_…",
        ));
    }
    Ok(key.trim())
}

impl FromRequestParts<AppState> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Self::Rejection> {
        // Already authenticated (and counted) by the idempotency layer.
        if let Some(a) = parts.extensions.get::<Auth>() {
            return Ok(a.clone());
        }
        // An address over its failures is refused before any lookup.
        let ip = crate::client_ip::client_ip(parts, &st.cfg.api_trusted_proxies);
        let admission = st.failures.admit(ip).map_err(throttled)?;
        match authenticate(parts, st).await {
            Err(e) if e.status == axum::http::StatusCode::UNAUTHORIZED => {
                st.failures.failed(ip, admission).map_err(throttled)?;
                Err(e)
            }
            other => other,
        }
    }
}

/// Look the presented key up ([`pmw_core::auth::key_holder`]) and apply the account's rate limit.
async fn authenticate(parts: &Parts, st: &AppState) -> Result<Auth, ApiError> {
    let key = bearer(parts)?;
    let holder = match key_holder(&st.pg, key).await {
        Ok(h) => h,
        Err(AuthError::Store(e)) => return Err(e.into()),
        Err(AuthError::Missing | AuthError::Invalid) => {
            return Err(ApiError::unauthorized("invalid or revoked API key"))
        }
    };
    let auth = Auth {
        account_id: holder.principal.account_id,
        key_id: holder.principal.key_id,
        key_prefix: holder.key_prefix,
        plan: holder.plan,
    };
    st.limiter.check_key(&auth.account_id).map_err(limited)?;
    Ok(auth)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_allows_the_burst_then_refuses_per_key() {
        let cfg = ApiConfig {
            api_rate_per_sec: 1,
            api_rate_burst: 3,
            ..ApiConfig::default()
        };
        let l = limiter(&cfg);
        for _ in 0..3 {
            assert!(l.check_key(&1).is_ok());
        }
        let refused = l.check_key(&1).unwrap_err();
        let wait = refused.wait_time_from(DefaultClock::default().now());
        assert!(
            wait.as_millis() > 0 && wait.as_millis() <= 1_000,
            "{wait:?}"
        );
        assert!(l.check_key(&2).is_ok(), "keys are limited independently");
    }
}

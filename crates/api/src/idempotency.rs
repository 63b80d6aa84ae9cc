//! `Idempotency-Key` on every POST: the first request with a key runs and its response (status,
//! content type, body) is stored in Postgres (`idempotency_keys`, per account, until
//! `PMW_API_IDEMPOTENCY_TTL_SECS`); a retry with the same key and the same request (method,
//! path, body: a SHA-256 fingerprint) gets the stored response again, marked
//! `Idempotent-Replayed: true`; the same key with a different request is 422
//! `idempotency_key_reused`; a retry while the first is still running is 409
//! `idempotency_in_flight`. Responses that say nothing about the request (401, 408, 409, 429,
//! 5xx) are not stored: the key is released and a retry runs again. Expired keys are deleted
//! (a bounded batch) whenever a new key is stored.

use axum::body::{to_bytes, Body};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use pmw_core::UnixMs;
use sha2::{Digest, Sha256};

use crate::auth::Auth;
use crate::error::ApiError;
use crate::AppState;

/// The request header.
pub const HEADER: &str = "idempotency-key";
/// Set on a stored response sent again.
pub const REPLAYED: &str = "idempotent-replayed";
/// Longest key.
pub const MAX_KEY_CHARS: usize = 255;
/// A first request still unfinished after this long is presumed dead: its key can be claimed.
const IN_FLIGHT_MS: i64 = 60_000;
/// Expired keys deleted per stored key.
const PURGE_BATCH: i64 = 100;
/// Largest response stored (every POST response of this API is far smaller).
const MAX_STORED_BYTES: usize = 1 << 20;

/// What a key's row says about this request.
enum Claim {
    /// This request runs; its response is stored under `created_ms`.
    New { created_ms: i64 },
    /// The same request finished before: its response.
    Replay {
        status: u16,
        content_type: Option<String>,
        body: Vec<u8>,
    },
    /// The key was used for another request.
    Reused,
    /// The first request with this key is still running.
    InFlight,
}

/// A key is 1..=255 visible ASCII characters.
pub fn valid_key(v: &HeaderValue) -> Result<String, ApiError> {
    let s = v.to_str().ok().filter(|s| {
        !s.is_empty() && s.len() <= MAX_KEY_CHARS && s.bytes().all(|b| b.is_ascii_graphic())
    });
    s.map(str::to_string).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_idempotency_key",
            format!("Idempotency-Key must be 1 to {MAX_KEY_CHARS} visible ASCII characters"),
        )
    })
}

/// The fingerprint of a request: method, path and query, body.
fn fingerprint(method: &Method, uri: &axum::http::Uri, body: &[u8]) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(method.as_str().as_bytes());
    h.update(b"\n");
    h.update(uri.path_and_query().map_or("", |p| p.as_str()).as_bytes());
    h.update(b"\n");
    h.update(body);
    h.finalize().to_vec()
}

/// Whether a response is the request's answer (stored) or a transient one (key released).
fn storable(status: StatusCode) -> bool {
    !(status.is_server_error()
        || matches!(status.as_u16(), 401 | 408 | 409 | 429)
        || status.is_informational())
}

/// Middleware on the API's routes: see the module documentation.
pub async fn idempotency(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let Some(raw) = req.headers().get(HEADER) else {
        return next.run(req).await;
    };
    let key = match valid_key(raw) {
        Ok(k) => k,
        Err(e) => return e.into_response(),
    };
    let (mut parts, body) = req.into_parts();
    // Keys are per account: authenticate first (the handler reuses this, see `Auth`).
    let who = match Auth::from_request_parts(&mut parts, &st).await {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    // The body was read completely by the outer layer: this only collects it.
    let Ok(body) = to_bytes(body, usize::MAX).await else {
        return ApiError::bad_request("invalid_body", "the request body could not be read")
            .into_response();
    };
    let fp = fingerprint(&parts.method, &parts.uri, &body);
    let created_ms =
        match claim(&st, who.account_id, &key, &fp).await {
            Err(e) => return e.into_response(),
            Ok(Claim::Replay {
                status,
                content_type,
                body,
            }) => return replay(status, content_type, body),
            Ok(Claim::Reused) => return ApiError::unprocessable(
                "idempotency_key_reused",
                "this Idempotency-Key was used for a different request (method, path or body); \
                 use a new key",
            )
            .into_response(),
            Ok(Claim::InFlight) => {
                return ApiError::conflict(
                    "idempotency_in_flight",
                    "a request with this Idempotency-Key is still being processed; retry later",
                )
                .into_response()
            }
            Ok(Claim::New { created_ms }) => created_ms,
        };
    parts.extensions.insert(who.clone());
    let resp = next.run(Request::from_parts(parts, Body::from(body))).await;
    let (rparts, rbody) = resp.into_parts();
    let Ok(rbytes) = to_bytes(rbody, MAX_STORED_BYTES).await else {
        release(&st, who.account_id, &key, created_ms).await;
        return ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the response could not be stored",
        )
        .into_response();
    };
    if storable(rparts.status) {
        let ct = rparts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        if let Err(e) = store(
            &st,
            who.account_id,
            &key,
            created_ms,
            &rparts.status,
            ct,
            &rbytes,
        )
        .await
        {
            // The request itself succeeded: answer it; a retry after the in-flight window runs
            // again.
            tracing::warn!(error = %e.message, "idempotency store failed");
        }
    } else {
        release(&st, who.account_id, &key, created_ms).await;
    }
    Response::from_parts(rparts, Body::from(rbytes))
}

fn replay(status: u16, content_type: Option<String>, body: Vec<u8>) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    if let Some(ct) = content_type.and_then(|c| HeaderValue::from_str(&c).ok()) {
        resp.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    resp.headers_mut()
        .insert(REPLAYED, HeaderValue::from_static("true"));
    resp
}

async fn claim(st: &AppState, account: i64, key: &str, fp: &[u8]) -> Result<Claim, ApiError> {
    let c = st.pg.get().await?;
    let now = UnixMs::now().0;
    let expires = now + st.cfg.api_idempotency_ttl_secs as i64 * 1_000;
    // A row deleted between the insert and the read (a released key) is claimed on a second try.
    for _ in 0..3 {
        if let Some(r) = c
            .query_opt(
                include_str!("sql/idempotency_begin.sql"),
                &[&account, &key, &fp, &now, &expires, &(now - IN_FLIGHT_MS)],
            )
            .await?
        {
            c.execute(
                include_str!("sql/idempotency_purge.sql"),
                &[&now, &PURGE_BATCH],
            )
            .await?;
            return Ok(Claim::New {
                created_ms: r.get(0),
            });
        }
        let Some(r) = c
            .query_opt(
                "SELECT fingerprint, status, content_type, body FROM idempotency_keys \
                 WHERE account_id = $1 AND key = $2",
                &[&account, &key],
            )
            .await?
        else {
            continue;
        };
        if r.get::<_, &[u8]>(0) != fp {
            return Ok(Claim::Reused);
        }
        return Ok(match r.get::<_, Option<i16>>(1) {
            None => Claim::InFlight,
            Some(status) => Claim::Replay {
                status: status as u16,
                content_type: r.get(2),
                body: r.get::<_, Option<Vec<u8>>>(3).unwrap_or_default(),
            },
        });
    }
    Ok(Claim::InFlight)
}

async fn store(
    st: &AppState,
    account: i64,
    key: &str,
    created_ms: i64,
    status: &StatusCode,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<(), ApiError> {
    let c = st.pg.get().await?;
    c.execute(
        "UPDATE idempotency_keys SET status = $4, content_type = $5, body = $6 \
         WHERE account_id = $1 AND key = $2 AND created_ms = $3 AND status IS NULL",
        &[
            &account,
            &key,
            &created_ms,
            &(status.as_u16() as i16),
            &content_type,
            &body,
        ],
    )
    .await?;
    Ok(())
}

/// Forget a claimed key whose request ended without an answer worth storing.
async fn release(st: &AppState, account: i64, key: &str, created_ms: i64) {
    let res = match st.pg.get().await {
        Ok(c) => c
            .execute(
                "DELETE FROM idempotency_keys \
                 WHERE account_id = $1 AND key = $2 AND created_ms = $3 AND status IS NULL",
                &[&account, &key, &created_ms],
            )
            .await
            .map(drop)
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = res {
        tracing::warn!(error = %e, "idempotency release failed");
    }
}

//! `Idempotency-Key` on every POST: the first request with a key runs and its response (status,
//! content type, body) is stored in Postgres (`idempotency_keys`, per account, until
//! `PMW_API_IDEMPOTENCY_TTL_SECS`); a retry with the same key and the same request (method,
//! path, body: a SHA-256 fingerprint) gets the stored response again, marked
//! `Idempotent-Replayed: true`; the same key with a different request is 422
//! `idempotency_key_reused`; a retry while the first is still running is 409
//! `idempotency_in_flight`. Responses that say nothing about the request (401, 408, 409, 429,
//! 5xx) are not stored: the key is released and a retry runs again. Expired keys are deleted
//! (a bounded batch) whenever a new key is stored.
//!
//! No secret is stored: the fields of a response that carry one (`key` of a new API key,
//! `secret` of a webhook endpoint, `ticket` and `ws_path` of a WebSocket ticket) are dropped
//! from the stored body ([`without_secrets`]), so a replayed response shows the resource
//! without its secret, which only the first response ever carried.

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
/// Top-level response fields that carry a secret: never stored.
pub const SECRET_FIELDS: [&str; 4] = ["key", "secret", "ticket", "ws_path"];

/// The body to store for a response: a JSON object without its [`SECRET_FIELDS`]; anything
/// else as it is (error bodies and lists carry no secret).
fn without_secrets(body: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(mut m))
            if SECRET_FIELDS.iter().any(|f| m.contains_key(*f)) =>
        {
            for f in SECRET_FIELDS {
                m.remove(f);
            }
            serde_json::to_vec(&m).map_or(std::borrow::Cow::Borrowed(&[][..]), Into::into)
        }
        _ => std::borrow::Cow::Borrowed(body),
    }
}

/// What a key's row says about this request.
#[derive(Debug, PartialEq, Eq)]
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

/// A claimed key: the account, the key, and when its row was created.
struct Slot<'a> {
    account: i64,
    key: &'a str,
    created_ms: i64,
}

/// Middleware on the API's routes: see the module documentation.
pub async fn idempotency(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let Some(raw) = req.headers().get(HEADER) else {
        return next.run(req).await;
    };
    match valid_key(raw) {
        Ok(key) => keyed(&st, key, req, next)
            .await
            .unwrap_or_else(IntoResponse::into_response),
        Err(e) => e.into_response(),
    }
}

/// A POST with a valid key: claim it, then run the request or answer from its row.
async fn keyed(st: &AppState, key: String, req: Request, next: Next) -> Result<Response, ApiError> {
    let (mut parts, body) = req.into_parts();
    // Keys are per account: authenticate first (the handler reuses this, see `Auth`).
    let who = Auth::from_request_parts(&mut parts, st).await?;
    // The body was read completely by the outer layer: this only collects it.
    let body = to_bytes(body, usize::MAX)
        .await
        .map_err(|_| ApiError::bad_request("invalid_body", "the request body could not be read"))?;
    let fp = fingerprint(&parts.method, &parts.uri, &body);
    let created_ms = match claim(st, who.account_id, &key, &fp).await? {
        Claim::New { created_ms } => created_ms,
        other => return Ok(answer(other)),
    };
    let slot = Slot {
        account: who.account_id,
        key: &key,
        created_ms,
    };
    parts.extensions.insert(who);
    let resp = next.run(Request::from_parts(parts, Body::from(body))).await;
    Ok(settle(st, &slot, resp).await)
}

/// The answer to a request whose key was claimed before ([`Claim::New`] runs instead).
fn answer(claim: Claim) -> Response {
    match claim {
        Claim::Replay {
            status,
            content_type,
            body,
        } => replay(status, content_type, body),
        Claim::Reused => ApiError::unprocessable(
            "idempotency_key_reused",
            "this Idempotency-Key was used for a different request (method, path or body); \
             use a new key",
        )
        .into_response(),
        Claim::InFlight | Claim::New { .. } => ApiError::conflict(
            "idempotency_in_flight",
            "a request with this Idempotency-Key is still being processed; retry later",
        )
        .into_response(),
    }
}

/// Store the response under the claimed key when it answers the request, else release the key;
/// the response either way (an unstorable one becomes a 500).
async fn settle(st: &AppState, slot: &Slot<'_>, resp: Response) -> Response {
    let (rparts, rbody) = resp.into_parts();
    let Ok(rbytes) = to_bytes(rbody, MAX_STORED_BYTES).await else {
        release(st, slot).await;
        return ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the response could not be stored",
        )
        .into_response();
    };
    if !storable(rparts.status) {
        release(st, slot).await;
        return Response::from_parts(rparts, Body::from(rbytes));
    }
    let ct = rparts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if let Err(e) = store(st, slot, rparts.status, ct, &without_secrets(&rbytes)).await {
        // The request itself succeeded: answer it; a retry after the in-flight window runs
        // again.
        tracing::warn!(error = %e.message, "idempotency store failed");
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

/// What a key's stored row says about a request with fingerprint `fp`: `fingerprint, status,
/// content_type, body`.
fn judge(row: &tokio_postgres::Row, fp: &[u8]) -> Claim {
    if row.get::<_, &[u8]>(0) != fp {
        return Claim::Reused;
    }
    match row.get::<_, Option<i16>>(1) {
        None => Claim::InFlight,
        Some(status) => Claim::Replay {
            status: status as u16,
            content_type: row.get(2),
            body: row.get::<_, Option<Vec<u8>>>(3).unwrap_or_default(),
        },
    }
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
        let row = c
            .query_opt(include_str!("sql/idempotency_read.sql"), &[&account, &key])
            .await?;
        if let Some(r) = row {
            return Ok(judge(&r, fp));
        }
    }
    Ok(Claim::InFlight)
}

async fn store(
    st: &AppState,
    slot: &Slot<'_>,
    status: StatusCode,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<(), ApiError> {
    let c = st.pg.get().await?;
    c.execute(
        include_str!("sql/idempotency_store.sql"),
        &[
            &slot.account,
            &slot.key,
            &slot.created_ms,
            &(status.as_u16() as i16),
            &content_type,
            &body,
        ],
    )
    .await?;
    Ok(())
}

/// Forget a claimed key whose request ended without an answer worth storing.
async fn release(st: &AppState, slot: &Slot<'_>) {
    let res = match st.pg.get().await {
        Ok(c) => c
            .execute(
                include_str!("sql/idempotency_release.sql"),
                &[&slot.account, &slot.key, &slot.created_ms],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_1_to_255_visible_ascii_characters() {
        assert_eq!(
            valid_key(&HeaderValue::from_static("a-1_B.~")).unwrap(),
            "a-1_B.~"
        );
        assert!(valid_key(&HeaderValue::from_str(&"k".repeat(255)).unwrap()).is_ok());
        for bad in ["", "has space", &"k".repeat(256)] {
            let e = valid_key(&HeaderValue::from_str(bad).unwrap()).unwrap_err();
            assert_eq!(e.code, "invalid_idempotency_key", "{bad:?}");
        }
    }

    #[test]
    fn only_answers_about_the_request_are_stored() {
        for s in [200, 201, 202, 204, 400, 403, 404, 413, 422] {
            assert!(storable(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        for s in [100, 401, 408, 409, 429, 500, 502, 503] {
            assert!(!storable(StatusCode::from_u16(s).unwrap()), "{s}");
        }
    }

    #[test]
    fn the_fingerprint_covers_method_path_query_and_body() {
        let uri = |u: &str| u.parse::<axum::http::Uri>().unwrap();
        let base = fingerprint(&Method::POST, &uri("/v1/x?a=1"), b"{}");
        assert_eq!(base.len(), 32);
        assert_eq!(base, fingerprint(&Method::POST, &uri("/v1/x?a=1"), b"{}"));
        assert_ne!(base, fingerprint(&Method::PUT, &uri("/v1/x?a=1"), b"{}"));
        assert_ne!(base, fingerprint(&Method::POST, &uri("/v1/x?a=2"), b"{}"));
        assert_ne!(base, fingerprint(&Method::POST, &uri("/v1/y?a=1"), b"{}"));
        assert_ne!(base, fingerprint(&Method::POST, &uri("/v1/x?a=1"), b"{ }"));
    }

    #[test]
    fn stored_bodies_keep_no_secret() {
        let key = br#"{"key":"pmw_ab","prefix":"pmw_1","label":"","account_id":1,"created_ms":2}"#;
        let stored: serde_json::Value = serde_json::from_slice(&without_secrets(key)).unwrap();
        assert_eq!(
            stored,
            serde_json::json!({"prefix":"pmw_1","label":"","account_id":1,"created_ms":2})
        );
        let ticket = br#"{"ticket":"pmwt_x","expires_ms":1,"ws_path":"/v1/ws?ticket=pmwt_x"}"#;
        assert_eq!(&*without_secrets(ticket), br#"{"expires_ms":1}"#);
        let hook = br#"{"id":3,"secret":"whsec_x","url":"https://e.x/"}"#;
        assert!(!String::from_utf8_lossy(&without_secrets(hook)).contains("whsec_"));
        for other in [
            &br#"{"error":{"code":"x","message":"y"}}"#[..],
            b"[1]",
            b"not json",
        ] {
            assert_eq!(&*without_secrets(other), other);
        }
    }

    #[test]
    fn a_claimed_key_answers_with_its_stored_response_or_a_refusal() {
        let r = answer(Claim::Replay {
            status: 201,
            content_type: Some("application/json".into()),
            body: b"{}".to_vec(),
        });
        assert_eq!(r.status(), StatusCode::CREATED);
        assert_eq!(r.headers()[REPLAYED], "true");
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(
            answer(Claim::Reused).status(),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(answer(Claim::InFlight).status(), StatusCode::CONFLICT);
    }
}

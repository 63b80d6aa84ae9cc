//! The one error type at the HTTP edge: every failure leaves as
//! `{"error": {"code": "...", "message": "..."}}` with the right status. axum's own extractor
//! rejections (JSON syntax, wrong types, missing or unknown fields, oversized bodies, bad query
//! strings and paths) are mapped here, and [`error_shape`] rewrites any other non-JSON error
//! response (404 of an unknown route, 405, a panic's 500) into the same shape.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

/// An error returned to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds, for 429.
    pub retry_after: Option<u64>,
}

/// The error body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong: a stable machine-readable `code` and a human-readable `message`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    #[schema(example = "invalid_address")]
    pub code: String,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, code, message)
    }

    /// A plan limit was reached (403).
    pub fn plan_limit(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "plan_limit", message)
    }

    /// An address over its limit (a request without a valid key: none, or failed ones): says
    /// so, never "for this API key".
    pub fn address_limited(retry_after_secs: u64, what: &str) -> ApiError {
        ApiError {
            retry_after: Some(retry_after_secs.max(1)),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("{what} from this address; retry after the Retry-After delay"),
            )
        }
    }

    pub fn rate_limited(retry_after_secs: u64) -> ApiError {
        ApiError {
            retry_after: Some(retry_after_secs.max(1)),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "too many requests for this API key; retry after the Retry-After delay",
            )
        }
    }

    /// The request body exceeds `PMW_API_MAX_BODY_BYTES` (413).
    pub fn too_large() -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            "request body is larger than this API accepts",
        )
    }

    /// A store is unreachable or failing: 503, details only in the log.
    pub fn unavailable(what: &str, detail: impl std::fmt::Display) -> ApiError {
        tracing::warn!(store = what, error = %detail, "store error");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("{what} is unavailable; try again later"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        let mut resp = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

impl From<tokio_postgres::Error> for ApiError {
    fn from(e: tokio_postgres::Error) -> ApiError {
        ApiError::unavailable("postgres", e)
    }
}

impl From<deadpool_postgres::PoolError> for ApiError {
    fn from(e: deadpool_postgres::PoolError) -> ApiError {
        ApiError::unavailable("postgres", e)
    }
}

impl From<pmw_core::pg::PgError> for ApiError {
    fn from(e: pmw_core::pg::PgError) -> ApiError {
        ApiError::unavailable("postgres", e)
    }
}

impl From<pmw_core::pg::ledger::LedgerError> for ApiError {
    fn from(e: pmw_core::pg::ledger::LedgerError) -> ApiError {
        match e {
            pmw_core::pg::ledger::LedgerError::Postgres(e) => ApiError::unavailable("postgres", e),
            pmw_core::pg::ledger::LedgerError::ClickHouse(e) => {
                ApiError::unavailable("clickhouse", e)
            }
        }
    }
}

impl From<clickhouse::error::Error> for ApiError {
    fn from(e: clickhouse::error::Error) -> ApiError {
        ApiError::unavailable("clickhouse", e)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        match r {
            JsonRejection::JsonDataError(e) => {
                ApiError::unprocessable("invalid_body", data_error_message(&e.body_text()))
            }
            JsonRejection::JsonSyntaxError(e) => {
                ApiError::bad_request("invalid_json", data_error_message(&e.body_text()))
            }
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with Content-Type: application/json",
            ),
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::too_large()
            }
            other => ApiError::bad_request("invalid_body", other.body_text()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::bad_request("invalid_query", data_error_message(&r.body_text()))
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> ApiError {
        ApiError::bad_request("invalid_path", data_error_message(&r.body_text()))
    }
}

/// axum's rejection texts start with a generic sentence; keep the part that says what is wrong.
fn data_error_message(text: &str) -> String {
    for prefix in [
        "Failed to deserialize the JSON body into the target type: ",
        "Failed to parse the request body as JSON: ",
        "Failed to deserialize query string: ",
        "Failed to deserialize query string. ",
        "Invalid URL: ",
    ] {
        if let Some(rest) = text.strip_prefix(prefix) {
            return rest.to_string();
        }
    }
    text.to_string()
}

/// Middleware: a 4xx/5xx response that is not already JSON (a route that does not exist, a
/// method not allowed, a caught panic, a body limit hit before an extractor ran) is rewritten
/// into the error shape, keeping its status and headers (e.g. `Allow`).
pub async fn error_shape(resp: Response) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let (code, message) = match status {
        StatusCode::NOT_FOUND => ("not_found", "no such route".to_string()),
        StatusCode::METHOD_NOT_ALLOWED => (
            "method_not_allowed",
            "this route does not accept that method".to_string(),
        ),
        StatusCode::PAYLOAD_TOO_LARGE => return keep_headers(resp, ApiError::too_large()),
        s if s.is_server_error() => ("internal", "internal error".to_string()),
        s => (
            "bad_request",
            s.canonical_reason().unwrap_or("bad request").to_lowercase(),
        ),
    };
    keep_headers(resp, ApiError::new(status, code, message))
}

fn keep_headers(original: Response, err: ApiError) -> Response {
    let (parts, _) = original.into_parts();
    let mut resp = err.into_response();
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            resp.headers_mut().insert(name.clone(), value.clone());
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limited_carries_retry_after() {
        let r = ApiError::rate_limited(0).into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn axum_prefixes_are_trimmed() {
        assert_eq!(
            data_error_message(
                "Failed to deserialize the JSON body into the target type: wallet: missing"
            ),
            "wallet: missing"
        );
        assert_eq!(data_error_message("other"), "other");
    }
}

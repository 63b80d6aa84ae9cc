//! Extractors that wrap axum's `Json`, `Query` and `Path` and turn their rejections into
//! [`ApiError`]s, so bad input is always a 4xx in the error shape, never a 500 or plain text.

use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::Json;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body: always an object (serde's derived structs also take a JSON array of their fields
/// in order, which no request schema allows; an update whose fields are all optional would
/// otherwise take `[]` as a valid, empty change). Request types use
/// `#[serde(deny_unknown_fields)]`.
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let Json(v) = Json::<serde_json::Value>::from_request(req, state).await?;
        object(v).map(ApiJson)
    }
}

/// `v` as a request type, refused (422 `invalid_body`) unless it is a JSON object.
fn object<T: DeserializeOwned>(v: serde_json::Value) -> Result<T, ApiError> {
    if !v.is_object() {
        return Err(ApiError::unprocessable(
            "invalid_body",
            "the body must be a JSON object",
        ));
    }
    serde_json::from_value(v).map_err(|e| ApiError::unprocessable("invalid_body", e.to_string()))
}

/// An optional JSON body: no body, an empty one or `null` gives `T::default()`.
pub struct OptionalJson<T>(pub T);

impl<T, S> FromRequest<S> for OptionalJson<T>
where
    T: DeserializeOwned + Default,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let empty = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .is_some_and(|v| v == "0")
            || (req
                .headers()
                .get(axum::http::header::CONTENT_TYPE)
                .is_none()
                && req
                    .headers()
                    .get(axum::http::header::TRANSFER_ENCODING)
                    .is_none()
                && req
                    .headers()
                    .get(axum::http::header::CONTENT_LENGTH)
                    .is_none());
        if empty {
            return Ok(OptionalJson(T::default()));
        }
        // JSON `null` is no body too; anything else must be an object.
        let Json(v) = Json::<serde_json::Value>::from_request(req, state).await?;
        if v.is_null() {
            return Ok(OptionalJson(T::default()));
        }
        object(v).map(OptionalJson)
    }
}

/// A query string.
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Query(v) = Query::<T>::from_request_parts(parts, state).await?;
        Ok(ApiQuery(v))
    }
}

/// Path parameters.
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(v) = Path::<T>::from_request_parts(parts, state).await?;
        Ok(ApiPath(v))
    }
}

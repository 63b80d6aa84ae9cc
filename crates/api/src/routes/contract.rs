//! Completes the generated document with the responses every operation shares, so each status
//! the API can return is documented where it can occur: 401 and 429 on authenticated operations
//! (429 also for repeated failed authentications), 503 when a store is down, 400/413/415/422 on
//! operations with a body, 400 and 404 on operations with path parameters, 400 and 422 on
//! operations with a query. Statuses an operation documents itself are kept.

use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn};
use utoipa::openapi::{
    ContentBuilder, HeaderBuilder, ObjectBuilder, OpenApi, Ref, RefOr, Required, Response,
    ResponseBuilder, Type,
};

/// Add the shared responses to every operation of `api`.
pub fn complete(api: &mut OpenApi) {
    for (path, item) in api.paths.paths.iter_mut() {
        if let Some(op) = item.post.as_mut() {
            complete_operation(path, true, op);
        }
        let ops = [
            item.get.as_mut(),
            item.put.as_mut(),
            item.patch.as_mut(),
            item.delete.as_mut(),
        ];
        for op in ops.into_iter().flatten() {
            complete_operation(path, false, op);
        }
    }
}

fn complete_operation(path: &str, post: bool, op: &mut Operation) {
    let authenticated = op.security.as_ref().is_some_and(|s| !s.is_empty());
    if authenticated && post {
        idempotency(op);
    }
    let params = op.parameters.as_deref().unwrap_or(&[]);
    let in_path = params
        .iter()
        .any(|p| matches!(p.parameter_in, ParameterIn::Path));
    let in_query = params
        .iter()
        .any(|p| matches!(p.parameter_in, ParameterIn::Query));
    let body = op.request_body.is_some();
    if authenticated {
        // Always the shared one: it documents `Retry-After`.
        op.responses.responses.insert(
            "429".into(),
            error(
                "429",
                "rate limited (per key, or per client address for failed authentications); \
             retry after `Retry-After` seconds",
            ),
        );
    }
    let mut add = |status: &str, description: &str| {
        op.responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| error(status, description));
    };
    if authenticated {
        add("401", "missing, malformed, unknown or revoked API key");
    }
    if in_path {
        add("400", "a path parameter is malformed");
        add("404", "no such resource for this account");
    }
    if in_query {
        add("400", "a query parameter is malformed or unknown");
        add("422", "a query parameter is out of range");
    }
    if body {
        add("400", "the body is not JSON or could not be read");
        add("413", "the body exceeds the API's limit");
        add(
            "415",
            "the body is not sent as `Content-Type: application/json`",
        );
        add("422", "the body is JSON but not a valid request");
    }
    // Everything but the process's own answers reads a store.
    if !matches!(
        path,
        "/v1/health" | "/v1/openapi.json" | "/v1/asyncapi.json"
    ) {
        add(
            "503",
            "a store (Postgres, ClickHouse) is unavailable; retry later",
        );
    }
}

/// Every authenticated POST honours `Idempotency-Key` ([`crate::idempotency`]).
fn idempotency(op: &mut Operation) {
    let param = ParameterBuilder::new()
        .name("Idempotency-Key")
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(
            "Makes the request safe to retry: the first response is stored per account for \
             `PMW_API_IDEMPOTENCY_TTL_SECS` (24 h) and a retry with the same key and the same \
             request (method, path, body) gets it again (with `Idempotent-Replayed: true`) \
             without the secret it carried (`key`, `secret`, `ticket`, `ws_path` are never \
             stored: the secret is in the first response only); the \
             same key with a different request is 422 `idempotency_key_reused`, a retry while \
             the first is still running 409 `idempotency_in_flight`. 401, 409, 429 and 5xx \
             answers are not stored.",
        ))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(crate::idempotency::MAX_KEY_CHARS))
                .pattern(Some("^[!-~]+$")),
        ))
        .build();
    op.parameters.get_or_insert_with(Vec::new).push(param);
    for (status, description) in [
        (
            "400",
            "a parameter or the `Idempotency-Key` header is malformed",
        ),
        (
            "409",
            "a request with this `Idempotency-Key` is still being processed",
        ),
        (
            "422",
            "the request is not valid, or its `Idempotency-Key` was used for a different request",
        ),
    ] {
        op.responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| error(status, description));
    }
}

/// An error response with the shared body (and `Retry-After` on 429).
fn error(status: &str, description: &str) -> RefOr<Response> {
    let mut b = ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("ErrorBody")))
            .build(),
    );
    if status == "429" {
        b = b.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(1)),
                )
                .description(Some("seconds to wait"))
                .build(),
        );
    }
    RefOr::T(b.build())
}

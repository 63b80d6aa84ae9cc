//! The schemas of what pmw pushes, generated from the types in `pmw_core::message` that produce
//! it: OpenAPI 3.1 `webhooks` (the `trade`, `retract`, `final`, `pending` and `void` bodies
//! POSTed to endpoints, and the `test` event of `POST /v1/webhooks/{id}/test`) in the served
//! document, and an AsyncAPI 3.0 document for the WebSocket `/v1/ws` (`hello`, `trade`,
//! `retract`, `final`, `pending`, `void`, `heartbeat`, `resync`), served at `/v1/asyncapi.json`
//! and committed as `docs/asyncapi.json` (a test keeps the two equal).

use std::sync::OnceLock;

use pmw_core::message::{
    Control, FinalNotice, Kind, Market, PendingFill, PendingMessage, PushedMessage, Trade,
    TradeMessage, VoidMessage,
};
use serde_json::{json, Map, Value};
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(components(schemas(
    PushedMessage,
    TradeMessage,
    Trade,
    Market,
    Kind,
    Control,
    FinalNotice,
    PendingMessage,
    PendingFill,
    VoidMessage
)))]
struct Events;

/// The `test` event's schema: a webhook body only (never on the WebSocket).
#[derive(OpenApi)]
#[openapi(components(schemas(super::hook_test::TestEvent)))]
struct WebhookOnly;

/// The component schemas of webhook-only bodies (the `test` event).
pub fn webhook_schemas() -> Map<String, Value> {
    let doc = serde_json::to_value(WebhookOnly::openapi()).unwrap_or_default();
    doc["components"]["schemas"]
        .as_object()
        .cloned()
        .unwrap_or_default()
}

/// The component schemas of the pushed messages (`#/components/schemas/…` references).
pub fn schemas() -> Map<String, Value> {
    let doc = serde_json::to_value(Events::openapi()).unwrap_or_default();
    doc["components"]["schemas"]
        .as_object()
        .cloned()
        .unwrap_or_default()
}

/// `schema` with its `type` fixed to `kind`.
fn typed(schema: &str, kind: &str) -> Value {
    json!({
        "allOf": [{"$ref": format!("#/components/schemas/{schema}")}],
        "properties": {"type": {"const": kind}},
        "required": ["type"],
    })
}

/// A `final`: the full body (`final` only) or the small notice (beside `trade`s).
fn final_schema() -> Value {
    json!({"oneOf": [typed("PushedMessage", "final"), stamped("FinalNotice", "final")]})
}

/// A body of `schema` as sent: `type` (`kind`) and `t_push_ms` in front.
fn stamped(schema: &str, kind: &str) -> Value {
    json!({
        "allOf": [{"$ref": format!("#/components/schemas/{schema}")}],
        "properties": {
            "type": {"const": kind},
            "t_push_ms": {"type": "integer", "format": "int64", "description": "when push sent it (ms since the epoch)"}
        },
        "required": ["type", "t_push_ms"],
    })
}

const FINAL_WHAT: &str = "The fill's block is finalized: it can no longer be reorganised away. \
    To subscribers that also receive `trade`s, a small notice naming the trade (never before its \
    `trade`); to `final`-only subscribers, the full trade body with `finalized: true`.";

/// OpenAPI 3.1 `webhooks`: what an endpoint receives.
pub fn webhooks() -> Value {
    let op = |kind: &str, what: &str| {
        json!({"post": {
            "summary": format!("a `{kind}` message"),
            "description": format!("{what} Signed per Standard Webhooks (`webhook-id`, \
                `webhook-timestamp`, `webhook-signature` with the endpoint's `whsec_…` secret). \
                Answer 2xx within the timeout; 410 disables the endpoint; anything else is \
                retried with backoff."),
            "requestBody": {"required": true, "content": {"application/json": {"schema": typed("PushedMessage", kind)}}},
            "responses": {"2XX": {"description": "received"}, "410": {"description": "gone: pmw disables the endpoint"}},
        }})
    };
    let mut test_op = op(
        "test",
        "Sent on demand by `POST /v1/webhooks/{id}/test` (never \
        retried, not in the delivery log).",
    );
    test_op["post"]["requestBody"]["content"]["application/json"]["schema"] =
        typed("TestEvent", "test");
    let mut final_op = op("final", FINAL_WHAT);
    final_op["post"]["requestBody"]["content"]["application/json"]["schema"] = final_schema();
    let mut pending_op = op("pending", "Endpoints with `pending` (beside `trade`) in `events`: a fill of a settlement seen in the mempool, before its block; never after its `trade` (which carries its `pending_id`) or `void`. `webhook-id` is `msg_pending-<pending_id>_<endpoint>_pending`.");
    pending_op["post"]["requestBody"]["content"]["application/json"]["schema"] =
        stamped("PendingMessage", "pending");
    let mut void_op = op("void", "Endpoints with `pending` in `events`: a `pending` that will not confirm, with its `reason`, after its `pending`'s delivery.");
    void_op["post"]["requestBody"]["content"]["application/json"]["schema"] =
        stamped("VoidMessage", "void");
    json!({
        "trade": op("trade", "A fill of a followed wallet, or any wallet's fill in a followed market (`/v1/markets`), on the canonical chain, once even when both match (endpoints with `trade` in `events`)."),
        "retract": op("retract", "A fill a reorg removed, with the body it was delivered with."),
        "final": final_op,
        "pending": pending_op,
        "void": void_op,
        "test": test_op,
    })
}

/// The AsyncAPI 3.0 document of `/v1/ws`.
pub fn asyncapi() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let msg = |name: &str, summary: &str, payload: Value| {
            json!({"name": name, "summary": summary, "contentType": "application/json", "payload": payload})
        };
        let messages = json!({
            "hello": msg("hello", "first frame: where the session starts and the ingested head", typed("Control", "hello")),
            "trade": msg("trade", "a fill of a followed wallet, or any wallet's fill in a followed market (once when both match)", typed("PushedMessage", "trade")),
            "retract": msg("retract", "a fill a reorg removed (the body it was delivered with)", typed("PushedMessage", "retract")),
            "final": msg("final", "a fill's block is finalized (with `events=final` or `events=trade,final`)", final_schema()),
            "pending": msg("pending", "with `events=trade,pending`: a fill of a settlement seen in the mempool, as its calldata names it, before any block mined it; never after its `trade` (which carries its `pending_id`) or `void`", stamped("PendingMessage", "pending")),
            "void": msg("void", "with `events=trade,pending`: a `pending` that will not confirm, with its `reason`", stamped("VoidMessage", "void")),
            "heartbeat": msg("heartbeat", "every PMW_PUSH_WS_HEARTBEAT_MS: alive, and where the session stands", typed("Control", "heartbeat")),
            "resync": msg("resync", "the resume window was exceeded: backfill after `after` over REST, then reconnect", typed("Control", "resync")),
        });
        let refs: Map<String, Value> = messages
            .as_object()
            .map(|m| {
                m.keys()
                    .map(|k| (k.clone(), json!({"$ref": format!("#/components/messages/{k}")})))
                    .collect()
            })
            .unwrap_or_default();
        let op_refs: Vec<Value> = refs
            .keys()
            .map(|k| json!({"$ref": format!("#/channels/ws/messages/{k}")}))
            .collect();
        json!({
            "asyncapi": "3.0.0",
            "info": {
                "title": "pmw live trades",
                "version": "1",
                "description": "Live Polymarket trades of the wallets and markets an account follows, \
                    over a WebSocket served by pmw-push behind the same site as the REST API. \
                    Authenticate with `Authorization: Bearer pmw_…` (scheme in any case) or a \
                    one-time `?ticket=` from `POST /v1/ws-ticket`. Reconnect with \
                    `?since=<resume>` (the last `resume` received) to get what was missed; a \
                    reorg of that block is detected and retracted first. The server only sends; \
                    close codes: 1008 (auth or `since` refused), 1013 (try again later)."
            },
            "defaultContentType": "application/json",
            "channels": {"ws": {
                "address": "/v1/ws",
                "messages": refs,
                "bindings": {"ws": {"method": "GET", "query": {
                    "type": "object",
                    "properties": {
                        "since": {"type": "string", "description": "resume after this position (`<cursor>:<hash8>`, or a bare cursor)"},
                        "ticket": {"type": "string", "description": "a one-time browser ticket `pmwt_…`"},
                        "events": {"type": "string", "enum": ["trade", "final", "trade,final", "final,trade", "trade,pending", "trade,final,pending"], "default": "trade",
                            "description": "`trade`: trades as ingested (and retracts); `final`: only the finalized ledger, each trade once as a `final` with the full body (`since` then names a position in that stream); `trade,final`: trades, and a small `final` naming each once its block is finalized, never before its `trade`; `pending` (opt-in, beside `trade`, any order): also the pending tier, a `pending` per fill seen in the mempool and a `void` for one that will not confirm (the open ones are sent again on every connect)"},
                        "final_since": {"type": "string", "description": "with `events=trade,final`: resume the `final`s after this cursor (the `final_cursor` of the last `hello` or `heartbeat`); default `since`"}
                    }
                }}}
            }},
            "operations": {"receive": {
                "action": "receive",
                "channel": {"$ref": "#/channels/ws"},
                "messages": op_refs,
            }},
            "components": {"messages": messages, "schemas": schemas()},
        })
    })
}

//! Every route of the API, registered together with its OpenAPI operation (`utoipa-axum`), so
//! the document at `/v1/openapi.json` is generated from the code that serves the routes.

mod account;
mod chat_dest;
mod contract;
mod deliveries;
mod endpoint;
mod endpoint_health;
pub mod events;
mod filters;
mod hook_test;
mod ledger;
pub use ledger::MAX_BLOCK_SPAN;
pub mod markets;
mod ops;
mod params;
pub use ops::metrics;
pub use ready::ReadyCache;
mod ready;
mod replay;
pub use replay::REPLAYS_PER_HOUR;
mod subscriptions;
mod trades;
mod txn;
mod webhooks;

use std::sync::OnceLock;

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ErrorBody;
use crate::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "pmw API",
        description = "Live Polymarket trades of the wallets and markets you follow: subscriptions, signed \
            webhooks, keyset backfill, delivery log, readiness. Errors are \
            `{\"error\":{\"code\",\"message\"}}`. Authenticate with `Authorization: Bearer pmw_…`. \
            Live trades are pushed over the WebSocket `/v1/ws` (served by pmw-push).",
        version = "1"
    ),
    modifiers(&BearerAuth),
    components(schemas(ErrorBody)),
    tags(
        (name = "account", description = "the caller's account, API keys, WebSocket tickets"),
        (name = "subscriptions", description = "followed wallets"),
        (name = "markets", description = "followed markets: every fill in them, whatever the wallet"),
        (name = "webhooks", description = "webhook endpoints, secrets, delivery log, replay"),
        (name = "trades", description = "keyset backfill of trades"),
        (name = "ops", description = "readiness, health, metrics, this document")
    )
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("pmw_…")
                    .build(),
            ),
        );
    }
}

/// The routes with their documentation.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(account::me))
        .routes(routes!(account::list_keys, account::create_key))
        .routes(routes!(account::revoke_key))
        .routes(routes!(account::ws_ticket))
        .routes(routes!(subscriptions::list, subscriptions::add))
        .routes(routes!(subscriptions::update, subscriptions::remove))
        .routes(routes!(subscriptions::bulk::bulk))
        .routes(routes!(markets::list, markets::add))
        .routes(routes!(markets::update, markets::remove))
        .routes(routes!(webhooks::list, webhooks::create))
        .routes(routes!(
            webhooks::get_one,
            webhooks::update,
            webhooks::delete
        ))
        .routes(routes!(webhooks::rotate_secret))
        .routes(routes!(hook_test::test))
        .routes(routes!(deliveries::log))
        .routes(routes!(replay::replay))
        .routes(routes!(trades::list))
        .routes(routes!(ready::ready))
        .routes(routes!(ops::health))
        .routes(routes!(ops::openapi_json))
        .routes(routes!(ops::asyncapi_json))
}

/// The OpenAPI document as JSON (built once).
pub fn openapi_json() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| {
        let (_, mut api) = router().split_for_parts();
        contract::complete(&mut api);
        // utoipa's model has no `webhooks`: added to the JSON with the pushed messages' schemas.
        let mut doc = serde_json::to_value(&api).unwrap_or_default();
        if let Some(s) = doc["components"]["schemas"].as_object_mut() {
            s.extend(events::schemas());
            s.extend(events::webhook_schemas());
        }
        doc["webhooks"] = events::webhooks();
        serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    })
}

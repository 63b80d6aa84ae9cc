//! A Gamma-compatible market metadata server for the simulator's markets:
//! `GET /markets?clob_token_ids=<id>&clob_token_ids=<id2>` answers a JSON array of the markets
//! holding those tokens (unknown ids are simply absent; no filter = every market), with
//! `outcomes` and `clobTokenIds` as JSON-encoded strings, as Gamma does; `condition_ids=` filters
//! by condition id the same way. `GET /events?slug=<slug>` answers the events with that slug,
//! each with its markets (Gamma's shape), as `/v1/markets` resolves an event subscription.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::config::Market;
use crate::types::TokenId;

/// Gamma market ids of the simulator's markets start here (`id` = this + index).
pub const FIRST_MARKET_ID: usize = 900_001;

/// Server behaviour knobs for tests.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// Delay before every answer (to test that nothing waits on names).
    pub delay: Duration,
}

#[derive(Debug)]
struct AppState {
    markets: Vec<Market>,
    opts: ServeOptions,
}

/// Binds `addr` (port 0 picks a free port) and serves `markets`. Returns the bound address and
/// the server task (abort it to stop).
pub async fn serve(
    addr: SocketAddr,
    markets: Vec<Market>,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    serve_with(addr, markets, ServeOptions::default()).await
}

/// [`serve`] with options.
pub async fn serve_with(
    addr: SocketAddr,
    markets: Vec<Market>,
    opts: ServeOptions,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = router(markets, opts);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "markets server stopped");
        }
    });
    tracing::info!(addr = %bound, "Gamma-compatible markets server listening");
    Ok((bound, task))
}

/// The server's routes, for embedding.
pub fn router(markets: Vec<Market>, opts: ServeOptions) -> Router {
    Router::new()
        .route("/markets", get(list_markets))
        .route("/events", get(list_events))
        .with_state(Arc::new(AppState { markets, opts }))
}

async fn list_markets(
    State(app): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
) -> Json<Vec<Value>> {
    if !app.opts.delay.is_zero() {
        tokio::time::sleep(app.opts.delay).await;
    }
    let query = query.as_deref().unwrap_or("");
    let wanted = token_filter(query);
    let conditions = values_of(query, "condition_ids");
    let out = app
        .markets
        .iter()
        .enumerate()
        .filter(|(_, m)| match &wanted {
            None => true,
            Some(ids) => m.token_ids.iter().any(|t| ids.contains(t)),
        })
        .filter(|(_, m)| {
            conditions.as_ref().is_none_or(|cs| {
                let c = m.condition_id.to_string();
                cs.iter().any(|x| x.eq_ignore_ascii_case(&c))
            })
        })
        .map(|(i, m)| gamma_market(FIRST_MARKET_ID + i, m))
        .collect();
    Json(out)
}

/// `GET /events?slug=`: the events with that slug (none without one), each with its markets.
async fn list_events(
    State(app): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
) -> Json<Vec<Value>> {
    let slugs = values_of(query.as_deref().unwrap_or(""), "slug").unwrap_or_default();
    let out = slugs
        .iter()
        .filter_map(|slug| {
            let markets: Vec<Value> = app
                .markets
                .iter()
                .enumerate()
                .filter(|(_, m)| m.event_slug() == slug)
                .map(|(i, m)| gamma_market(FIRST_MARKET_ID + i, m))
                .collect();
            (!markets.is_empty()).then(|| json!({"slug": slug, "title": slug, "markets": markets}))
        })
        .collect();
    Json(out)
}

/// The values of `key` in a query string (repeated keys and comma lists), or None when absent.
fn values_of(query: &str, key: &str) -> Option<Vec<String>> {
    let mut found = false;
    let mut out = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if percent_decode(k) != key {
            continue;
        }
        found = true;
        out.extend(percent_decode(v).split(',').map(|s| s.trim().to_string()));
    }
    found.then_some(out)
}

/// The `clob_token_ids` values of a query string (repeated keys and comma lists), or None when
/// the key is absent. Values that are not decimal token ids match nothing.
fn token_filter(query: &str) -> Option<Vec<TokenId>> {
    let mut found = false;
    let mut ids = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = percent_decode(k);
        if k != "clob_token_ids" && k != "clob_token_ids[]" {
            continue;
        }
        found = true;
        ids.extend(
            percent_decode(v)
                .split(',')
                .filter_map(|s| s.trim().parse::<TokenId>().ok()),
        );
    }
    found.then_some(ids)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
                {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One market in Gamma's `/markets` shape.
pub fn gamma_market(id: usize, m: &Market) -> Value {
    json!({
        "id": id.to_string(),
        "question": m.question,
        "conditionId": m.condition_id.to_string(),
        "slug": m.slug,
        // The market's event (its own, named like it, unless it belongs to a larger one).
        "events": [{"slug": m.event_slug(), "title": m.question}],
        "outcomes": json_string_list(m.outcomes.iter().map(String::as_str)),
        "clobTokenIds": json_string_list(m.token_ids.iter().map(|t| t.to_string())),
        "negRisk": m.neg_risk,
        "closed": m.closed,
        "active": !m.closed,
        "enableOrderBook": true,
    })
}

/// A list of strings JSON-encoded into one string, formatted as Gamma does: `["a", "b"]`.
pub fn json_string_list<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let parts: Vec<String> = items
        .into_iter()
        .map(|s| serde_json::to_string(s.as_ref()).expect("strings serialize"))
        .collect();
    format!("[{}]", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_repeated_and_comma_separated_ids() {
        assert_eq!(token_filter(""), None);
        assert_eq!(token_filter("closed=false"), None);
        let ids = token_filter("clob_token_ids=12&clob_token_ids=34%2C56&x=1").unwrap();
        assert_eq!(
            ids.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
            ["12", "34", "56"]
        );
        assert_eq!(token_filter("clob_token_ids=abc").unwrap(), vec![]);
    }

    #[test]
    fn json_string_list_matches_gamma_formatting() {
        assert_eq!(json_string_list(["Yes", "No"]), r#"["Yes", "No"]"#);
        let parsed: Vec<String> = serde_json::from_str(&json_string_list(["a\"b"])).unwrap();
        assert_eq!(parsed, ["a\"b"]);
    }
}

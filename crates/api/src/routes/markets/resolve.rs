//! Resolving what a market subscription names into the outcome token ids push matches fills on,
//! through the Gamma-compatible markets API (`PMW_GAMMA_URL`, the one pmw-live names markets
//! with): a condition id (`/markets?condition_ids=`), a token id (`/markets?clob_token_ids=`; the
//! subscription follows that outcome only) or an event slug (`/events?slug=`, every market of the
//! event). Done when a subscription is created or changed, never on the delivery path. A name the
//! API does not know is 422 `market_not_found`; an API that does not answer (or answers badly) is
//! 503 `markets_unavailable`: never a silent empty subscription.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Deserialize;

use crate::error::ApiError;

/// How long the markets API has to answer.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The longest event slug taken.
pub const MAX_SLUG_CHARS: usize = 200;

/// What a market subscription names, as validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarketRef {
    /// Lowercase `0x` + 64 hex digits.
    Condition(String),
    /// Decimal, without leading zeros.
    Token(String),
    /// An event slug (lowercase letters, digits and `-`).
    Event(String),
}

impl MarketRef {
    /// A reference as written in a path or `market` field: a condition id, a token id, or
    /// (`event` given) an event slug.
    pub fn parse(s: &str) -> Result<MarketRef, ApiError> {
        if let Some(hex) = s.strip_prefix("0x") {
            if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Ok(MarketRef::Condition(s.to_ascii_lowercase()));
            }
        } else if !s.is_empty() && s.len() <= 78 && s.bytes().all(|b| b.is_ascii_digit()) {
            let t = s.trim_start_matches('0');
            return Ok(MarketRef::Token(if t.is_empty() { "0" } else { t }.into()));
        } else if slug_ok(s) {
            return Ok(MarketRef::Event(s.to_string()));
        }
        Err(ApiError::unprocessable(
            "invalid_market",
            format!(
                "a market is a condition id (0x + 64 hex digits), a token id (decimal, at most 78 \
                 digits) or an event slug (lowercase letters, digits and '-', at most \
                 {MAX_SLUG_CHARS}), got {s:?}"
            ),
        ))
    }

    /// The stored kind.
    pub fn kind(&self) -> &'static str {
        match self {
            MarketRef::Condition(_) => "condition",
            MarketRef::Token(_) => "token",
            MarketRef::Event(_) => "event",
        }
    }

    /// The stored name (canonical).
    pub fn name(&self) -> &str {
        match self {
            MarketRef::Condition(s) | MarketRef::Token(s) | MarketRef::Event(s) => s,
        }
    }
}

fn slug_ok(s: &str) -> bool {
    (1..=MAX_SLUG_CHARS).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
}

/// What a reference resolved to: the markets' condition ids and the outcome tokens followed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    pub conditions: BTreeSet<String>,
    pub tokens: BTreeSet<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GammaMarket {
    #[serde(default)]
    condition_id: Option<String>,
    /// A JSON-encoded list of decimal strings, as Gamma sends it.
    #[serde(default)]
    clob_token_ids: Option<String>,
}

#[derive(Debug, Deserialize)]
struct GammaEvent {
    #[serde(default)]
    slug: Option<String>,
    #[serde(default)]
    markets: Vec<GammaMarket>,
}

/// The client of the markets API.
#[derive(Clone)]
pub struct MarketsApi {
    http: reqwest::Client,
    base: String,
}

impl MarketsApi {
    pub fn new(base: &str) -> Result<MarketsApi, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(MarketsApi {
            http,
            base: base.trim_end_matches('/').to_string(),
        })
    }

    /// Resolve `r` (see the module doc for the errors).
    pub async fn resolve(&self, r: &MarketRef) -> Result<Resolved, ApiError> {
        let markets = match r {
            MarketRef::Condition(c) => self.markets("condition_ids", c).await?,
            MarketRef::Token(t) => self.markets("clob_token_ids", t).await?,
            MarketRef::Event(slug) => {
                let events: Vec<GammaEvent> = self.get("/events", &[("slug", slug)]).await?;
                events
                    .into_iter()
                    .filter(|e| e.slug.as_deref() == Some(slug.as_str()))
                    .flat_map(|e| e.markets)
                    .collect()
            }
        };
        let resolved = resolved_of(r, &markets);
        if resolved.tokens.is_empty() {
            let what = match r {
                MarketRef::Condition(c) => format!("no market with condition id {c}"),
                MarketRef::Token(t) => format!("no market with outcome token {t}"),
                MarketRef::Event(s) => format!("no event with slug {s:?} (or it has no markets)"),
            };
            return Err(ApiError::unprocessable(
                "market_not_found",
                format!("{what} is known to the markets API"),
            ));
        }
        Ok(resolved)
    }

    async fn markets(&self, key: &str, value: &str) -> Result<Vec<GammaMarket>, ApiError> {
        self.get("/markets", &[(key, value)]).await
    }

    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T, ApiError> {
        let url = format!("{}{path}", self.base);
        let resp = self
            .http
            .get(&url)
            .query(query)
            .send()
            .await
            .map_err(|e| unavailable(path, e))?;
        if !resp.status().is_success() {
            return Err(unavailable(path, format!("status {}", resp.status())));
        }
        resp.json().await.map_err(|e| unavailable(path, e))
    }
}

fn unavailable(path: &str, detail: impl std::fmt::Display) -> ApiError {
    tracing::warn!(path, error = %detail, "markets api error");
    ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "markets_unavailable",
        "the markets API that resolves market subscriptions is unavailable; try again later",
    )
}

/// The conditions and tokens of `markets` that `r` names: every token of each market for a
/// condition or an event, only the named token for a token id.
fn resolved_of(r: &MarketRef, markets: &[GammaMarket]) -> Resolved {
    let mut out = Resolved::default();
    for m in markets {
        let Some(condition) = m.condition_id.as_deref().map(str::to_ascii_lowercase) else {
            continue;
        };
        if let MarketRef::Condition(c) = r {
            if *c != condition {
                continue;
            }
        }
        let tokens: Vec<String> = m
            .clob_token_ids
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let tokens: Vec<String> = match r {
            MarketRef::Token(t) => tokens.into_iter().filter(|x| x == t).collect(),
            _ => tokens,
        };
        if tokens.is_empty() {
            continue;
        }
        out.conditions.insert(condition);
        out.tokens.extend(tokens);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn market(c: &str, tokens: &[&str]) -> GammaMarket {
        GammaMarket {
            condition_id: Some(c.into()),
            clob_token_ids: Some(serde_json::to_string(tokens).unwrap()),
        }
    }

    #[test]
    fn references_parse_into_conditions_tokens_and_slugs() {
        let c = format!("0x{}", "Ab".repeat(32));
        assert_eq!(
            MarketRef::parse(&c).unwrap(),
            MarketRef::Condition(c.to_ascii_lowercase())
        );
        assert_eq!(
            MarketRef::parse("007").unwrap(),
            MarketRef::Token("7".into())
        );
        assert_eq!(
            MarketRef::parse("pmw-demo-cup").unwrap(),
            MarketRef::Event("pmw-demo-cup".into())
        );
        for bad in ["", "0x12", "Has Spaces", "-x", &"a".repeat(201)] {
            let e = MarketRef::parse(bad).unwrap_err();
            assert_eq!(e.code, "invalid_market", "{bad:?}");
        }
    }

    #[test]
    fn a_token_follows_its_outcome_only_and_a_condition_or_event_every_outcome() {
        let ms = [market("0xAA", &["1", "2"]), market("0xbb", &["3", "4"])];
        let t = resolved_of(&MarketRef::Token("2".into()), &ms);
        assert_eq!(t.tokens, BTreeSet::from(["2".to_string()]));
        assert_eq!(t.conditions, BTreeSet::from(["0xaa".to_string()]));
        let e = resolved_of(&MarketRef::Event("x".into()), &ms);
        assert_eq!(e.tokens.len(), 4);
        assert_eq!(e.conditions.len(), 2);
        let c = resolved_of(&MarketRef::Condition("0xbb".into()), &ms);
        assert_eq!(c.tokens, BTreeSet::from(["3".to_string(), "4".to_string()]));
    }
}

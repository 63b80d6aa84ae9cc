//! Filters that narrow what a subscription (a followed wallet) or a webhook endpoint receives:
//! the fill's side, a minimum of shares or collateral (exact 6-decimal amounts compared as
//! integers of micro-units, never floats) and a list of markets (condition ids and/or token ids).
//! [`FilterSpec`] is the wire and storage shape (the API validates it into a [`Filter`]);
//! [`Filter::matches`] decides on a message's [`Facts`], the same way on every path (live
//! WebSocket frames, resume replays, webhooks, REST backfill and webhook replay), so a `retract`
//! goes exactly where its `trade` went (both carry the same body).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::ch::TradeRow;
use crate::message::{Market, TradeMessage};

/// Markets a filter may list at most.
pub const MAX_MARKETS: usize = 100;
/// Integer digits an amount may have at most (10^30 units: far beyond any supply, and the
/// micro-units stay within `u128`).
pub const MAX_INT_DIGITS: usize = 30;
/// Fractional digits of an amount (pmw amounts have 6 decimals).
pub const AMOUNT_DECIMALS: usize = 6;
/// Digits a token id may have at most (a uint256 in decimal).
pub const MAX_TOKEN_DIGITS: usize = 78;

/// A fill's side from the wallet's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "UPPERCASE")]
pub enum Side {
    Buy,
    Sell,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Buy => "BUY",
            Side::Sell => "SELL",
        }
    }
}

/// A filter as sent and stored: every field optional, all present ones must hold (an absent
/// filter, or `{}`, lets everything through). It deserializes from a JSON object only (see
/// the `Deserialize` impl).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(example = json!({
        "side": "BUY",
        "min_collateral": "250.5",
        "markets": ["0x5f65177b394277fd294cd75650044e32ba009a95022d88a0c1d565897d72f8f1", "21742633143463906290569050155826241533067272736897614950488156847949938836455"]
    }))
)]
#[serde(deny_unknown_fields)]
pub struct FilterSpec {
    /// Only fills of this side (`BUY` or `SELL`, the wallet's side); absent: both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Side>))]
    pub side: Option<String>,
    /// Only fills of at least this many outcome shares: an exact decimal with at most 6
    /// fractional digits (`"12.5"`), compared exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(example = "12.5", pattern = r"^[0-9]{1,30}(\.[0-9]{1,6})?$")
    )]
    pub min_shares: Option<String>,
    /// Only fills of at least this much collateral (USDC), exact as `min_shares`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(example = "100", pattern = r"^[0-9]{1,30}(\.[0-9]{1,6})?$")
    )]
    pub min_collateral: Option<String>,
    /// Only fills in these markets: condition ids (`0x` + 64 hex digits; matched against the
    /// trade's `market.condition_id`, so a trade whose market is not resolved yet does not
    /// match on it) and/or outcome token ids (decimal, matched against `trade.token_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(schema_with = markets_schema)
    )]
    pub markets: Option<Vec<String>>,
}

/// The fields of [`FilterSpec`] as serde derives them (which also takes a JSON array of the
/// fields in order: refused by [`FilterSpec`]'s own impl).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    #[serde(default)]
    side: Option<String>,
    #[serde(default)]
    min_shares: Option<String>,
    #[serde(default)]
    min_collateral: Option<String>,
    #[serde(default)]
    markets: Option<Vec<String>>,
}

impl<'de> Deserialize<'de> for FilterSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<FilterSpec, D::Error> {
        let map = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        let r: RawSpec = serde_json::from_value(serde_json::Value::Object(map))
            .map_err(serde::de::Error::custom)?;
        Ok(FilterSpec {
            side: r.side,
            min_shares: r.min_shares,
            min_collateral: r.min_collateral,
            markets: r.markets,
        })
    }
}

/// The schema of `markets`: 1 to 100 condition ids or token ids, or null.
#[cfg(feature = "openapi")]
fn markets_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, SchemaType, Type};
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(r"^(0x[0-9a-fA-F]{64}|[0-9]{1,78})$")),
        )
        .min_items(Some(1))
        .max_items(Some(MAX_MARKETS))
        .description(Some(
            "Only fills in these markets: condition ids (`0x` + 64 hex digits; matched against \
             the trade's `market.condition_id`, so a trade whose market is not resolved yet does \
             not match on it) and/or outcome token ids (decimal, matched against \
             `trade.token_id`).",
        ))
        .examples([serde_json::json!([
            "0x5f65177b394277fd294cd75650044e32ba009a95022d88a0c1d565897d72f8f1",
            "21742633143463906290569050155826241533067272736897614950488156847949938836455"
        ])])
        .build()
}

/// Why a [`FilterSpec`] is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("side must be \"BUY\" or \"SELL\", got {0:?}")]
    Side(String),
    #[error("{field} must be a decimal with at most {MAX_INT_DIGITS} integer and {AMOUNT_DECIMALS} fractional digits (like \"12.5\"), got {value:?}")]
    Amount { field: &'static str, value: String },
    #[error("markets must list 1 to {MAX_MARKETS} entries, got {0}")]
    MarketCount(usize),
    #[error("markets entries are condition ids (0x + 64 hex digits) or token ids (decimal, at most {MAX_TOKEN_DIGITS} digits), got {0:?}")]
    Market(String),
}

/// Markets a filter lets through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Markets {
    /// Lowercase `0x…` condition ids.
    pub conditions: BTreeSet<String>,
    /// Decimal token ids without leading zeros.
    pub tokens: BTreeSet<String>,
}

/// A validated filter. An empty [`Markets`] matches nothing (the API never stores one; a stored
/// filter that no longer parses is read as that, see [`Filter::from_stored`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub side: Option<Side>,
    /// Micro-units (6 decimals).
    pub min_shares: Option<u128>,
    pub min_collateral: Option<u128>,
    pub markets: Option<Markets>,
}

/// What a filter looks at in one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub side: Side,
    /// Micro-units, saturating at `u128::MAX` (above any filter's minimum).
    pub shares: u128,
    pub collateral: u128,
    pub token_id: String,
    /// Lowercase, when the market is resolved.
    pub condition_id: Option<String>,
}

impl Facts {
    /// The facts of a stored row with its market (as the message about it carries it).
    pub fn of_row(row: &TradeRow, market: Option<&Market>) -> Facts {
        Facts {
            side: if row.side == 0 { Side::Buy } else { Side::Sell },
            shares: trade_micro(&row.shares),
            collateral: trade_micro(&row.collateral),
            token_id: row.token_id.clone(),
            condition_id: market
                .and_then(|m| m.condition_id.as_deref())
                .map(str::to_ascii_lowercase),
        }
    }

    /// The facts of a rendered message.
    pub fn of_message(m: &TradeMessage) -> Facts {
        Facts {
            side: if m.trade.side == "BUY" {
                Side::Buy
            } else {
                Side::Sell
            },
            shares: trade_micro(&m.trade.shares),
            collateral: trade_micro(&m.trade.collateral),
            token_id: m.trade.token_id.clone(),
            condition_id: m
                .market
                .as_ref()
                .and_then(|m| m.condition_id.as_deref())
                .map(str::to_ascii_lowercase),
        }
    }
}

impl Filter {
    /// Validate a spec. `Ok(None)` when it narrows nothing (`{}`).
    pub fn parse(spec: &FilterSpec) -> Result<Option<Filter>, FilterError> {
        let side = match spec.side.as_deref() {
            None => None,
            Some("BUY") => Some(Side::Buy),
            Some("SELL") => Some(Side::Sell),
            Some(other) => return Err(FilterError::Side(other.into())),
        };
        let amount = |field: &'static str, v: &Option<String>| {
            v.as_deref()
                .map(|s| {
                    parse_micro(s).ok_or_else(|| FilterError::Amount {
                        field,
                        value: s.into(),
                    })
                })
                .transpose()
        };
        let min_shares = amount("min_shares", &spec.min_shares)?;
        let min_collateral = amount("min_collateral", &spec.min_collateral)?;
        let markets = match &spec.markets {
            None => None,
            Some(list) if list.is_empty() || list.len() > MAX_MARKETS => {
                return Err(FilterError::MarketCount(list.len()))
            }
            Some(list) => {
                let mut m = Markets::default();
                for entry in list {
                    match market_ref(entry) {
                        Some(MarketKey::Condition(c)) => m.conditions.insert(c),
                        Some(MarketKey::Token(t)) => m.tokens.insert(t),
                        None => return Err(FilterError::Market(entry.clone())),
                    };
                }
                Some(m)
            }
        };
        let f = Filter {
            side,
            min_shares,
            min_collateral,
            markets,
        };
        Ok((f != Filter::default()).then_some(f))
    }

    /// A filter as stored by the API (`jsonb` text). One that does not parse (never written by
    /// the API) matches nothing: a filter narrows, so an unreadable one must not widen.
    pub fn from_stored(text: &str) -> Option<Filter> {
        match serde_json::from_str::<FilterSpec>(text)
            .map_err(|e| e.to_string())
            .and_then(|s| Filter::parse(&s).map_err(|e| e.to_string()))
        {
            Ok(f) => f,
            Err(error) => {
                tracing::warn!(%error, "stored filter unreadable: it matches nothing");
                Some(Filter {
                    markets: Some(Markets::default()),
                    ..Filter::default()
                })
            }
        }
    }

    /// The canonical spec: amounts without redundant zeros, condition ids lowercase, token ids
    /// without leading zeros, markets sorted (conditions first) and without duplicates.
    pub fn spec(&self) -> FilterSpec {
        FilterSpec {
            side: self.side.map(|s| s.as_str().to_string()),
            min_shares: self.min_shares.map(format_micro),
            min_collateral: self.min_collateral.map(format_micro),
            markets: self.markets.as_ref().map(|m| {
                m.conditions
                    .iter()
                    .chain(m.tokens.iter())
                    .cloned()
                    .collect()
            }),
        }
    }

    /// Whether a message with these facts passes.
    pub fn matches(&self, f: &Facts) -> bool {
        self.side.is_none_or(|s| s == f.side)
            && self.min_shares.is_none_or(|m| f.shares >= m)
            && self.min_collateral.is_none_or(|m| f.collateral >= m)
            && self.markets.as_ref().is_none_or(|m| {
                m.tokens.contains(&f.token_id)
                    || f.condition_id
                        .as_ref()
                        .is_some_and(|c| m.conditions.contains(c))
            })
    }
}

/// Whether a message passes an optional filter (none: everything passes).
pub fn passes(filter: Option<&Filter>, facts: &Facts) -> bool {
    filter.is_none_or(|f| f.matches(facts))
}

enum MarketKey {
    Condition(String),
    Token(String),
}

fn market_ref(s: &str) -> Option<MarketKey> {
    if let Some(hex) = s.strip_prefix("0x") {
        return (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| MarketKey::Condition(s.to_ascii_lowercase()));
    }
    if s.is_empty() || s.len() > MAX_TOKEN_DIGITS || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let t = s.trim_start_matches('0');
    Some(MarketKey::Token(if t.is_empty() { "0" } else { t }.into()))
}

/// Parse an exact decimal (`^[0-9]{1,30}(\.[0-9]{1,6})?$`) into micro-units.
pub fn parse_micro(s: &str) -> Option<u128> {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    let digits =
        |x: &str, max: usize| (1..=max).contains(&x.len()) && x.bytes().all(|b| b.is_ascii_digit());
    if !digits(int, MAX_INT_DIGITS) || frac.is_some_and(|f| !digits(f, AMOUNT_DECIMALS)) {
        return None;
    }
    let frac = frac.unwrap_or("");
    let mut v: u128 = int.parse().ok()?;
    v = v.checked_mul(10u128.pow(AMOUNT_DECIMALS as u32))?;
    let f: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    let f = f * 10u128.pow((AMOUNT_DECIMALS - frac.len()) as u32);
    v.checked_add(f)
}

/// A trade's amount (a plain decimal rendered by pmw, 6 decimals at most) in micro-units,
/// saturating at `u128::MAX`; a malformed one (never rendered by pmw) counts as 0.
pub fn trade_micro(s: &str) -> u128 {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty()
        || frac.len() > AMOUNT_DECIMALS
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return 0;
    }
    let scale = 10u128.pow(AMOUNT_DECIMALS as u32);
    let f: u128 = format!("{frac:0<6}").parse().unwrap_or(0);
    match int.parse::<u128>() {
        Ok(i) => i.checked_mul(scale).and_then(|v| v.checked_add(f)),
        Err(_) => None, // more digits than u128 holds
    }
    .unwrap_or(u128::MAX)
}

/// Render micro-units as the shortest exact decimal: 12_500_000 → "12.5", 1 → "0.000001".
pub fn format_micro(v: u128) -> String {
    let scale = 10u128.pow(AMOUNT_DECIMALS as u32);
    let (int, frac) = (v / scale, v % scale);
    if frac == 0 {
        return int.to_string();
    }
    let f = format!("{frac:06}");
    format!("{int}.{}", f.trim_end_matches('0'))
}

#[cfg(test)]
mod tests;

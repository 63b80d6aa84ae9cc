//! Subscription plans as the operator configures them (`PMW_API_PLANS`, `PMW_API_DEFAULT_PLAN`;
//! table in the API's config module). Read by pmw-api (which enforces them and publishes them to
//! the `plans` table for push) and by `pmwctl account create` (which checks the plan it is given).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::{ConfigError, Validate};

/// Limits of one subscription plan.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub max_wallets: u32,
    pub max_webhook_endpoints: u32,
    pub max_ws_sessions: u32,
    /// Markets an account may follow (distinct condition ids over its market subscriptions;
    /// an event counts each of its markets). Absent: [`DEFAULT_MAX_MARKETS`].
    #[serde(default = "default_max_markets")]
    pub max_markets: u32,
    /// The least `filter.min_collateral` (USDC, an exact decimal like `"100"`) a market
    /// subscription may have: a busy market without a floor is a firehose. `"0"`: no floor.
    /// Absent: [`DEFAULT_MARKET_MIN_COLLATERAL`].
    #[serde(default = "default_market_min_collateral")]
    pub market_min_collateral: String,
}

/// Markets a plan that does not say lets an account follow.
pub const DEFAULT_MAX_MARKETS: u32 = 10;
/// The `min_collateral` floor of market subscriptions on a plan that does not say (USDC).
pub const DEFAULT_MARKET_MIN_COLLATERAL: &str = "100";

fn default_max_markets() -> u32 {
    DEFAULT_MAX_MARKETS
}

fn default_market_min_collateral() -> String {
    DEFAULT_MARKET_MIN_COLLATERAL.into()
}

impl Plan {
    /// The plan's `min_collateral` floor for market subscriptions, in micro-units (validated
    /// at load: [`validate`]).
    pub fn market_floor(&self) -> u128 {
        crate::filter::parse_micro(&self.market_min_collateral).unwrap_or(0)
    }
}

/// The configured plans and the one new accounts get.
#[derive(Debug, Clone, Deserialize)]
pub struct Plans {
    #[serde(default = "default_plan")]
    pub api_default_plan: String,
    #[serde(
        default = "default_plans",
        deserialize_with = "plans_from_table_or_json"
    )]
    pub api_plans: BTreeMap<String, Plan>,
}

impl Plans {
    pub fn load() -> Result<Plans, ConfigError> {
        crate::config::load()
    }

    /// The plan named `name`, or the default plan when `name` is not configured (any more).
    pub fn plan(&self, name: &str) -> (&str, &Plan) {
        plan(&self.api_default_plan, &self.api_plans, name)
    }
}

impl Validate for Plans {
    fn validate(&self) -> Result<(), ConfigError> {
        validate(&self.api_default_plan, &self.api_plans)
    }
}

/// The plan named `name` in `plans`, or the default plan when `name` is not configured (any
/// more). `plans` must hold `default` ([`validate`]).
pub fn plan<'a>(
    default: &'a str,
    plans: &'a BTreeMap<String, Plan>,
    name: &str,
) -> (&'a str, &'a Plan) {
    match plans.get_key_value(name) {
        Some((k, p)) => (k.as_str(), p),
        None => (default, &plans[default]),
    }
}

/// At least one plan, and the default is one of them.
pub fn validate(default: &str, plans: &BTreeMap<String, Plan>) -> Result<(), ConfigError> {
    if plans.is_empty() {
        return Err(ConfigError::invalid(
            "PMW_API_PLANS",
            "at least one plan is required",
        ));
    }
    if let Some((name, p)) = plans
        .iter()
        .find(|(_, p)| crate::filter::parse_micro(&p.market_min_collateral).is_none())
    {
        return Err(ConfigError::invalid(
            "PMW_API_PLANS",
            format!(
                "plan {name:?}: market_min_collateral must be an exact decimal like \"100\", got {:?}",
                p.market_min_collateral
            ),
        ));
    }
    if !plans.contains_key(default) {
        return Err(ConfigError::invalid(
            "PMW_API_DEFAULT_PLAN",
            format!(
                "plan {default:?} is not one of {:?}",
                plans.keys().collect::<Vec<_>>()
            ),
        ));
    }
    Ok(())
}

/// `PMW_API_PLANS` arrives as a JSON string from the environment, a table from TOML.
pub fn plans_from_table_or_json<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, Plan>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Table(BTreeMap<String, Plan>),
        Json(String),
    }
    match Raw::deserialize(d)? {
        Raw::Table(t) => Ok(t),
        Raw::Json(s) => serde_json::from_str(&s).map_err(serde::de::Error::custom),
    }
}

pub fn default_plan() -> String {
    "free".into()
}

pub fn default_plans() -> BTreeMap<String, Plan> {
    BTreeMap::from([
        (
            "free".to_string(),
            Plan {
                max_wallets: 10,
                max_webhook_endpoints: 1,
                max_ws_sessions: 2,
                max_markets: 5,
                market_min_collateral: "1000".into(),
            },
        ),
        (
            "pro".to_string(),
            Plan {
                max_wallets: 500,
                max_webhook_endpoints: 10,
                max_ws_sessions: 50,
                max_markets: 100,
                market_min_collateral: "100".into(),
            },
        ),
    ])
}

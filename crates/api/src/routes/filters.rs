//! Filters of subscriptions and webhook endpoints as the API takes and shows them: validated
//! into `pmw_core::filter::Filter` (422 `invalid_filter` with the reason), stored as their
//! canonical `FilterSpec` in a `jsonb` column (NULL: none), shown canonical, and read back to
//! apply where the API lists what push delivers (`GET /v1/trades`, webhook replay).

use std::collections::HashMap;

use pmw_core::filter::{Filter, FilterSpec};
use serde::{Deserialize, Deserializer};

use crate::error::ApiError;

/// Validate a filter as sent: `None` when absent, `null` or `{}` (it narrows nothing).
pub fn parse(spec: Option<&FilterSpec>) -> Result<Option<Filter>, ApiError> {
    match spec {
        None => Ok(None),
        Some(s) => {
            Filter::parse(s).map_err(|e| ApiError::unprocessable("invalid_filter", e.to_string()))
        }
    }
}

/// The text stored in the `filter` column (`$n::text::jsonb`): the canonical spec, or NULL.
pub fn stored(filter: Option<&Filter>) -> Option<String> {
    filter.map(|f| serde_json::to_string(&f.spec()).expect("a filter spec serialises"))
}

/// A PATCH's filter field (see [`present`]) as an update of the `filter` column: `None` when
/// absent (unchanged), else `Some` of the text to store (NULL: none).
pub fn change(field: Option<&Option<FilterSpec>>) -> Result<Option<Option<String>>, ApiError> {
    field
        .map(|spec| parse(spec.as_ref()).map(|f| stored(f.as_ref())))
        .transpose()
}

/// A stored filter (`filter::text`) as shown in responses.
pub fn shown(text: Option<&str>) -> Option<FilterSpec> {
    text.and_then(|t| serde_json::from_str(t).ok())
}

/// For `Option<Option<T>>` request fields: absent → `None`, `null` → `Some(None)` (clear),
/// a value → `Some(Some(v))`. Use with `#[serde(default, deserialize_with = "present")]`.
pub fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// The filters of the account's followed wallets (lowercase `0x…` → filter; only wallets that
/// have one).
pub async fn of_account(
    c: &super::txn::Client,
    account_id: i64,
) -> Result<HashMap<String, Filter>, ApiError> {
    Ok(
        c.query(include_str!("sql/subscription_filters.sql"), &[&account_id])
            .await?
            .iter()
            .filter_map(|r| {
                let wallet = format!("0x{}", hex::encode(r.get::<_, &[u8]>(0)));
                Some((wallet, Filter::from_stored(r.get(1))?))
            })
            .collect(),
    )
}

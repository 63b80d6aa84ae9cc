//! `delivery_log` in ClickHouse: one row per webhook attempt, written by push's recorder and
//! read by the API's delivery log and endpoint health.

use serde::{Deserialize, Serialize};

/// One webhook attempt (`delivery_log`). The API's delivery log reads it without its owner
/// (`endpoint_id`, `account_id`): `pmw-api`'s `Attempt`, tied to it by a test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clickhouse::Row)]
pub struct DeliveryLogRow {
    pub delivery_id: String,
    pub endpoint_id: u64,
    pub account_id: u64,
    pub attempt: u32,
    /// `trade`, `retract` or `final` ([`crate::message::Kind`]).
    pub kind: String,
    pub block_number: u64,
    pub log_index: u32,
    pub t_attempt_ms: i64,
    pub duration_ms: i64,
    /// 0 when no response arrived.
    pub status_code: u16,
    /// `delivered`, `retry`, `failed`, … (pmw-push's retry outcome).
    pub outcome: String,
    pub error: String,
}

/// Where a delivery log page starts: below this `(t_attempt_ms, delivery_id, attempt)`, or at
/// the newest attempt (`None`).
pub type PageCursor = Option<(i64, String, u32)>;

/// One page of an endpoint's attempts, newest first by `(t_attempt_ms, delivery_id, attempt)`,
/// at most `limit`, read into the caller's row type (columns `delivery_id, attempt, kind,
/// block_number, log_index, t_attempt_ms, duration_ms, status_code, outcome, error`).
pub async fn page<T>(
    ch: &crate::ch::ChClient,
    endpoint_id: u64,
    below: &PageCursor,
    limit: u64,
) -> Result<Vec<T>, clickhouse::error::Error>
where
    T: clickhouse::RowOwned + clickhouse::RowRead,
{
    let (t, did, attempt) = match below {
        Some((t, did, attempt)) => (*t, did.as_str(), *attempt),
        None => (i64::MAX, "", u32::MAX),
    };
    ch.query(super::statements::DELIVERY_LOG_PAGE)
        .bind(endpoint_id)
        .bind(u8::from(below.is_none()))
        .bind(t)
        .bind(did)
        .bind(attempt)
        .bind(limit)
        .fetch_all()
        .await
}

/// An endpoint's attempts since a time and how many of them delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clickhouse::Row)]
pub struct HealthCounts {
    pub attempts: u64,
    pub delivered: u64,
}

/// The attempts of `endpoint_id` at or after `since_ms`, and how many delivered.
pub async fn health_counts(
    ch: &crate::ch::ChClient,
    endpoint_id: u64,
    since_ms: i64,
) -> Result<HealthCounts, clickhouse::error::Error> {
    ch.query(super::statements::DELIVERY_LOG_HEALTH)
        .bind(endpoint_id)
        .bind(since_ms)
        .fetch_one()
        .await
}

/// The newest attempt of `endpoint_id` that did not deliver, read into the caller's row type
/// (columns `t_attempt_ms, status_code, outcome, error`).
pub async fn last_error<T>(
    ch: &crate::ch::ChClient,
    endpoint_id: u64,
) -> Result<Option<T>, clickhouse::error::Error>
where
    T: clickhouse::RowOwned + clickhouse::RowRead,
{
    ch.query(super::statements::DELIVERY_LOG_LAST_ERROR)
        .bind(endpoint_id)
        .fetch_optional()
        .await
}

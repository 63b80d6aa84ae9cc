//! `delivery_log` in ClickHouse: one row per webhook attempt, written by push's recorder and
//! read by the API's delivery log.

use serde::{Deserialize, Serialize};

/// One webhook attempt (`delivery_log`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clickhouse::Row)]
pub struct DeliveryLogRow {
    pub delivery_id: String,
    pub endpoint_id: u64,
    pub account_id: u64,
    pub attempt: u32,
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

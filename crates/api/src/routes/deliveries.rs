//! The delivery log of an endpoint: every attempt, from ClickHouse `delivery_log`, newest first,
//! keyset-paginated (sending them again is [`super::replay`]).

use axum::extract::State;
use axum::Json;
use pmw_core::ch::delivery_log;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::endpoint::owned;
use super::params::check_limit;
use crate::auth::Auth;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiPath, ApiQuery};
use crate::AppState;

/// Default and largest page of the delivery log.
pub const LOG_DEFAULT_LIMIT: u32 = 100;
pub const LOG_MAX_LIMIT: u32 = 1_000;

// An attempt is a `delivery_log` row ([`pmw_core::ch::DeliveryLogRow`]) without its owner
// (endpoint and account): the tests below tie the two, the page statement and the documented kinds.
/// One attempt.
#[derive(Debug, Serialize, Deserialize, ToSchema, clickhouse::Row)]
pub struct Attempt {
    /// The message's `webhook-id` (stable across retries).
    pub delivery_id: String,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// `trade`, `retract` or `final`.
    pub kind: String,
    pub block_number: u64,
    pub log_index: u32,
    pub t_attempt_ms: i64,
    pub duration_ms: i64,
    /// HTTP status, 0 when no response arrived.
    pub status_code: u16,
    /// `delivered`, `retry`, `failed`, `gone`, …
    pub outcome: String,
    pub error: String,
}

/// One attempt, with the chat message that carried its delivery.
#[derive(Debug, Serialize, ToSchema)]
pub struct LoggedAttempt {
    #[serde(flatten)]
    pub attempt: Attempt,
    /// Chat endpoints: the message that last carried this delivery (`webhook_deliveries`); the
    /// deliveries one digest carried share it. Absent for signed webhooks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptPage {
    pub attempts: Vec<LoggedAttempt>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    pub next: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// From a previous page's `next`.
    #[param(pattern = r"^[0-9]{1,15}\.[0-9]{1,9}\.[A-Za-z0-9_-]{1,200}$")]
    pub cursor: Option<String>,
    /// Page size, 1..=1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// `<t_attempt_ms>.<attempt>.<delivery_id>`: the position after which older attempts follow.
fn parse_log_cursor(s: &str) -> Result<(i64, u32, String), ApiError> {
    let bad = || {
        ApiError::bad_request(
            "invalid_cursor",
            format!("{s:?} is not a delivery log cursor"),
        )
    };
    let (t, rest) = s.split_once('.').ok_or_else(bad)?;
    let (a, id) = rest.split_once('.').ok_or_else(bad)?;
    let digits =
        |x: &str, max: usize| (1..=max).contains(&x.len()) && x.bytes().all(|b| b.is_ascii_digit());
    let id_ok = (1..=200).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !digits(t, 15) || !digits(a, 9) || !id_ok {
        return Err(bad());
    }
    Ok((
        t.parse().map_err(|_| bad())?,
        a.parse().map_err(|_| bad())?,
        id.to_string(),
    ))
}

/// Attempts of one endpoint, newest first.
#[utoipa::path(get, path = "/v1/webhooks/{id}/deliveries", tag = "webhooks", security(("api_key" = [])),
    params(("id" = i64, Path), LogQuery),
    responses((status = 200, body = AttemptPage), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn log(
    State(st): State<AppState>,
    who: Auth,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<LogQuery>,
) -> Result<Json<AttemptPage>, ApiError> {
    let limit = check_limit(q.limit, LOG_DEFAULT_LIMIT, LOG_MAX_LIMIT)?;
    let below = match &q.cursor {
        Some(s) => {
            let (t, attempt, did) = parse_log_cursor(s)?;
            Some((t, did, attempt))
        }
        None => None,
    };
    let c = st.pg.get().await?;
    owned(&c, who.account_id, id).await?;
    // Newest first by (t_attempt_ms, delivery_id, attempt); the first page starts above all.
    let mut rows: Vec<Attempt> =
        delivery_log::page(&st.ch, id as u64, &below, u64::from(limit) + 1).await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next = more
        .then(|| {
            rows.last()
                .map(|r| format!("{}.{}.{}", r.t_attempt_ms, r.attempt, r.delivery_id))
        })
        .flatten();
    let ids: Vec<&str> = rows.iter().map(|r| r.delivery_id.as_str()).collect();
    let carried: std::collections::HashMap<String, String> = c
        .query(include_str!("sql/message_ids.sql"), &[&ids])
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let attempts = rows
        .into_iter()
        .map(|attempt| LoggedAttempt {
            message_id: carried.get(&attempt.delivery_id).cloned(),
            attempt,
        })
        .collect();
    Ok(Json(AttemptPage { attempts, next }))
}

#[cfg(test)]
mod tests {
    use super::Attempt;
    use clickhouse::Row;
    use pmw_core::ch::{statements, DeliveryLogRow};
    use pmw_core::message::Kind;
    use utoipa::openapi::schema::Schema;
    use utoipa::openapi::RefOr;
    use utoipa::PartialSchema;

    #[test]
    fn an_attempt_is_a_delivery_log_row_without_its_owner_and_the_page_reads_it() {
        let owner = ["endpoint_id", "account_id"];
        let row: Vec<&str> = DeliveryLogRow::COLUMN_NAMES
            .iter()
            .copied()
            .filter(|c| !owner.contains(c))
            .collect();
        assert_eq!(Attempt::COLUMN_NAMES, row.as_slice());
        let select = statements::DELIVERY_LOG_PAGE
            .split_once("FROM")
            .unwrap()
            .0
            .trim_start_matches("SELECT");
        let read: Vec<&str> = select.split(',').map(str::trim).collect();
        assert_eq!(read, row);
    }

    #[test]
    fn an_attempts_documented_kinds_are_every_kind_of_message() {
        let RefOr::T(Schema::Object(attempt)) = Attempt::schema() else {
            panic!("an object schema");
        };
        let Some(RefOr::T(Schema::Object(kind))) = attempt.properties.get("kind") else {
            panic!("a kind property");
        };
        let doc = kind.description.clone().unwrap_or_default();
        for k in [Kind::Trade, Kind::Retract, Kind::Final] {
            assert!(doc.contains(&format!("`{}`", k.as_str())), "{doc}");
        }
    }
}

//! Bulk follow/unfollow (`POST /v1/subscriptions/bulk`): up to the plan's wallet limit in one
//! call, all-or-nothing. Every entry is checked first; any invalid entry (a malformed address, a
//! bad label or filter, a wallet listed twice, an unfollow of a wallet not followed) refuses the whole
//! call with 422 and one error per entry, and a result over the plan's limit with 403; nothing
//! changes then. Otherwise everything is applied in one transaction (one push notification).

use std::collections::HashSet;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use pmw_core::filter::Filter;
use pmw_core::pg::accounts::MAX_LABEL_CHARS;
use pmw_core::{Address, UnixMs};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::subscriptions::{AddSubscription, Subscription};
use crate::auth::Auth;
use crate::error::{ApiError, ErrorDetail};
use crate::extract::ApiJson;
use crate::AppState;

/// Wallets to follow and to unfollow, in one all-or-nothing change.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkChange {
    /// Wallets to follow, each with its optional filter (already followed ones are left as they
    /// are, filter included).
    #[serde(default)]
    #[schema(max_items = 1000)]
    pub follow: Vec<AddSubscription>,
    /// Wallets to stop following; each must be followed now.
    #[serde(default)]
    #[schema(max_items = 1000, example = json!(["0x2222222222222222222222222222222222222222"]))]
    pub unfollow: Vec<String>,
}

/// What the change did.
#[derive(Debug, Serialize, ToSchema)]
pub struct BulkOutcome {
    /// Newly followed.
    pub followed: Vec<Subscription>,
    /// Listed in `follow` but already followed (unchanged).
    pub already_followed: Vec<Subscription>,
    /// No longer followed (lowercase hex).
    pub unfollowed: Vec<String>,
    /// Wallets followed after the change.
    pub total: i64,
    /// The plan's wallet limit.
    pub limit: u32,
}

/// One refused entry.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntryError {
    /// `follow` or `unfollow`.
    pub list: String,
    /// Position in that list (from 0).
    pub index: usize,
    /// The wallet as sent.
    pub wallet: String,
    /// `invalid_address`, `invalid_label`, `invalid_filter`, `duplicate`, `not_followed` or
    /// `plan_limit`.
    pub code: String,
    pub message: String,
}

/// A refused bulk change: the shared error and one entry per refused wallet.
#[derive(Debug, Serialize, ToSchema)]
pub struct BulkError {
    pub error: ErrorDetail,
    /// One per refused entry (absent when the body itself was malformed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<EntryError>>,
}

struct Refused(StatusCode, &'static str, String, Vec<EntryError>);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let body = BulkError {
            error: ErrorDetail {
                code: self.1.into(),
                message: self.2,
            },
            errors: Some(self.3),
        };
        (self.0, Json(body)).into_response()
    }
}

fn entry(list: &str, index: usize, wallet: &str, code: &str, message: String) -> EntryError {
    EntryError {
        list: list.into(),
        index,
        wallet: wallet.into(),
        code: code.into(),
        message,
    }
}

/// Follow and unfollow many wallets at once (all-or-nothing).
#[utoipa::path(post, path = "/v1/subscriptions/bulk", tag = "subscriptions", security(("api_key" = [])),
    request_body = BulkChange,
    responses((status = 200, body = BulkOutcome),
        (status = 403, body = BulkError, description = "the result would exceed the plan's wallet limit; nothing changed"),
        (status = 422, body = BulkError, description = "invalid entries (one error each) or more entries than the plan's limit; nothing changed")))]
pub async fn bulk(
    State(st): State<AppState>,
    who: Auth,
    ApiJson(body): ApiJson<BulkChange>,
) -> Result<Response, ApiError> {
    let max = st.cfg.plan(&who.plan).1.max_wallets;
    let entries = body.follow.len() + body.unfollow.len();
    if entries > max as usize {
        return Ok(Refused(
            StatusCode::UNPROCESSABLE_ENTITY,
            "too_many_entries",
            format!("at most {max} wallets per call (the plan's limit); {entries} were sent"),
            Vec::new(),
        )
        .into_response());
    }
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    let mut follow: Vec<(usize, Address, &str, Option<Filter>)> = Vec::new();
    for (i, f) in body.follow.iter().enumerate() {
        match f.wallet.parse::<Address>() {
            Err(e) => errors.push(entry(
                "follow",
                i,
                &f.wallet,
                "invalid_address",
                e.to_string(),
            )),
            Ok(_)
                if f.label.chars().count() > MAX_LABEL_CHARS
                    || f.label.chars().any(char::is_control) =>
            {
                errors.push(entry(
                    "follow",
                    i,
                    &f.wallet,
                    "invalid_label",
                    format!("at most {MAX_LABEL_CHARS} characters without control characters"),
                ))
            }
            Ok(a) if !seen.insert(a) => errors.push(entry(
                "follow",
                i,
                &f.wallet,
                "duplicate",
                "listed more than once".into(),
            )),
            Ok(a) => match f.filter.as_ref().map(Filter::parse).transpose() {
                Ok(filter) => follow.push((i, a, &f.label, filter.flatten())),
                Err(e) => errors.push(entry(
                    "follow",
                    i,
                    &f.wallet,
                    "invalid_filter",
                    e.to_string(),
                )),
            },
        }
    }
    let mut unfollow: Vec<(usize, Address)> = Vec::new();
    for (i, w) in body.unfollow.iter().enumerate() {
        match w.parse::<Address>() {
            Err(e) => errors.push(entry("unfollow", i, w, "invalid_address", e.to_string())),
            Ok(a) if !seen.insert(a) => errors.push(entry(
                "unfollow",
                i,
                w,
                "duplicate",
                "listed more than once".into(),
            )),
            Ok(a) => unfollow.push((i, a)),
        }
    }
    let mut c = st.pg.get().await?;
    let tx = c.transaction().await?;
    super::lock_account(&tx, who.account_id).await?;
    let rows = tx
        .query(
            "SELECT wallet, label, created_ms, filter::text FROM subscriptions WHERE account_id = $1",
            &[&who.account_id],
        )
        .await?;
    let mut current = std::collections::HashMap::new();
    for r in &rows {
        current.insert(r.get::<_, Vec<u8>>(0), r);
    }
    for (i, a) in &unfollow {
        if !current.contains_key(a.as_bytes().as_slice()) {
            errors.push(entry(
                "unfollow",
                *i,
                &body.unfollow[*i],
                "not_followed",
                "this wallet is not followed by this account".into(),
            ));
        }
    }
    if !errors.is_empty() {
        errors.sort_by_key(|e| (e.list != "follow", e.index));
        return Ok(Refused(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_entries",
            format!("{} entries were refused; nothing changed", errors.len()),
            errors,
        )
        .into_response());
    }
    let (new, old): (Vec<_>, Vec<_>) = follow
        .iter()
        .partition(|(_, a, _, _)| !current.contains_key(a.as_bytes().as_slice()));
    let total = current.len() as i64 + new.len() as i64 - unfollow.len() as i64;
    if total > i64::from(max) {
        let room = (i64::from(max) - current.len() as i64 + unfollow.len() as i64).max(0) as usize;
        let errors = new
            .iter()
            .skip(room)
            .map(|(i, _, _, _)| {
                entry(
                    "follow",
                    *i,
                    &body.follow[*i].wallet,
                    "plan_limit",
                    format!("beyond the plan's {max} wallets"),
                )
            })
            .collect();
        return Ok(Refused(
            StatusCode::FORBIDDEN,
            "plan_limit",
            format!(
                "the plan allows {max} wallets; this change would follow {total}; nothing changed"
            ),
            errors,
        )
        .into_response());
    }
    let now = UnixMs::now().0;
    let gone: Vec<&[u8]> = unfollow
        .iter()
        .map(|(_, a)| a.as_bytes().as_slice())
        .collect();
    if !gone.is_empty() {
        tx.execute(
            "DELETE FROM subscriptions WHERE account_id = $1 AND wallet = ANY($2)",
            &[&who.account_id, &gone],
        )
        .await?;
    }
    for (_, a, label, filter) in &new {
        tx.execute(
            "INSERT INTO subscriptions (account_id, wallet, label, created_ms, filter) VALUES ($1, $2, $3, $4, $5::text::jsonb)",
            &[&who.account_id, &a.as_bytes().as_slice(), label, &now, &super::filters::stored(filter.as_ref())],
        )
        .await?;
    }
    if !(new.is_empty() && gone.is_empty()) {
        super::notify_changes(&tx).await?;
    }
    tx.commit().await?;
    tracing::info!(
        account = who.account_id,
        followed = new.len(),
        unfollowed = gone.len(),
        "bulk subscriptions"
    );
    Ok(Json(BulkOutcome {
        followed: new
            .iter()
            .map(|(_, a, label, filter)| Subscription {
                wallet: a.to_lower_hex(),
                label: label.to_string(),
                created_ms: now,
                filter: filter.as_ref().map(Filter::spec),
            })
            .collect(),
        already_followed: old
            .iter()
            .map(|(_, a, _, _)| super::subscriptions::from_row(current[a.as_bytes().as_slice()]))
            .collect(),
        unfollowed: unfollow.iter().map(|(_, a)| a.to_lower_hex()).collect(),
        total,
        limit: max,
    })
    .into_response())
}

//! Bulk follow/unfollow (`POST /v1/subscriptions/bulk`): up to the plan's wallet limit in one
//! call, all-or-nothing. Every entry is checked first; any invalid entry (a malformed address, a
//! bad label or filter, a wallet listed twice, an unfollow of a wallet not followed) refuses the whole
//! call with 422 and one error per entry, and a result over the plan's limit with 403; nothing
//! changes then. Otherwise everything is applied in one transaction (one push notification).

use std::collections::{HashMap, HashSet};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use pmw_core::filter::Filter;
use pmw_core::{Address, UnixMs};
use serde::{Deserialize, Serialize};
use tokio_postgres::Row;
use utoipa::ToSchema;

use super::model::{label_ok, label_rule, AddSubscription, Subscription};
use super::store;
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

/// A refused change: nothing was applied.
#[derive(Debug)]
struct Refused {
    status: StatusCode,
    code: &'static str,
    message: String,
    errors: Vec<EntryError>,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let body = BulkError {
            error: ErrorDetail {
                code: self.code.into(),
                message: self.message,
            },
            errors: Some(self.errors),
        };
        (self.status, Json(body)).into_response()
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

/// A wallet to follow, checked.
#[derive(Debug)]
struct Follow<'a> {
    /// Its position in `follow`.
    index: usize,
    wallet: Address,
    label: &'a str,
    filter: Option<Filter>,
}

/// The entries of a change, checked on their own and against each other (not yet against what
/// the account follows).
#[derive(Debug, Default)]
struct Checked<'a> {
    follow: Vec<Follow<'a>>,
    /// Position in `unfollow` and the wallet.
    unfollow: Vec<(usize, Address)>,
    errors: Vec<EntryError>,
}

/// 422 when a call lists more entries than the plan's limit.
fn too_many(body: &BulkChange, max: u32) -> Option<Refused> {
    let entries = body.follow.len() + body.unfollow.len();
    (entries > max as usize).then(|| Refused {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        code: "too_many_entries",
        message: format!("at most {max} wallets per call (the plan's limit); {entries} were sent"),
        errors: Vec::new(),
    })
}

/// One `follow` entry: a valid address, label and filter, not listed before.
fn check_follow<'a>(
    index: usize,
    f: &'a AddSubscription,
    seen: &mut HashSet<Address>,
) -> Result<Follow<'a>, EntryError> {
    let refuse = |code, message| entry("follow", index, &f.wallet, code, message);
    let wallet = f
        .wallet
        .parse::<Address>()
        .map_err(|e| refuse("invalid_address", e.to_string()))?;
    if !label_ok(&f.label) {
        return Err(refuse("invalid_label", label_rule()));
    }
    if !seen.insert(wallet) {
        return Err(refuse("duplicate", "listed more than once".into()));
    }
    let filter = f
        .filter
        .as_ref()
        .map(Filter::parse)
        .transpose()
        .map_err(|e| refuse("invalid_filter", e.to_string()))?;
    Ok(Follow {
        index,
        wallet,
        label: &f.label,
        filter: filter.flatten(),
    })
}

/// One `unfollow` entry: a valid address, not listed before (in either list).
fn check_unfollow(
    index: usize,
    w: &str,
    seen: &mut HashSet<Address>,
) -> Result<(usize, Address), EntryError> {
    match w.parse::<Address>() {
        Err(e) => Err(entry(
            "unfollow",
            index,
            w,
            "invalid_address",
            e.to_string(),
        )),
        Ok(a) if !seen.insert(a) => Err(entry(
            "unfollow",
            index,
            w,
            "duplicate",
            "listed more than once".into(),
        )),
        Ok(a) => Ok((index, a)),
    }
}

/// Every entry checked, `follow` first (a wallet in both lists is a duplicate in `unfollow`).
fn check(body: &BulkChange) -> Checked<'_> {
    let mut seen = HashSet::new();
    let mut checked = Checked::default();
    for (i, f) in body.follow.iter().enumerate() {
        match check_follow(i, f, &mut seen) {
            Ok(f) => checked.follow.push(f),
            Err(e) => checked.errors.push(e),
        }
    }
    for (i, w) in body.unfollow.iter().enumerate() {
        match check_unfollow(i, w, &mut seen) {
            Ok(u) => checked.unfollow.push(u),
            Err(e) => checked.errors.push(e),
        }
    }
    checked
}

/// `unfollow` entries of wallets the account does not follow.
fn not_followed(
    body: &BulkChange,
    unfollow: &[(usize, Address)],
    followed: impl Fn(&Address) -> bool,
) -> Vec<EntryError> {
    unfollow
        .iter()
        .filter(|(_, a)| !followed(a))
        .map(|(i, _)| {
            entry(
                "unfollow",
                *i,
                &body.unfollow[*i],
                "not_followed",
                "this wallet is not followed by this account".into(),
            )
        })
        .collect()
}

/// 422 with one error per refused entry, in list order (`follow` first).
fn invalid_entries(mut errors: Vec<EntryError>) -> Refused {
    errors.sort_by_key(|e| (e.list != "follow", e.index));
    Refused {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        code: "invalid_entries",
        message: format!("{} entries were refused; nothing changed", errors.len()),
        errors,
    }
}

/// 403 when following `new` and unfollowing `unfollowing` wallets from `followed` now would
/// exceed `max`; the entries beyond the room left are the ones refused.
fn over_limit(
    body: &BulkChange,
    new: &[&Follow<'_>],
    followed: usize,
    unfollowing: usize,
    max: u32,
) -> Option<Refused> {
    let total = (followed + new.len()) as i64 - unfollowing as i64;
    if total <= i64::from(max) {
        return None;
    }
    let room = (i64::from(max) - followed as i64 + unfollowing as i64).max(0) as usize;
    let errors = new
        .iter()
        .skip(room)
        .map(|f| {
            entry(
                "follow",
                f.index,
                &body.follow[f.index].wallet,
                "plan_limit",
                format!("beyond the plan's {max} wallets"),
            )
        })
        .collect();
    Some(Refused {
        status: StatusCode::FORBIDDEN,
        code: "plan_limit",
        message: format!(
            "the plan allows {max} wallets; this change would follow {total}; nothing changed"
        ),
        errors,
    })
}

/// Unfollow, follow, and wake the push leader when anything changed.
async fn apply(
    tx: &tokio_postgres::Transaction<'_>,
    account: i64,
    new: &[&Follow<'_>],
    unfollow: &[(usize, Address)],
    now: i64,
) -> Result<(), tokio_postgres::Error> {
    let gone: Vec<&Address> = unfollow.iter().map(|(_, a)| a).collect();
    if !gone.is_empty() {
        store::remove(tx, account, &gone).await?;
    }
    for f in new {
        store::insert(tx, account, &f.wallet, f.label, now, f.filter.as_ref()).await?;
    }
    if !(new.is_empty() && gone.is_empty()) {
        super::super::txn::notify_changes(tx).await?;
    }
    Ok(())
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
    if let Some(refused) = too_many(&body, max) {
        return Ok(refused.into_response());
    }
    let Checked {
        follow,
        unfollow,
        mut errors,
    } = check(&body);
    let mut c = st.pg.get().await?;
    let tx = c.transaction().await?;
    super::super::txn::lock_account(&tx, who.account_id).await?;
    let current = store::by_wallet(&*tx, who.account_id).await?;
    let followed = |a: &Address| current.contains_key(a.as_bytes().as_slice());
    errors.extend(not_followed(&body, &unfollow, followed));
    if !errors.is_empty() {
        return Ok(invalid_entries(errors).into_response());
    }
    let (new, old): (Vec<&Follow<'_>>, Vec<&Follow<'_>>) =
        follow.iter().partition(|f| !followed(&f.wallet));
    if let Some(refused) = over_limit(&body, &new, current.len(), unfollow.len(), max) {
        return Ok(refused.into_response());
    }
    let now = UnixMs::now().0;
    apply(&tx, who.account_id, &new, &unfollow, now).await?;
    tx.commit().await?;
    tracing::info!(
        account = who.account_id,
        followed = new.len(),
        unfollowed = unfollow.len(),
        "bulk subscriptions"
    );
    Ok(Json(outcome(&new, &old, &unfollow, &current, now, max)).into_response())
}

/// What an applied change did.
fn outcome(
    new: &[&Follow<'_>],
    old: &[&Follow<'_>],
    unfollow: &[(usize, Address)],
    current: &HashMap<Vec<u8>, Row>,
    now: i64,
    max: u32,
) -> BulkOutcome {
    BulkOutcome {
        followed: new
            .iter()
            .map(|f| Subscription {
                wallet: f.wallet.to_lower_hex(),
                label: f.label.to_string(),
                created_ms: now,
                filter: f.filter.as_ref().map(Filter::spec),
            })
            .collect(),
        already_followed: old
            .iter()
            .map(|f| store::from_row(&current[f.wallet.as_bytes().as_slice()]))
            .collect(),
        unfollowed: unfollow.iter().map(|(_, a)| a.to_lower_hex()).collect(),
        total: (current.len() + new.len()) as i64 - unfollow.len() as i64,
        limit: max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0x1111111111111111111111111111111111111111";
    const B: &str = "0x2222222222222222222222222222222222222222";
    const C: &str = "0x3333333333333333333333333333333333333333";

    fn follow(wallet: &str, label: &str) -> AddSubscription {
        AddSubscription {
            wallet: wallet.into(),
            label: label.into(),
            filter: None,
        }
    }

    fn change(follow: Vec<AddSubscription>, unfollow: &[&str]) -> BulkChange {
        BulkChange {
            follow,
            unfollow: unfollow.iter().map(|w| w.to_string()).collect(),
        }
    }

    fn codes(errors: &[EntryError]) -> Vec<(&str, usize, &str)> {
        errors
            .iter()
            .map(|e| (e.list.as_str(), e.index, e.code.as_str()))
            .collect()
    }

    #[test]
    fn more_entries_than_the_plan_allows_is_refused_before_anything_else() {
        let body = change(vec![follow(A, ""), follow(B, "")], &[C]);
        assert!(too_many(&body, 3).is_none());
        let r = too_many(&body, 2).expect("refused");
        assert_eq!(
            (r.status, r.code),
            (StatusCode::UNPROCESSABLE_ENTITY, "too_many_entries")
        );
        assert_eq!(
            r.message,
            "at most 2 wallets per call (the plan's limit); 3 were sent"
        );
    }

    #[test]
    fn every_entry_is_checked_and_each_refusal_named() {
        let body = change(
            vec![
                follow(A, "ok"),
                follow("0x12", ""),
                follow(B, "bad\u{7}label"),
                follow(A, "again"),
            ],
            &[C, "nope", A],
        );
        let checked = check(&body);
        assert_eq!(
            codes(&checked.errors),
            [
                ("follow", 1, "invalid_address"),
                ("follow", 2, "invalid_label"),
                ("follow", 3, "duplicate"),
                ("unfollow", 1, "invalid_address"),
                ("unfollow", 2, "duplicate"),
            ]
        );
        assert_eq!(checked.follow.len(), 1);
        assert_eq!(
            (checked.follow[0].index, checked.follow[0].label),
            (0, "ok")
        );
        assert_eq!(checked.unfollow, [(0, C.parse::<Address>().unwrap())]);
    }

    #[test]
    fn unfollowing_a_wallet_not_followed_is_refused_and_errors_sort_by_list() {
        let body = change(vec![], &[A, B]);
        let checked = check(&body);
        let b = B.parse::<Address>().unwrap();
        let missing = not_followed(&body, &checked.unfollow, |a| *a == b);
        assert_eq!(codes(&missing), [("unfollow", 0, "not_followed")]);
        let mut errors = missing;
        errors.push(entry("follow", 4, A, "duplicate", String::new()));
        let r = invalid_entries(errors);
        assert_eq!(
            codes(&r.errors),
            [("follow", 4, "duplicate"), ("unfollow", 0, "not_followed")]
        );
        assert_eq!(r.message, "2 entries were refused; nothing changed");
    }

    #[test]
    fn the_plan_limit_refuses_the_follows_beyond_the_room_left() {
        let body = change(vec![follow(A, ""), follow(B, ""), follow(C, "")], &[]);
        let checked = check(&body);
        let new: Vec<&Follow<'_>> = checked.follow.iter().collect();
        // 3 followed, one unfollowed, limit 4: room for 2 of the 3 new.
        let r = over_limit(&body, &new, 3, 1, 4).expect("over the limit");
        assert_eq!((r.status, r.code), (StatusCode::FORBIDDEN, "plan_limit"));
        assert_eq!(codes(&r.errors), [("follow", 2, "plan_limit")]);
        assert_eq!(
            r.message,
            "the plan allows 4 wallets; this change would follow 5; nothing changed"
        );
        assert!(
            over_limit(&body, &new, 2, 1, 4).is_none(),
            "exactly at the limit"
        );
    }
}

//! A round's webhook deliveries: one per enabled endpoint of every account that follows the
//! message's wallet and wants its kind of event, with the body stamped once for the round.

use pmw_core::message::{stamp, Kind};
use pmw_core::store::TradeRow;

use super::{webhook_id, NewDelivery};
use crate::subs::Index;

/// The deliveries of one `trade` or `retract` about `row` to the endpoints of `accounts` (the
/// followers of its wallet in `idx`) that receive trades, body `body` stamped `now`.
pub fn deliveries_of(
    idx: &Index,
    accounts: Option<&Vec<i64>>,
    kind: Kind,
    row: &TradeRow,
    body: &str,
    now: i64,
) -> Vec<NewDelivery> {
    let endpoints: Vec<i64> = accounts
        .into_iter()
        .flatten()
        .flat_map(|a| idx.endpoints_by_account.get(a).into_iter().flatten())
        .copied()
        .filter(|e| idx.events_of(*e).trade)
        .collect();
    if endpoints.is_empty() {
        return Vec::new();
    }
    let payload = stamp(kind, body, now);
    endpoints
        .into_iter()
        .map(|endpoint| NewDelivery {
            id: webhook_id(row.cursor(), &row.block_hash, endpoint, kind),
            endpoint_id: endpoint,
            kind,
            cursor: row.cursor(),
            payload: payload.clone(),
            t_detect_ms: row.t_detect_ms,
        })
        .collect()
}

/// The finality lane's deliveries about `row` to the endpoints of `accounts` that receive
/// `final`s: `final` with the small body `brief` to endpoints that also get trades, with the full
/// body `full` to `final`-only ones; a `retract` (`kind`) goes to `final`-only endpoints alone
/// (the others get theirs from the webhook lane).
pub fn finals_of(
    idx: &Index,
    accounts: Option<&Vec<i64>>,
    kind: Kind,
    row: &TradeRow,
    (full, brief): (&str, &str),
    now: i64,
) -> Vec<NewDelivery> {
    let mut out = Vec::new();
    let (mut full_payload, mut brief_payload) = (None, None);
    let endpoints = accounts
        .into_iter()
        .flatten()
        .flat_map(|a| idx.endpoints_by_account.get(a).into_iter().flatten());
    for &endpoint in endpoints {
        let events = idx.events_of(endpoint);
        let payload = match (kind, events.final_only()) {
            (Kind::Final, true) | (Kind::Retract, true) => {
                full_payload.get_or_insert_with(|| stamp(kind, full, now))
            }
            (Kind::Final, false) if events.fin => {
                brief_payload.get_or_insert_with(|| stamp(kind, brief, now))
            }
            _ => continue,
        };
        out.push(NewDelivery {
            id: webhook_id(row.cursor(), &row.block_hash, endpoint, kind),
            endpoint_id: endpoint,
            kind,
            cursor: row.cursor(),
            payload: payload.clone(),
            t_detect_ms: row.t_detect_ms,
        });
    }
    out
}

//! A round's webhook deliveries: one per enabled endpoint of every account that follows the
//! message's wallet and whose filters let it through, with the body stamped once for the round.

use pmw_core::filter::Facts;
use pmw_core::message::{stamp, Kind};
use pmw_core::store::TradeRow;

use super::{webhook_id, NewDelivery};
use crate::subs::Index;

/// The deliveries of one `kind` message about `row` to the endpoints of `accounts` (the
/// followers of its wallet in `idx`), body `body` stamped `now`. A trade goes to the endpoints
/// whose subscription and endpoint filters pass `facts`; a retract to every endpoint of the
/// followers (the enqueue keeps only those that got, or still get, its trade).
pub fn deliveries_of(
    idx: &Index,
    accounts: Option<&Vec<i64>>,
    kind: Kind,
    row: &TradeRow,
    facts: &Facts,
    body: &str,
    now: i64,
) -> Vec<NewDelivery> {
    let facts = (kind == Kind::Trade).then_some(facts);
    let endpoints = idx.endpoints_for(accounts.map_or(&[], Vec::as_slice), &row.maker, facts);
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

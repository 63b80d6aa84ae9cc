//! A round's webhook deliveries: one per enabled endpoint of every account that follows the
//! message's wallet or market (once, when it follows both), wants its kind of event and whose filters let it through, with the body
//! stamped once for the round.

use pmw_core::ch::TradeRow;
use pmw_core::filter::Facts;
use pmw_core::message::{stamp, Kind};

use super::{webhook_id, NewDelivery};
use pmw_session::hub::Item;
use pmw_session::subs::Index;

/// The deliveries of one `trade` or `retract` about `row` to the endpoints of the followers of
/// its wallet or market in `idx` that receive trades, body `body` stamped `now`. A trade
/// goes to the endpoints whose subscription and endpoint filters pass `facts`; a retract to
/// every endpoint (the enqueue keeps only those that got, or still get, its trade, whether or
/// not their account still follows the wallet).
pub fn deliveries_of(
    idx: &Index,
    kind: Kind,
    row: &TradeRow,
    facts: &Facts,
    body: &str,
    now: i64,
) -> Vec<NewDelivery> {
    let facts = (kind == Kind::Trade).then_some(facts);
    let candidates = if kind == Kind::Retract {
        // Every endpoint, not only the wallet's followers now: one that stopped following it
        // after its trade was sent is owed the retract too, and the enqueue keeps exactly the
        // endpoints that got (or may still get) the trade. Retracts are rare (reorgs, audit
        // corrections), so the wider candidate list costs little.
        idx.all_endpoints()
    } else {
        idx.endpoints_for(&row.maker, &row.token_id, facts)
    };
    let endpoints: Vec<i64> = candidates
        .into_iter()
        .filter(|e| idx.events_of(*e).trade)
        .collect();
    if endpoints.is_empty() {
        return Vec::new();
    }
    let payload = stamp(kind, body, now);
    endpoints
        .into_iter()
        .map(|endpoint| delivery(row, endpoint, kind, &payload))
        .collect()
}

/// One `kind` delivery about `row` to `endpoint`, with its stable `webhook-id`.
fn delivery(row: &TradeRow, endpoint: i64, kind: Kind, payload: &str) -> NewDelivery {
    NewDelivery {
        id: webhook_id(row.cursor(), &row.block_hash, endpoint, kind),
        endpoint_id: endpoint,
        kind,
        cursor: row.cursor(),
        payload: payload.to_string(),
        t_detect_ms: row.t_detect_ms,
    }
}

/// The finality lane's deliveries of `item` (a `final` or a `retract` about `row`) to the
/// endpoints of the followers of its wallet or market that receive `final`s and whose filters pass the item's facts (as for
/// its trade): a `final` with the small body (`brief`) to endpoints that also get trades, with the
/// full body to `final`-only ones; a `retract` goes to `final`-only endpoints alone (the others
/// get theirs from the webhook lane; the enqueue keeps only those that got its `final`).
pub fn finals_of(idx: &Index, row: &TradeRow, item: &Item, now: i64) -> Vec<NewDelivery> {
    let (kind, facts) = (item.kind, &item.facts);
    let (full, brief) = (
        item.body.as_str(),
        item.brief.as_deref().unwrap_or(&item.body),
    );
    let mut out = Vec::new();
    let (mut full_payload, mut brief_payload) = (None, None);
    let facts = (kind == Kind::Final).then_some(facts);
    let endpoints = idx.endpoints_for(&row.maker, &row.token_id, facts);
    for endpoint in endpoints {
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
        out.push(delivery(row, endpoint, kind, payload));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A retract is offered to every endpoint, followers of its wallet now or not (the enqueue
    /// keeps those that got its trade); a trade only to the followers' endpoints.
    #[test]
    fn a_retract_is_offered_to_endpoints_whose_account_stopped_following() {
        let row = pmw_testkit::rows::trade(7, 0, "0xab");
        let mut idx = Index::default();
        // Account 1 (endpoint 10) follows the maker; account 2 (endpoint 20) stopped.
        idx.endpoints_by_account.insert(1, vec![10]);
        idx.endpoints_by_account.insert(2, vec![20]);
        idx.accounts_by_wallet.insert(row.maker.clone(), vec![1]);
        let facts = Facts::of_row(&row, None);
        let to = |kind| {
            let mut v: Vec<i64> = deliveries_of(&idx, kind, &row, &facts, "{}", 1)
                .into_iter()
                .map(|d| d.endpoint_id)
                .collect();
            v.sort_unstable();
            v
        };
        assert_eq!(to(Kind::Trade), vec![10]);
        assert_eq!(to(Kind::Retract), vec![10, 20]);
        idx.accounts_by_wallet.clear();
        let none = deliveries_of(&idx, Kind::Retract, &row, &facts, "{}", 1);
        assert_eq!(none.len(), 2, "no follower left: still offered");
    }
}

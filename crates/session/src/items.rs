//! A round's rows as hub items, rendered once for every session: its retractions, then its
//! trades, in ledger order. The leader's WebSocket lane and an edge reading the same round from
//! the bus build the same items here, and so do the finality lane and an edge for `final`s.

use std::sync::Arc;

use super::hub::Item;
use pmw_core::ch::TradeRow;
use pmw_core::message::{FinalNotice, Kind, Market, TradeMessage};

/// The items of a round: `retracts` then `rows`, each with the market it is rendered with; a
/// trade (and its retract, the same body) names the pending fill it confirms (`pending`: the
/// ledger's `pending_id` of the row).
pub fn round_items<'a>(
    retracts: impl IntoIterator<Item = (&'a TradeRow, Option<&'a Market>)>,
    rows: impl IntoIterator<Item = (&'a TradeRow, Option<&'a Market>)>,
    pending: impl Fn(&TradeRow) -> Option<i64>,
) -> Vec<Arc<Item>> {
    let retracts = retracts.into_iter().map(|(r, m)| (Kind::Retract, r, m));
    let trades = rows.into_iter().map(|(r, m)| (Kind::Trade, r, m));
    retracts
        .chain(trades)
        .map(|(kind, row, market)| {
            let pending_id = pending(row);
            let body = TradeMessage::from_row(row, market)
                .confirming(pending_id)
                .to_json();
            Arc::new(Item {
                pending_id,
                ..Item::of_row(kind, row, market, body, None)
            })
        })
        .collect()
}

/// The `final` stream's items of a round: `retracts`, then a `final` per row (the full body
/// with `finalized: true` for `final`-only sessions, the small [`FinalNotice`] for the others).
pub fn final_items<'a>(
    retracts: impl IntoIterator<Item = (&'a TradeRow, Option<&'a Market>)>,
    rows: impl IntoIterator<Item = (&'a TradeRow, Option<&'a Market>)>,
) -> Vec<Arc<Item>> {
    let retracts = retracts.into_iter().map(|(r, m)| (Kind::Retract, r, m));
    let finals = rows.into_iter().map(|(r, m)| (Kind::Final, r, m));
    retracts
        .chain(finals)
        .map(|(kind, row, market)| {
            let full = TradeMessage::from_row(row, market)
                .finalized(kind == Kind::Final)
                .to_json();
            let brief = (kind == Kind::Final).then(|| FinalNotice::from_row(row).to_json());
            Arc::new(Item::of_row(kind, row, market, full, brief))
        })
        .collect()
}

//! A round's rows as hub items, rendered once for every session: its retractions, then its
//! trades, in ledger order. The leader's WebSocket lane and an edge reading the same round from
//! the bus build the same items here.

use std::sync::Arc;

use super::hub::Item;
use crate::ch::TradeRow;
use crate::message::{Kind, Market, TradeMessage};

/// The items of a round: `retracts` then `rows`, each with the market it is rendered with.
pub fn round_items<'a>(
    retracts: impl IntoIterator<Item = (&'a TradeRow, Option<&'a Market>)>,
    rows: impl IntoIterator<Item = (&'a TradeRow, Option<&'a Market>)>,
) -> Vec<Arc<Item>> {
    let retracts = retracts.into_iter().map(|(r, m)| (Kind::Retract, r, m));
    let trades = rows.into_iter().map(|(r, m)| (Kind::Trade, r, m));
    retracts
        .chain(trades)
        .map(|(kind, row, market)| {
            let body = TradeMessage::from_row(row, market).to_json();
            Arc::new(Item::of_row(kind, row, market, body, None))
        })
        .collect()
}

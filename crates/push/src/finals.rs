//! The finality lane's delivery: `final` events for trades at or below the finalized watermark,
//! never ahead of the WebSocket lane's dispatched position nor of the webhook lane's cursor (its
//! [`Rounds::bound`]), so a trade's `final` never precedes its `trade`. Queues the `final`
//! webhook deliveries in the transaction that moves `final_cursor` (fenced by the epoch), then
//! feeds the hub's `final` stream. Sessions and endpoints that also get trades receive a small
//! [`FinalNotice`]; `final`-only ones the full body with `finalized: true`.

use std::sync::Arc;

use pmw_core::ch::TradeRow;
use pmw_core::message::{FinalNotice, Kind, TradeMessage};
use pmw_core::UnixMs;

use crate::hub::{Item, Stream};
use crate::rounds::{Read, RoundError, RoundOutcome, Rounds};
use crate::subs::Index;
use crate::webhook;

impl Rounds {
    pub(crate) async fn deliver_finals(
        &mut self,
        mut client: deadpool_postgres::Object,
        idx: &Index,
        retracts: &[TradeRow],
        rows: &[TradeRow],
        read: Read,
    ) -> Result<RoundOutcome, RoundError> {
        let now = UnixMs::now().0;
        let mut items = Vec::with_capacity(rows.len() + retracts.len());
        let mut deliveries = Vec::new();
        for (kind, row) in retracts
            .iter()
            .map(|r| (Kind::Retract, r))
            .chain(rows.iter().map(|r| (Kind::Final, r)))
        {
            let market = self.names.get(&row.token_id);
            let full = TradeMessage::from_row(row, market)
                .finalized(kind == Kind::Final)
                .to_json();
            let brief = (kind == Kind::Final).then(|| FinalNotice::from_row(row).to_json());
            // The same filters decide as for its trade (same row, same market).
            let item = Item::of_row(kind, row, market, full, brief);
            if let Some(accounts) = idx.accounts_by_wallet.get(&row.maker) {
                deliveries.extend(webhook::finals_of(
                    idx,
                    Some(accounts),
                    kind,
                    row,
                    &item.facts,
                    (&item.body, item.brief.as_deref().unwrap_or(&item.body)),
                    now,
                ));
            }
            items.push(Arc::new(item));
        }
        let enqueued = self
            .move_and_queue(
                &mut client,
                include_str!("sql/final_round.sql"),
                read,
                &deliveries,
                now,
            )
            .await?;
        self.log_cancelled(idx, &enqueued.cancelled);
        if read.rewound {
            self.hub.rewind(read.from_pos, Stream::Final);
        }
        let frames = self
            .hub
            .dispatch_stream(&items, read.through_pos, Stream::Final);
        self.moved(read);
        Ok(RoundOutcome {
            trades: read.trades,
            retracted: retracts.len(),
            frames,
            webhooks: enqueued.inserted,
            webhooks_skipped: enqueued.skipped,
            more: read.more,
            ..RoundOutcome::default()
        })
    }
}

//! The pending tier as the session layer sends it (issue 43, docs/SETTLEMENT.md): the rows of
//! `pending_events` and the open `pending_fills` (migration 0023) rendered as hub items of kind
//! `pending` or `void`, once for every session. Push's pending lane reads the events after its
//! own in-memory id ([`events_after`]); a session opted in is sent the fills still open when it
//! connects or resumes ([`open_for`]) and, on a resume, the voids since its resume point
//! ([`voids_since`]). These items take no ledger position.

use std::sync::Arc;

use pmw_core::message::{CalldataFill, Kind, Market, PendingFill, PendingMessage, VoidMessage};
use pmw_core::Position;
use tokio_postgres::{GenericClient, Row};

use crate::hub::Item;

/// One pending-tier event with its fill (an open fill, for a resume); in edge mode it travels
/// the bus in a `pending` part ([`crate::bus::round`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingRow {
    /// The event's id (0 for an open fill read on a resume).
    pub event_id: i64,
    pub kind: Kind,
    pub reason: Option<String>,
    /// The fill was still open when read.
    pub open: bool,
    pub fill_id: i64,
    pub tx_hash: String,
    pub order_hash: String,
    pub maker: String,
    pub taker: String,
    pub token_id: String,
    pub side: i16,
    pub making: String,
    pub taking: String,
    pub exchange: String,
    pub first_seen_ms: i64,
}

impl PendingRow {
    fn of(r: &Row) -> PendingRow {
        PendingRow {
            event_id: r.get(0),
            kind: match r.get::<_, &str>(1) {
                "void" => Kind::Void,
                _ => Kind::Pending,
            },
            reason: r.get(2),
            open: r.get(3),
            fill_id: r.get(4),
            tx_hash: r.get(5),
            order_hash: r.get(6),
            maker: r.get(7),
            taker: r.get(8),
            token_id: r.get(9),
            side: r.get(10),
            making: r.get(11),
            taking: r.get(12),
            exchange: r.get(13),
            first_seen_ms: r.get(14),
        }
    }

    /// Whether this row is delivered: a `void`, or a `pending` whose fill is still open.
    pub fn deliverable(&self) -> bool {
        self.kind == Kind::Void || self.open
    }

    fn fill(&self) -> PendingFill {
        PendingFill::of_calldata(CalldataFill {
            tx_hash: &self.tx_hash,
            exchange: &self.exchange,
            order_hash: &self.order_hash,
            maker: &self.maker,
            taker: &self.taker,
            side: self.side,
            token_id: &self.token_id,
            making: &self.making,
            taking: &self.taking,
        })
    }

    /// The hub item: a `pending` (the fill as the calldata names it) or a `void` (its reason),
    /// with the filters' facts of the fill, so a `void` goes where its `pending` went.
    pub fn item(&self, market: Option<&Market>) -> Arc<Item> {
        let fill = self.fill();
        let facts = fill.facts(market);
        let body = match self.kind {
            Kind::Void => VoidMessage {
                pending_id: self.fill_id,
                reason: self.reason.clone().unwrap_or_default(),
                wallet: fill.wallet.clone(),
                tx_hash: fill.tx_hash.clone(),
                order_hash: fill.order_hash.clone(),
            }
            .to_json(),
            _ => PendingMessage {
                pending_id: self.fill_id,
                t_seen_ms: self.first_seen_ms,
                fill,
                market: market.cloned(),
            }
            .to_json(),
        };
        Arc::new(Item {
            kind: self.kind,
            cursor: Position::default().cursor,
            position: Position::default(),
            wallet: self.maker.clone(),
            facts,
            t_detect_ms: self.first_seen_ms,
            audit: false,
            body,
            brief: None,
            pending_id: Some(self.fill_id),
            stamped: Default::default(),
        })
    }
}

/// The newest event id appended before `before_ms` (0: none): where a pending lane starts.
pub async fn newest_event(
    c: &impl GenericClient,
    before_ms: i64,
) -> Result<i64, tokio_postgres::Error> {
    let r = c
        .query_one(
            "SELECT coalesce(max(id), 0) FROM pending_events WHERE created_ms < $1",
            &[&before_ms],
        )
        .await?;
    Ok(r.get(0))
}

/// The events after `after`, in id order, at most `limit`.
pub async fn events_after(
    c: &impl GenericClient,
    after: i64,
    limit: i64,
) -> Result<Vec<PendingRow>, tokio_postgres::Error> {
    let rows = c
        .query(include_str!("sql/pending_events.sql"), &[&after, &limit])
        .await?;
    Ok(rows.iter().map(PendingRow::of).collect())
}

/// The open pending fills of `wallets` and market `tokens`, in id order.
pub async fn open_for(
    c: &impl GenericClient,
    wallets: &[String],
    tokens: &[String],
) -> Result<Vec<PendingRow>, tokio_postgres::Error> {
    let rows = c
        .query(include_str!("sql/pending_open.sql"), &[&wallets, &tokens])
        .await?;
    Ok(rows.iter().map(PendingRow::of).collect())
}

/// The voids of `wallets` and market `tokens` since the resume point's `block` was detected, at
/// most `limit` (the newest), in id order: what a resuming session opted in is sent after the
/// open fills.
pub async fn voids_since(
    c: &impl GenericClient,
    wallets: &[String],
    tokens: &[String],
    block: i64,
    limit: i64,
) -> Result<Vec<PendingRow>, tokio_postgres::Error> {
    let rows = c
        .query(
            include_str!("sql/pending_voids_since.sql"),
            &[&wallets, &tokens, &block, &limit],
        )
        .await?;
    let mut out: Vec<PendingRow> = rows.iter().map(PendingRow::of).collect();
    out.sort_by_key(|r| r.event_id);
    Ok(out)
}

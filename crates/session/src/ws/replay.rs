//! A session's replay of what it missed: `(after, through]` of its wallets and markets, page by page from
//! the ledger store (bounded memory per session), in ledger order, skipping what its filters keep
//! out (as live frames do), rendered as its streams need. Past `push_resume_max_trades` rows
//! READ (sent or filtered out: the window bounds the work) the client gets a `resync` naming the
//! last one sent and backfills over REST.

use std::collections::HashMap;

use axum::extract::ws::WebSocket;
use pmw_core::ch::{PushLatencyRow, TradeRow};
use pmw_core::filter::Facts;
use pmw_core::message::{stamp, Control, FinalNotice, Kind, Market, TradeMessage};
use pmw_core::{pg, Cursor, Position, UnixMs};

use super::{send, Ended};
use crate::recorder::Fact;
use crate::subs::{Filters, Follows, MarketFilters};
use crate::SessionState;

/// Trades read per replay page.
const REPLAY_PAGE: u64 = 500;

/// How replayed rows are rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Render {
    /// `trade`, `finalized` when at or below the final stream's position.
    Trade { finalized_through: Cursor },
    /// `final` with the full body (a `final`-only session).
    FinalFull,
    /// `final` with the small body (a `trade,final` session).
    FinalBrief,
}

impl Render {
    /// The message about `row` (naming the pending fill it confirmed, if any), and the latency
    /// channel it counts in.
    fn message(
        self,
        row: &TradeRow,
        market: Option<&Market>,
        pending_id: Option<i64>,
    ) -> (Kind, String, &'static str) {
        let message = || TradeMessage::from_row(row, market).confirming(pending_id);
        match self {
            Render::Trade { finalized_through } => (
                Kind::Trade,
                message()
                    .finalized(row.cursor() <= finalized_through)
                    .to_json(),
                "ws",
            ),
            Render::FinalFull => (Kind::Final, message().finalized(true).to_json(), "ws_final"),
            Render::FinalBrief => (
                Kind::Final,
                FinalNotice::from_row(row).to_json(),
                "ws_final",
            ),
        }
    }
}

/// Whose replay: the session's account and what it follows.
#[derive(Clone, Copy)]
pub(super) struct Viewer<'a> {
    pub account: i64,
    pub wallets: &'a [String],
    pub filters: &'a Filters,
    pub markets: &'a MarketFilters,
    /// The followed markets' token ids (sorted), read besides the wallets.
    pub tokens: &'a [String],
}

impl<'a> Viewer<'a> {
    /// What the viewer follows, to decide a message once (wallet or market).
    pub fn follows(&self) -> Follows<'a> {
        Follows {
            wallets: self.wallets,
            filters: self.filters,
            markets: self.markets,
        }
    }
}

/// Replay `(after, through]` for `who`, rendered as `render`; `sent_one` sees each position
/// sent and `after` ends at the last one.
pub(super) async fn replay(
    st: &SessionState,
    socket: &mut WebSocket,
    who: Viewer<'_>,
    after: &mut Cursor,
    through: Cursor,
    render: Render,
    mut sent_one: impl FnMut(Position),
) -> Result<(), Ended> {
    let max = st.cfg.resume_max_trades;
    // Rows read, sent or filtered out alike: the window bounds the work, not only the output
    // (a filter that keeps nothing out of millions of rows would otherwise read them all).
    let mut scanned = 0u64;
    // Where the next page starts: past filtered-out trades too.
    let mut read = *after;
    loop {
        let page = REPLAY_PAGE.min(max - scanned + 1);
        let rows = {
            let c = st
                .pool
                .get()
                .await
                .map_err(|e| Ended::Failed(e.to_string()))?;
            pmw_core::pg::ledger::followed_trades_between(
                &**c,
                &st.ch,
                pmw_core::pg::ledger::Whose {
                    wallets: who.wallets,
                    tokens: who.tokens,
                },
                read,
                through,
                page,
            )
            .await
            .map_err(|e| Ended::Failed(e.to_string()))?
        };
        let full = rows.len() as u64 >= page;
        read = rows.last().map_or(read, |r| r.cursor());
        let names = names(st, &rows).await?;
        let confirmed = pending_ids(st, &rows).await?;
        for row in rows {
            if scanned == max {
                return resync(socket, *after).await;
            }
            scanned += 1;
            let market = names.get(&row.token_id);
            if !who
                .follows()
                .wants(&row.maker, &Facts::of_row(&row, market))
            {
                continue;
            }
            let now = UnixMs::now().0;
            let key = (row.block_number, row.log_index, row.block_hash.clone());
            let pending_id = confirmed.get(&key).copied();
            let (kind, body, channel) = render.message(&row, market, pending_id);
            send(socket, stamp(kind, &body, now)).await?;
            let row_at = row.cursor();
            let written = Written {
                cursor: row_at,
                t_detect_ms: row.t_detect_ms,
                t_push_ms: now,
                channel,
                backfilled: true,
                pending_id: None,
            };
            st.recorder
                .record(Fact::Latency(latency_row(written, who.account, st.epoch)));
            *after = row_at;
            sent_one(Position::of(row_at, &row.block_hash));
        }
        if !full {
            return Ok(());
        }
    }
}

/// The resume window is exceeded: tell the client where to backfill from, and end.
async fn resync(socket: &mut WebSocket, after: Cursor) -> Result<(), Ended> {
    let msg = Control::Resync {
        after: after.to_string(),
        reason: "resume window exceeded: backfill with GET /v1/trades".into(),
    };
    send(socket, msg.to_json()).await?;
    Err(Ended::Policy(
        "resume window exceeded; backfill over REST".into(),
    ))
}

/// The market names of a replay page, as live frames carry them.
pub(super) async fn names(
    st: &SessionState,
    rows: &[TradeRow],
) -> Result<HashMap<String, Market>, Ended> {
    let c = st
        .pool
        .get()
        .await
        .map_err(|e| Ended::Failed(e.to_string()))?;
    pg::market_names_of(&**c, rows)
        .await
        .map_err(|e| Ended::Failed(pg::describe(&e)))
}

/// The pending fills that a replay page's trades confirmed (`ledger.pending_id`), by identity
/// (block number, log index, block hash): a replayed trade names its pending as a live one does.
/// One read of the page's block range; rows older than the ledger's Postgres part have none.
async fn pending_ids(
    st: &SessionState,
    rows: &[TradeRow],
) -> Result<HashMap<(u64, u32, String), i64>, Ended> {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return Ok(HashMap::new());
    };
    let c = st
        .pool
        .get()
        .await
        .map_err(|e| Ended::Failed(e.to_string()))?;
    let (from, to) = (first.block_number as i64, last.block_number as i64);
    let found = c
        .query(include_str!("../sql/ledger_pending_ids.sql"), &[&from, &to])
        .await
        .map_err(|e| Ended::Failed(pg::describe(&e)))?;
    Ok(found
        .iter()
        .map(|r| {
            let key = (
                r.get::<_, i64>(0) as u64,
                r.get::<_, i32>(1) as u32,
                r.get::<_, String>(2),
            );
            (key, r.get::<_, i64>(3))
        })
        .collect())
}

/// Voids a resume is sent at most (the newest): far more than a client ever holds open.
const RESUME_VOIDS: i64 = 1_000;

/// The pending fills still open of what the viewer follows, for a session opted in to
/// `pending`: sent after the replay, so a resume gets what is still to confirm or be voided;
/// the live lane's frames of the same fills are then not sent again (`at` remembers them). A
/// resume (`since`) is also sent the voids since its resume point's block: a `pending` the client
/// held when it went away ends for it even if its `void` went out meanwhile.
pub(super) async fn open_pending(
    st: &SessionState,
    socket: &mut WebSocket,
    who: Viewer<'_>,
    since: Option<Position>,
    at: &mut super::sent::At,
) -> Result<(), Ended> {
    let failed = |e: tokio_postgres::Error| Ended::Failed(pg::describe(&e));
    let c = st
        .pool
        .get()
        .await
        .map_err(|e| Ended::Failed(e.to_string()))?;
    let mut rows = crate::pending::open_for(&**c, who.wallets, who.tokens)
        .await
        .map_err(failed)?;
    if let Some(p) = since {
        let block = p.cursor.block as i64;
        let voids = crate::pending::voids_since(&**c, who.wallets, who.tokens, block, RESUME_VOIDS)
            .await
            .map_err(failed)?;
        rows.extend(voids);
    }
    if rows.is_empty() {
        return Ok(());
    }
    let tokens: Vec<&str> = rows.iter().map(|r| r.token_id.as_str()).collect();
    let names = pg::market_names(&**c, &tokens).await.map_err(failed)?;
    drop(c);
    let (now, mut out) = (UnixMs::now().0, Vec::new());
    for row in rows {
        let item = row.item(names.get(&row.token_id));
        if who.follows().wants(&item.wallet, &item.facts) {
            at.frame(crate::hub::Frame::Item(item), now, &mut out);
        }
    }
    super::send_all(socket, out).await
}

/// A frame written to a session: what its latency row records.
pub(super) struct Written {
    pub cursor: Cursor,
    pub t_detect_ms: i64,
    pub t_push_ms: i64,
    pub channel: &'static str,
    /// Replayed from the ledger (a resume), not pushed live.
    pub backfilled: bool,
    /// A `pending`'s fill, or the one a trade confirmed.
    pub pending_id: Option<i64>,
}

/// The latency row of a frame written to `account`'s session by a server of `epoch`.
pub(super) fn latency_row(w: Written, account: i64, epoch: i64) -> PushLatencyRow {
    PushLatencyRow {
        block_number: w.cursor.block,
        log_index: w.cursor.log_index,
        channel: w.channel.into(),
        target_id: account as u64,
        t_detect_ms: w.t_detect_ms,
        t_push_ms: w.t_push_ms,
        epoch: epoch as u64,
        backfilled: u8::from(w.backfilled),
        // Not a webhook attempt.
        attempt: 0,
        pending_id: w.pending_id.map_or(0, |id| id.max(0) as u64),
    }
}

//! The `/v1/ws` endpoint: authenticate (API key header or browser ticket), register with the hub,
//! replay what the client missed since its cursor, then stream live frames in ledger order with
//! heartbeats. Close codes: 1008 auth/policy, 1012 restart, 1013 slow consumer or a store that did
//! not answer (try again later).
//!
//! `events` chooses the streams: `trade` (default: trades and retracts as ingested), `final`
//! (only the finalized ledger: each trade once, as a `final` with the full body, when its block
//! is finalized; `since` and the session's cursor are then positions in that stream), or
//! `trade,final` (trades as ingested, and a small `final` naming each one once its block is
//! finalized, never before its `trade`; `final_since` resumes the finals, default `since`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use governor::clock::{Clock, DefaultClock};
use pmw_core::auth::{self, Principal};
use pmw_core::ch::{trades, PushLatencyRow};
use pmw_core::filter::Facts;
use pmw_core::message::{stamp, Control, Events, FinalNotice, Kind, TradeMessage};
use pmw_core::{pg, Cursor, Position, UnixMs};
use serde_json::json;
use tokio::sync::mpsc;

use crate::hub::{Frame, Registration, TooMany};
use crate::recorder::Fact;
use crate::subs::Filters;
use crate::{subs, AppState};

const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Trades read per replay page.
const REPLAY_PAGE: u64 = 500;

pub async fn upgrade(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    // `Bearer <key>`, the scheme in any case (as the REST API accepts it).
    let bearer = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, key)| key.trim().to_string());
    let who = match (bearer, q.get("ticket")) {
        (Some(key), _) => auth::account_for_key(&st.pool, &key).await,
        (None, Some(t)) => auth::redeem_ticket(&st.pool, t).await,
        (None, None) => Err(auth::AuthError::Missing),
    };
    // Connects per account are rate limited before the upgrade: one account's reconnect storm
    // costs the others nothing.
    if let Ok(p) = &who {
        if let Err(not_until) = st.connects.check_key(&p.account_id) {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
            let body = json!({"error": {"code": "rate_limited", "message": format!("too many WebSocket connects for this account; retry in {secs} s")}});
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, secs.to_string())],
                axum::Json(body),
            )
                .into_response();
        }
    }
    let since = q.get("since").map(|s| s.parse::<Position>());
    let opts = Options::parse(&q);
    ws.read_buffer_size(4 * 1024)
        .write_buffer_size(8 * 1024)
        .max_message_size(16 * 1024)
        .on_upgrade(move |socket| session(st, socket, who, since, opts))
}

/// The stream options of a connection: `events` and `final_since`.
#[derive(Debug, Clone, Copy)]
struct Options {
    events: Events,
    final_since: Option<Cursor>,
}

impl Options {
    /// A bad value is reported when the socket is open (close 1008 with the reason).
    fn parse(q: &HashMap<String, String>) -> Result<Options, String> {
        let events = match q.get("events") {
            None => Events::TRADE,
            Some(list) => Events::parse(list).map_err(|e| format!("invalid events: {e}"))?,
        };
        let final_since = match q.get("final_since") {
            None => None,
            Some(c) => Some(
                c.split(':')
                    .next()
                    .unwrap_or_default()
                    .parse::<Cursor>()
                    .map_err(|e| format!("invalid final_since: {e}"))?,
            ),
        };
        Ok(Options {
            events,
            final_since,
        })
    }
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let frame = CloseFrame {
        code,
        reason: reason.to_string().into(),
    };
    let _ = tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Close(Some(frame)))).await;
}

async fn session(
    st: AppState,
    mut socket: WebSocket,
    who: Result<Principal, auth::AuthError>,
    since: Option<Result<Position, pmw_core::types::PositionError>>,
    opts: Result<Options, String>,
) {
    let who = match who {
        Ok(p) => p,
        Err(auth::AuthError::Store(e)) => {
            tracing::warn!(error = %e, "ws auth unavailable");
            return close(&mut socket, 1013, "try again later").await;
        }
        Err(e) => return close(&mut socket, 1008, &e.to_string()).await,
    };
    let since = match since {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => return close(&mut socket, 1008, &format!("invalid since: {e}")).await,
    };
    let opts = match opts {
        Ok(o) => o,
        Err(e) => return close(&mut socket, 1008, &e).await,
    };
    let account = who.account_id;
    // The wallets this session follows, read now: fresher than any index a round may still use.
    let grant = match subs::grant(&st.pool, account).await {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(error = %e, "ws subscriptions unavailable");
            return close(&mut socket, 1013, "try again later").await;
        }
    };
    let wallets = grant.wallets.clone();
    let filters = grant.filters.clone();
    let (tx, mut rx) = mpsc::channel::<Frame>(st.cfg.push_ws_queue);
    let code = Arc::new(AtomicU16::new(1013));
    let registered = st.hub.register(Registration {
        account_id: account,
        key_id: who.key_id,
        max_sessions: grant.max_sessions,
        wallets: grant.wallets,
        filters: grant.filters,
        version: grant.version,
        events: opts.events,
        tx,
        close: code.clone(),
    });
    let reg = match registered {
        Ok(r) => r,
        Err(TooMany(max)) => {
            let reason = format!("session limit reached: the plan allows {max} WebSocket sessions");
            return close(&mut socket, 1008, &reason).await;
        }
    };
    let id = reg.id;
    let outcome = stream(
        &st,
        &mut socket,
        (account, id),
        (&wallets, &filters),
        since,
        opts,
        reg,
        &mut rx,
    )
    .await;
    st.hub.unregister(id);
    match outcome {
        Ok(()) => {
            let c = code.load(Ordering::SeqCst);
            let reason = match c {
                1012 => "service restart",
                1008 => "credentials revoked or account disabled",
                _ => "slow consumer: resume with since",
            };
            close(&mut socket, c, reason).await;
        }
        Err(Ended::Client) => {}
        Err(Ended::Policy(reason)) => close(&mut socket, 1008, &reason).await,
        Err(Ended::Failed(e)) => {
            // Every such failure is a store (Postgres, ClickHouse) that did not answer: the
            // client should come back, resuming where it was, not give up (1011 would say so).
            tracing::warn!(session = id, error = %e, "ws session failed: store unavailable");
            close(
                &mut socket,
                1013,
                "store unavailable: resume with since shortly",
            )
            .await;
        }
    }
}

enum Ended {
    Client,
    Policy(String),
    /// A store did not answer (closed 1013: try again later).
    Failed(String),
}

async fn send(socket: &mut WebSocket, text: String) -> Result<(), Ended> {
    match tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Text(text.into()))).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(Ended::Client),
    }
}

/// What a session has sent: where it stands in the ledger and what the client may hold.
struct Sent {
    /// Trades after this are sent; a reorg moves it back to the common ancestor.
    last: Cursor,
    /// The resume point to report: `last` with its block's hash.
    position: Position,
    /// The highest cursor the client may hold: a `retract` above it is not the client's.
    held: Cursor,
    /// Trades sent on this connection (cursor and block hash prefix), so a new-branch trade the
    /// replay already sent is not sent twice after a rewind. Bounded to the recent blocks.
    recent: std::collections::BTreeSet<(Cursor, Option<[u8; 4]>)>,
}

impl Sent {
    fn new(at: Position, held: Cursor) -> Sent {
        Sent {
            last: at.cursor,
            position: at,
            held,
            recent: Default::default(),
        }
    }

    fn trade(&mut self, at: Position) {
        self.last = at.cursor;
        self.position = at;
        self.held = self.held.max(at.cursor);
        self.recent.insert((at.cursor, at.hash));
        let floor = at.cursor.block.saturating_sub(RECENT_BLOCKS);
        while self.recent.first().is_some_and(|(c, _)| c.block < floor) {
            self.recent.pop_first();
        }
    }
}

/// Blocks of sent trades remembered against duplicates after a rewind (beyond any reorg depth).
const RECENT_BLOCKS: u64 = 256;

/// How replayed rows are rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Render {
    /// `trade`, `finalized` when at or below the final stream's position.
    Trade { finalized_through: Cursor },
    /// `final` with the full body (a `final`-only session).
    FinalFull,
    /// `final` with the small body (a `trade,final` session).
    FinalBrief,
}

/// Replay then live. `Ok(())` when the hub let the session go (restart or slow consumer).
#[allow(clippy::too_many_arguments)]
async fn stream(
    st: &AppState,
    socket: &mut WebSocket,
    (account, id): (i64, u64),
    (wallets, filters): (&[String], &Filters),
    since: Option<Position>,
    opts: Options,
    reg: crate::hub::Registered,
    rx: &mut mpsc::Receiver<Frame>,
) -> Result<(), Ended> {
    let final_only = opts.events.final_only();
    // A `final`-only session's ledger is the finalized one.
    let dispatched = if final_only {
        reg.final_dispatched
    } else {
        reg.dispatched
    };
    let start = match since {
        Some(since) => crate::resume::start(&st.pool, &st.ch, since, wallets)
            .await
            .map_err(Ended::Failed)?,
        None => crate::resume::Start {
            from: dispatched,
            retract: Vec::new(),
        },
    };
    let mut sent = Sent::new(start.from, since.map_or(dispatched.cursor, |s| s.cursor));
    // A `trade,final` session's finals: sent after this trade (a new session starts with the
    // trades it is about to get).
    let mut finals = (opts.events.trade && opts.events.fin).then(|| {
        opts.final_since
            .or(since.map(|s| s.cursor))
            .unwrap_or(dispatched.cursor)
    });
    let hello = Control::Hello {
        session: id,
        account,
        epoch: st.epoch,
        cursor: sent.last.to_string(),
        resume: sent.position.to_string(),
        head: st.hub.head(),
        final_cursor: finals.map(|c| c.to_string()),
    };
    send(socket, hello.to_json()).await?;
    if !start.retract.is_empty() {
        let names = names(st, &start.retract).await?;
        for row in &start.retract {
            let market = names.get(&row.token_id);
            if !subs::wants(filters, &row.maker, &Facts::of_row(row, market)) {
                continue; // filtered out: never sent to this client
            }
            let body = TradeMessage::from_row(row, market).to_json();
            send(socket, stamp(Kind::Retract, &body, UnixMs::now().0)).await?;
        }
    }
    if sent.last < dispatched.cursor {
        let render = if final_only {
            Render::FinalFull
        } else {
            Render::Trade {
                finalized_through: reg.final_dispatched.cursor,
            }
        };
        let mut after = sent.last;
        let to = (wallets, filters);
        replay(
            st,
            socket,
            account,
            to,
            &mut after,
            dispatched.cursor,
            render,
            |p| sent.trade(p),
        )
        .await?;
    }
    // Finals after the trades they name: every trade at or below the final stream's position
    // was sent before (at or below `since`) or just replayed.
    if let Some(fin) = finals
        .as_mut()
        .filter(|f| **f < reg.final_dispatched.cursor)
    {
        let through = reg.final_dispatched.cursor;
        let to = (wallets, filters);
        replay(
            st,
            socket,
            account,
            to,
            fin,
            through,
            Render::FinalBrief,
            |_| {},
        )
        .await?;
    }
    let every = Duration::from_millis(st.cfg.push_ws_heartbeat_ms);
    let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let mut at = At {
        account,
        final_only,
        sent,
        finals,
    };
    loop {
        tokio::select! {
            frame = rx.recv() => {
                let Some(frame) = frame else { return Ok(()) };
                // This frame and whatever else is already queued: written, then flushed once
                // (one write per burst instead of one per frame).
                let mut out = Vec::new();
                live_frame(st, &mut at, frame, &mut out);
                while out.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(f) => live_frame(st, &mut at, f, &mut out),
                        Err(_) => break,
                    }
                }
                send_all(socket, out).await?;
            }
            _ = heartbeat.tick() => {
                let hb = Control::Heartbeat {
                    head: st.hub.head(),
                    cursor: at.sent.last.to_string(),
                    resume: at.sent.position.to_string(),
                    t_ms: UnixMs::now().0,
                    final_cursor: at.finals.map(|c| c.to_string()),
                };
                send(socket, hb.to_json()).await?;
            }
            msg = socket.next() => match msg {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return Err(Ended::Client),
                Some(Ok(_)) => {}
            },
        }
    }
}

/// A live session's state.
struct At {
    account: i64,
    final_only: bool,
    sent: Sent,
    /// A `trade,final` session's last `final`.
    finals: Option<Cursor>,
}

/// Frames written per flush at most.
const MAX_BATCH: usize = 64;

/// What one live frame adds to the session's output: a stamped trade (or a `final`-only
/// session's `final`) not sent yet, a small `final` after its trade, a retract of a trade the
/// client may hold, nothing for a rewind (it moves the session back instead).
fn live_frame(st: &AppState, at: &mut At, frame: Frame, out: &mut Vec<String>) {
    let sent = &mut at.sent;
    let item = match frame {
        Frame::Rewind(to) => {
            // A reorg: the new branch after the common ancestor comes again.
            if to.cursor < sent.last {
                sent.last = to.cursor;
                sent.position = to;
            }
            return;
        }
        Frame::Item(item) => item,
    };
    let now = UnixMs::now().0;
    let channel = match item.kind {
        Kind::Trade => "ws",
        _ => "ws_final",
    };
    // In the session's own ledger: its trades, or a `final`-only session's finals.
    let ledger = item.kind == Kind::Trade || (item.kind == Kind::Final && at.final_only);
    match item.kind {
        Kind::Retract => {
            if item.cursor <= sent.held {
                out.push(stamp(item.kind, &item.body, now));
                sent.recent.remove(&(item.cursor, item.position.hash));
            }
            return; // never sent to this client, or sent: no latency row either way
        }
        _ if ledger => {
            let key = (item.cursor, item.position.hash);
            if item.cursor <= sent.last || sent.recent.contains(&key) {
                return; // already sent (replay seam, or replayed after a rewind)
            }
            out.push(stamp(item.kind, &item.body, now));
            sent.trade(item.position);
        }
        _ => {
            // A small `final` for a `trade,final` session, once.
            let Some(fin) = at.finals.as_mut().filter(|f| item.cursor > **f) else {
                return;
            };
            out.push(stamp(
                Kind::Final,
                item.brief.as_deref().unwrap_or(&item.body),
                now,
            ));
            *fin = item.cursor;
        }
    }
    // An audit's fill was not seen live: its delivery is left out of live latency.
    st.recorder.record(Fact::Latency(latency_row(
        &item.cursor,
        item.t_detect_ms,
        now,
        (at.account, st.epoch),
        channel,
        item.audit,
    )));
}

/// Write `texts` and flush once, within the send timeout.
async fn send_all(socket: &mut WebSocket, texts: Vec<String>) -> Result<(), Ended> {
    if texts.is_empty() {
        return Ok(());
    }
    let write = async {
        for t in texts {
            socket.feed(Message::Text(t.into())).await?;
        }
        socket.flush().await
    };
    match tokio::time::timeout(SEND_TIMEOUT, write).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(Ended::Client),
    }
}

/// Replay `(after, through]` of `wallets` page by page (bounded memory per session), ledger
/// order, skipping what the wallets' filters keep out (as live frames do), rendered as `render`
/// says; `sent_one` sees each position sent. Past `push_resume_max_trades` messages sent the
/// client gets a `resync` naming the last one sent and backfills over REST.
#[allow(clippy::too_many_arguments)]
async fn replay(
    st: &AppState,
    socket: &mut WebSocket,
    account: i64,
    (wallets, filters): (&[String], &Filters),
    after: &mut Cursor,
    through: Cursor,
    render: Render,
    mut sent_one: impl FnMut(Position),
) -> Result<(), Ended> {
    let max = st.cfg.push_resume_max_trades;
    let mut sent = 0u64;
    // Where the next page starts: past filtered-out trades too.
    let mut read = *after;
    loop {
        let page = REPLAY_PAGE.min(max - sent + 1);
        let rows = trades::wallet_trades_between(&st.ch, wallets, read, through, page)
            .await
            .map_err(|e| Ended::Failed(e.to_string()))?;
        let full = rows.len() as u64 >= page;
        read = rows.last().map_or(read, |r| r.cursor());
        let names = names(st, &rows).await?;
        for row in rows {
            let market = names.get(&row.token_id);
            if !subs::wants(filters, &row.maker, &Facts::of_row(&row, market)) {
                continue;
            }
            if sent == max {
                let msg = Control::Resync {
                    after: after.to_string(),
                    reason: "resume window exceeded: backfill with GET /v1/trades".into(),
                };
                send(socket, msg.to_json()).await?;
                return Err(Ended::Policy(
                    "resume window exceeded; backfill over REST".into(),
                ));
            }
            let now = UnixMs::now().0;
            let message = || TradeMessage::from_row(&row, market);
            let (kind, body, channel) = match render {
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
                    FinalNotice::from_row(&row).to_json(),
                    "ws_final",
                ),
            };
            send(socket, stamp(kind, &body, now)).await?;
            st.recorder.record(Fact::Latency(latency_row(
                &row.cursor(),
                row.t_detect_ms,
                now,
                (account, st.epoch),
                channel,
                true,
            )));
            *after = row.cursor();
            sent_one(Position::of(row.cursor(), &row.block_hash));
            sent += 1;
        }
        if !full {
            return Ok(());
        }
    }
}

/// The market names of a replay page, as live frames carry them.
async fn names(
    st: &AppState,
    rows: &[pmw_core::ch::TradeRow],
) -> Result<HashMap<String, pmw_core::message::Market>, Ended> {
    let c = st
        .pool
        .get()
        .await
        .map_err(|e| Ended::Failed(e.to_string()))?;
    pg::market_names_of(&**c, rows)
        .await
        .map_err(|e| Ended::Failed(pmw_core::pg::describe(&e)))
}

fn latency_row(
    c: &Cursor,
    t_detect_ms: i64,
    t_push_ms: i64,
    (account, epoch): (i64, i64),
    channel: &str,
    backfilled: bool,
) -> PushLatencyRow {
    PushLatencyRow {
        block_number: c.block,
        log_index: c.log_index,
        channel: channel.into(),
        target_id: account as u64,
        t_detect_ms,
        t_push_ms,
        epoch: epoch as u64,
        backfilled: u8::from(backfilled),
    }
}

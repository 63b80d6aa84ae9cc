//! The `/v1/ws` endpoint: authenticate (API key header or browser ticket), register with the hub,
//! replay what the client missed since its cursor, then stream live frames in ledger order with
//! heartbeats. Close codes: 1008 auth/policy, 1012 restart, 1013 slow consumer, a stale view of keys (see [`crate::fleet`]) or a store that did
//! not answer (try again later).
//!
//! `events` chooses the streams: `trade` (default: trades and retracts as ingested), `final`
//! (only the finalized ledger: each trade once, as a `final` with the full body, when its block
//! is finalized; `since` and the session's cursor are then positions in that stream), or
//! `trade,final` (trades as ingested, and a small `final` naming each one once its block is
//! finalized, never before its `trade`; `final_since` resumes the finals, default `since`).
//! `pending` beside `trade` (opt-in) adds the pending tier: a `pending` per fill seen in the
//! mempool, never after its `trade` or `void`; the open ones are sent again on every connect.

mod replay;
mod sent;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use governor::clock::{Clock, DefaultClock};
use pmw_core::auth::{self, Principal};
use pmw_core::client::client_addr;
use pmw_core::filter::Facts;
use pmw_core::message::{stamp, Control, Events, Kind, TradeMessage};
use pmw_core::{Cursor, Position, UnixMs};
use serde_json::json;
use tokio::sync::mpsc;

use crate::fleet::{self, FleetError};
use crate::hub::view::STALE_VIEW;
use crate::hub::{Frame, Registered, Registration, TooMany};
use crate::recorder::Fact;
use crate::{subs, SessionState};
use replay::{latency_row, Render, Viewer, Written};
use sent::{At, PendingSeen, Sent};

const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Why a server whose view of keys is stale lets its sessions go (1013).
const STALE_REASON: &str = "this server cannot confirm credentials now: reconnect and resume";
/// The largest frame or message a client may send (1009 above it): the protocol needs none
/// (clients send only pings, pongs and a close), so no client can make the server buffer more.
const CLIENT_MESSAGE_MAX: usize = 4 * 1024;
/// Frames written per flush at most.
const MAX_BATCH: usize = 64;

/// The HTTP side of a connect: an address over its failed authentications is refused (429)
/// before any lookup, then the credential is checked (a bad one counts against the address),
/// then the account's connect rate; the socket is opened and the session decides the rest.
pub async fn upgrade(
    State(st): State<SessionState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
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
    let ip = client_addr(peer.ip(), &headers, &st.cfg.trusted_proxies);
    let admission = match st.failures.admit(ip) {
        Ok(a) => a,
        Err(wait) => return too_many(wait, "too many failed authentications from this address"),
    };
    // A credential of the right shape is looked up: only such failures can be guesses, and only
    // they cost the fleet's budget a write (a malformed or missing one is refused locally).
    let looked_up = match (&bearer, q.get("ticket")) {
        (Some(key), _) => auth::plausible(key, auth::KEY_PREFIX),
        (None, Some(t)) => auth::plausible(t, auth::TICKET_PREFIX),
        (None, None) => false,
    };
    let who = match (bearer, q.get("ticket")) {
        (Some(key), _) => auth::account_for_key(&st.pool, &key).await,
        (None, Some(t)) => auth::redeem_ticket(&st.pool, t).await,
        (None, None) => Err(auth::AuthError::Missing),
    };
    if matches!(
        who,
        Err(auth::AuthError::Missing | auth::AuthError::Invalid)
    ) {
        const WHAT: &str = "too many failed authentications from this address";
        if let Err(wait) = st.failures.failed(ip, admission) {
            return too_many(wait, WHAT);
        }
        // The address's budget is the fleet's: failed lookups at other servers count too.
        if looked_up {
            let (key, rate) = (fleet::address_key(ip), st.cfg.failure_rate());
            let taken = st.fleet.take(fleet::AUTH_FAILURES, &key, rate).await;
            if let Some(r) = shared(taken, WHAT) {
                return r;
            }
        }
    }
    // Connects per account are rate limited before the upgrade: one account's reconnect storm
    // costs the others nothing. This server's own limiter first (no store asked), then the
    // fleet's.
    if let Ok(p) = &who {
        const WHAT: &str = "too many WebSocket connects for this account";
        if let Err(not_until) = st.connects.check_key(&p.account_id) {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            return too_many(wait, WHAT);
        }
        let (key, rate) = (p.account_id.to_string(), st.cfg.connect_rate());
        if let Some(r) = shared(st.fleet.take(fleet::CONNECTS, &key, rate).await, WHAT) {
            return r;
        }
    }
    let since = q.get("since").map(|s| s.parse::<Position>());
    let opts = Options::parse(&q);
    ws.read_buffer_size(4 * 1024)
        .write_buffer_size(8 * 1024)
        .max_frame_size(CLIENT_MESSAGE_MAX)
        .max_message_size(CLIENT_MESSAGE_MAX)
        .on_upgrade(move |socket| session(st, socket, who, since, opts))
}

/// A fleet limit's refusal as the connect's answer: 429 over it, 503 when its store did not
/// answer (nothing is admitted then: fail closed); `None` when admitted.
fn shared(taken: Result<(), FleetError>, what: &str) -> Option<Response> {
    match taken {
        Ok(()) => None,
        Err(FleetError::Limited(wait)) => Some(too_many(wait, what)),
        Err(e) => {
            tracing::warn!(error = %e, "ws connect refused: limits store unavailable");
            let body = json!({"error": {"code": "unavailable", "message": "try again later"}});
            let headers = [(header::RETRY_AFTER, "1".to_string())];
            Some((StatusCode::SERVICE_UNAVAILABLE, headers, axum::Json(body)).into_response())
        }
    }
}

/// 429 with `Retry-After` (whole seconds, at least 1) and the reason.
fn too_many(wait: Duration, what: &str) -> Response {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    let body =
        json!({"error": {"code": "rate_limited", "message": format!("{what}; retry in {secs} s")}});
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, secs.to_string())],
        axum::Json(body),
    )
        .into_response()
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
    st: SessionState,
    mut socket: WebSocket,
    who: Result<Principal, auth::AuthError>,
    since: Option<Result<Position, pmw_core::types::PositionError>>,
    opts: Result<Options, String>,
) {
    let (who, since, opts) = match admit(who, since, opts) {
        Ok(admitted) => admitted,
        Err((code, reason)) => return close(&mut socket, code, &reason).await,
    };
    let account = who.account_id;
    let (grant, _lease) = match gate(&st, account, who.key_id).await {
        Ok(admitted) => admitted,
        Err((code, reason)) => return close(&mut socket, code, &reason).await,
    };
    let (wallets, filters) = (grant.wallets.clone(), grant.filters.clone());
    let markets = grant.markets.clone();
    let tokens = subs::Follows {
        wallets: &wallets,
        filters: &filters,
        markets: &markets,
    }
    .tokens();
    let (tx, mut rx) = mpsc::channel::<Frame>(st.cfg.ws_queue);
    let code = Arc::new(AtomicU16::new(1013));
    let registered = st.hub.register(Registration {
        account_id: account,
        key_id: who.key_id,
        max_sessions: grant.max_sessions,
        wallets: grant.wallets,
        filters: grant.filters,
        markets: grant.markets,
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
    let viewer = Viewer {
        account,
        wallets: &wallets,
        filters: &filters,
        markets: &markets,
        tokens: &tokens,
    };
    let s = Session {
        st: &st,
        id,
        viewer,
        opts,
    };
    let outcome = s.stream(&mut socket, since, reg, &mut rx).await;
    st.hub.unregister(id);
    end(&mut socket, id, outcome, code.load(Ordering::SeqCst)).await;
}

/// The admission steps after the credentials: this server's view fresh enough to see
/// revocations, the account's follows read now (fresher than any index a round may still use),
/// the key still live, and a lease among the account's sessions across the fleet (held while
/// the session is open). Otherwise the close code and reason: 1013 when a store did not answer
/// (or the view is stale), 1008 for the rest.
async fn gate(
    st: &SessionState,
    account: i64,
    key_id: i64,
) -> Result<(subs::Grant, fleet::Lease), (u16, String)> {
    if st.hub.is_stale(st.cfg.view_bound()) {
        // This server cannot see revocations now: it admits nobody until it can.
        return Err((1013, STALE_REASON.to_string()));
    }
    let grant = match subs::grant(&st.pool, account, key_id).await {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(error = %e, "ws subscriptions unavailable");
            return Err((1013, "try again later".into()));
        }
    };
    if !grant.key_live {
        // Revoked (or the account disabled) since the key check: no later index change would
        // close this session, so it never opens.
        return Err((1008, "credentials revoked or account disabled".into()));
    }
    match st.fleet.lease(account, grant.max_sessions).await {
        Ok(lease) => Ok((grant, lease)),
        Err(e @ FleetError::Full(_)) => Err((1008, e.to_string())),
        Err(e) => {
            tracing::warn!(error = %e, "ws session refused: limits store unavailable");
            Err((1013, "try again later".into()))
        }
    }
}

/// The connection's credentials, resume point and options, or the close code and reason that
/// refuse it: 1013 when the credential store did not answer, 1008 for the rest.
fn admit(
    who: Result<Principal, auth::AuthError>,
    since: Option<Result<Position, pmw_core::types::PositionError>>,
    opts: Result<Options, String>,
) -> Result<(Principal, Option<Position>, Options), (u16, String)> {
    let who = match who {
        Ok(p) => p,
        Err(auth::AuthError::Store(e)) => {
            tracing::warn!(error = %e, "ws auth unavailable");
            return Err((1013, "try again later".into()));
        }
        Err(e) => return Err((1008, e.to_string())),
    };
    let since = since
        .transpose()
        .map_err(|e| (1008, format!("invalid since: {e}")))?;
    let opts = opts.map_err(|e| (1008, e))?;
    Ok((who, since, opts))
}

/// Close the socket as the session's end says: the hub's code (`hub_code`) when it let the
/// session go, 1008 on a policy end, 1013 when a store failed, nothing when the client left.
async fn end(socket: &mut WebSocket, id: u64, outcome: Result<(), Ended>, hub_code: u16) {
    match outcome {
        Ok(()) => {
            let (code, reason) = match hub_code {
                1012 => (1012, "service restart"),
                1008 => (1008, "credentials revoked or account disabled"),
                STALE_VIEW => (1013, STALE_REASON),
                code => (code, "slow consumer: resume with since"),
            };
            close(socket, code, reason).await;
        }
        Err(Ended::Client) => {}
        Err(Ended::Policy(reason)) => close(socket, 1008, &reason).await,
        Err(Ended::Failed(e)) => {
            // Every such failure is a store (Postgres, ClickHouse) that did not answer: the
            // client should come back, resuming where it was, not give up (1011 would say so).
            tracing::warn!(session = id, error = %e, "ws session failed: store unavailable");
            close(socket, 1013, "store unavailable: resume with since shortly").await;
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

/// Write `texts` and flush once, within the send timeout.
async fn send_all(socket: &mut WebSocket, texts: Vec<Utf8Bytes>) -> Result<(), Ended> {
    if texts.is_empty() {
        return Ok(());
    }
    let write = async {
        for t in texts {
            socket.feed(Message::Text(t)).await?;
        }
        socket.flush().await
    };
    match tokio::time::timeout(SEND_TIMEOUT, write).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(Ended::Client),
    }
}

/// One registered session.
struct Session<'a> {
    st: &'a SessionState,
    id: u64,
    viewer: Viewer<'a>,
    opts: Options,
}

impl Session<'_> {
    /// Replay then live. `Ok(())` when the hub let the session go (restart or slow consumer).
    async fn stream(
        &self,
        socket: &mut WebSocket,
        since: Option<Position>,
        reg: Registered,
        rx: &mut mpsc::Receiver<Frame>,
    ) -> Result<(), Ended> {
        let at = self.catch_up(socket, since, &reg).await?;
        self.live(socket, at, rx).await
    }

    /// The `hello`, the retractions a resume from an orphaned block owes, the trades missed
    /// since `since` (up to what the hub has dispatched), then the finals after them.
    async fn catch_up(
        &self,
        socket: &mut WebSocket,
        since: Option<Position>,
        reg: &Registered,
    ) -> Result<At, Ended> {
        let (st, opts) = (self.st, self.opts);
        let final_only = opts.events.final_only();
        // A `final`-only session's ledger is the finalized one.
        let dispatched = match final_only {
            true => reg.final_dispatched,
            false => reg.dispatched,
        };
        let start = match since {
            Some(since) => crate::resume::start(
                &st.pool,
                &st.ch,
                since,
                self.viewer.wallets,
                self.viewer.tokens,
            )
            .await
            .map_err(|e| match e {
                crate::resume::ResumeError::Ahead { .. } => Ended::Policy(e.to_string()),
                crate::resume::ResumeError::Store(e) => Ended::Failed(e),
            })?,
            None => crate::resume::Start {
                from: dispatched,
                retract: Vec::new(),
            },
        };
        let mut sent = Sent::new(start.from, since.map_or(dispatched.cursor, |s| s.cursor));
        // A `trade,final` session's finals: sent after this trade (a new session starts with
        // the trades it is about to get).
        let mut finals = (opts.events.trade && opts.events.fin).then(|| {
            opts.final_since
                .or(since.map(|s| s.cursor))
                .unwrap_or(dispatched.cursor)
        });
        self.hello(socket, &sent, finals).await?;
        self.retract(socket, &start.retract).await?;
        if sent.last < dispatched.cursor {
            let render = match final_only {
                true => Render::FinalFull,
                false => Render::Trade {
                    finalized_through: reg.final_dispatched.cursor,
                },
            };
            let mut after = sent.last;
            let through = dispatched.cursor;
            replay::replay(st, socket, self.viewer, &mut after, through, render, |p| {
                sent.trade(p)
            })
            .await?;
        }
        // Finals after the trades they name: every trade at or below the final stream's
        // position was sent before (at or below `since`) or just replayed.
        let through = reg.final_dispatched.cursor;
        if let Some(fin) = finals.as_mut().filter(|f| **f < through) {
            replay::replay(
                st,
                socket,
                self.viewer,
                fin,
                through,
                Render::FinalBrief,
                |_| {},
            )
            .await?;
        }
        let at = At {
            final_only,
            sent,
            finals,
            pending: PendingSeen::default(),
        };
        self.open_pending(socket, since, at).await
    }

    /// A session opted in to `pending` is sent the fills still open, after the replay (and on a
    /// resume the voids since its resume point).
    async fn open_pending(
        &self,
        socket: &mut WebSocket,
        since: Option<Position>,
        mut at: At,
    ) -> Result<At, Ended> {
        if self.opts.events.pending {
            replay::open_pending(self.st, socket, self.viewer, since, &mut at).await?;
        }
        Ok(at)
    }

    async fn hello(
        &self,
        socket: &mut WebSocket,
        sent: &Sent,
        finals: Option<Cursor>,
    ) -> Result<(), Ended> {
        let hello = Control::Hello {
            session: self.id,
            account: self.viewer.account,
            epoch: self.st.epoch,
            cursor: sent.last.to_string(),
            resume: sent.position.to_string(),
            head: self.st.hub.head(),
            final_cursor: finals.map(|c| c.to_string()),
        };
        send(socket, hello.to_json()).await
    }

    /// The retractions of a resume from an orphaned block (what the client may hold there),
    /// except those its filters never let through.
    async fn retract(
        &self,
        socket: &mut WebSocket,
        rows: &[pmw_core::ch::TradeRow],
    ) -> Result<(), Ended> {
        if rows.is_empty() {
            return Ok(());
        }
        let names = replay::names(self.st, rows).await?;
        for row in rows {
            let market = names.get(&row.token_id);
            if !self
                .viewer
                .follows()
                .wants(&row.maker, &Facts::of_row(row, market))
            {
                continue; // filtered out: never sent to this client
            }
            let body = TradeMessage::from_row(row, market).to_json();
            send(socket, stamp(Kind::Retract, &body, UnixMs::now().0)).await?;
        }
        Ok(())
    }

    /// Live frames in ledger order, written in bursts, with heartbeats; ends when the client
    /// leaves or the hub lets the session go.
    async fn live(
        &self,
        socket: &mut WebSocket,
        mut at: At,
        rx: &mut mpsc::Receiver<Frame>,
    ) -> Result<(), Ended> {
        let every = Duration::from_millis(self.st.cfg.heartbeat_ms);
        let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                frame = rx.recv() => {
                    let Some(frame) = frame else { return Ok(()) };
                    let out = self.burst(&mut at, frame, rx);
                    send_all(socket, out).await?;
                }
                _ = heartbeat.tick() => {
                    let hb = Control::Heartbeat {
                        head: self.st.hub.head(),
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

    /// `first` and whatever else is already queued (up to [`MAX_BATCH`]): their frames, to be
    /// written and flushed once (one write per burst instead of one per frame), and their
    /// latency rows, recorded as one fact. An audit's fill was not seen live: its delivery is
    /// left out of live latency.
    fn burst(&self, at: &mut At, first: Frame, rx: &mut mpsc::Receiver<Frame>) -> Vec<Utf8Bytes> {
        let (mut out, mut rows) = (Vec::new(), Vec::new());
        let mut next = Some(first);
        while let Some(frame) = next {
            let now = UnixMs::now().0;
            if let Some(w) = at.frame(frame, now, &mut out) {
                let written = Written {
                    cursor: w.cursor,
                    t_detect_ms: w.t_detect_ms,
                    t_push_ms: now,
                    channel: w.channel,
                    backfilled: w.audit,
                    pending_id: w.pending_id,
                };
                rows.push(latency_row(written, self.viewer.account, self.st.epoch));
            }
            next = (out.len() < MAX_BATCH)
                .then(|| rx.try_recv().ok())
                .flatten();
        }
        self.st.recorder.record(Fact::Latencies(rows));
        out
    }
}

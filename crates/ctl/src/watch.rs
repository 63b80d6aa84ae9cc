//! `pmwctl watch`: a reference WebSocket client. It prints one line per trade (cursor, side,
//! price, shares, wallet, market question when known) and `RETRACTED` lines after a reorg, writes
//! its resume position (`<cursor>:<block hash prefix>`, from each trade and heartbeat) to a file,
//! and after any disconnect or close (1012 restart, 1013 overload, network loss) reconnects with
//! jittered exponential backoff and resumes with `?since=<resume>`, so nothing is missed, nothing
//! repeats, and a reorg while away is repaired. Heartbeats are printed only with `--verbose`. A 1008 close
//! (bad key) or a `resync` (the gap is too large to replay: backfill over REST) ends it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use pmw_core::backoff::{Backoff, Policy};
use pmw_core::exit::ServiceError;
use pmw_core::Position;
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken as Cancel;

/// `pmwctl watch`'s arguments. Their `Debug` shows neither the key nor the URL's path.
#[derive(Args)]
pub struct WatchArgs {
    /// API key (`pmw_…`).
    #[arg(long, env = "PMW_WATCH_KEY", hide_env_values = true)]
    key: String,
    /// The push WebSocket.
    #[arg(long, default_value = "ws://127.0.0.1:8081/v1/ws")]
    url: String,
    /// Read the starting cursor from this file and write the last cursor to it after each trade.
    #[arg(long)]
    cursor_file: Option<PathBuf>,
    /// Start after this cursor (overrides the file).
    #[arg(long)]
    since: Option<String>,
    /// Also print hello, heartbeat and close events.
    #[arg(long)]
    verbose: bool,
    /// Opt in to the pending tier (`events=trade,pending`): print each `pending` fill seen in
    /// the mempool, the `trade` that confirms it (`confirms pending <id>`) and `void`s.
    #[arg(long)]
    pending: bool,
    /// Reconnect (and resume) when nothing, not even a heartbeat, arrived for this many seconds:
    /// a frozen server keeps the TCP connection open but says nothing.
    #[arg(long, default_value_t = 45)]
    silence_secs: u64,
}

impl std::fmt::Debug for WatchArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchArgs")
            .field("key", &pmw_core::redact::HIDDEN)
            .field("url", &pmw_core::redact::Url(&self.url))
            .field("cursor_file", &self.cursor_file)
            .field("since", &self.since)
            .field("verbose", &self.verbose)
            .field("pending", &self.pending)
            .field("silence_secs", &self.silence_secs)
            .finish()
    }
}

/// How a connection ended.
enum End {
    /// Reconnect (and resume).
    Again(String),
    /// Stop with this error.
    Fatal(String),
    /// Shutdown requested.
    Stop,
}

/// One trade as a line: `cursor side price x shares wallet "question"`.
pub fn trade_line(v: &Value) -> String {
    let t = &v["trade"];
    let mut line = format!(
        "{} {:<4} {} x {} {}",
        v["cursor"].as_str().unwrap_or("?"),
        t["side"].as_str().unwrap_or("?"),
        t["price"].as_str().unwrap_or("?"),
        t["shares"].as_str().unwrap_or("?"),
        t["wallet"].as_str().unwrap_or("?"),
    );
    market_names(v, &mut line);
    if let Some(id) = v["pending_id"].as_i64() {
        line.push_str(&format!(" confirms pending {id}"));
    }
    line
}

/// ` "question" [outcome]` when the frame names its market.
fn market_names(v: &Value, line: &mut String) {
    if let Some(q) = v["market"]["question"].as_str() {
        line.push_str(&format!(" {q:?}"));
        if let Some(o) = v["market"]["outcome"].as_str() {
            line.push_str(&format!(" [{o}]"));
        }
    }
}

/// A `pending` fill as a line: `PENDING <id> side price x shares wallet "question"`, or a
/// `void`: `VOID <id> <reason> wallet`.
pub fn pending_line(v: &Value) -> String {
    let id = &v["pending_id"];
    if v["type"] == "void" {
        let reason = v["reason"].as_str().unwrap_or("?");
        let wallet = v["wallet"].as_str().unwrap_or("?");
        return format!("VOID {id} {reason} {wallet}");
    }
    let f = &v["fill"];
    let mut line = format!(
        "PENDING {id} {:<4} {} x {} {}",
        f["side"].as_str().unwrap_or("?"),
        f["price"].as_str().unwrap_or("?"),
        f["shares"].as_str().unwrap_or("?"),
        f["wallet"].as_str().unwrap_or("?"),
    );
    market_names(v, &mut line);
    line
}

fn read_cursor(path: &Path) -> Result<Option<Position>, ServiceError> {
    match std::fs::read_to_string(path) {
        Ok(s) if s.trim().is_empty() => Ok(None),
        Ok(s) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|e| ServiceError::Config(format!("cursor file {}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ServiceError::Config(format!(
            "cursor file {}: {e}",
            path.display()
        ))),
    }
}

/// Write atomically (temp file + rename), so a crash never leaves half a cursor.
fn write_cursor(path: &Path, c: Position) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{c}\n"))?;
    std::fs::rename(&tmp, path)
}

/// The frame's `resume` (`<cursor>:<hash>`), else its plain `cursor`.
fn resume_of(v: &Value) -> Option<Position> {
    v["resume"]
        .as_str()
        .or(v["cursor"].as_str())
        .and_then(|s| s.parse::<Position>().ok())
}

fn url_with_since(base: &str, since: Option<Position>) -> String {
    match since {
        None => base.to_string(),
        Some(c) => {
            let sep = if base.contains('?') { '&' } else { '?' };
            format!("{base}{sep}since={c}")
        }
    }
}

/// `--url`, with `events=trade,pending` when `--pending` asks for the pending tier.
fn base_url(args: &WatchArgs) -> String {
    if !args.pending {
        return args.url.clone();
    }
    let sep = if args.url.contains('?') { '&' } else { '?' };
    format!("{}{sep}events=trade,pending", args.url)
}

pub async fn run(args: WatchArgs, shutdown: Cancel) -> Result<(), ServiceError> {
    if !args.url.starts_with("ws://") && !args.url.starts_with("wss://") {
        return Err(ServiceError::Config(format!(
            "--url must be ws:// or wss://, got {}",
            args.url
        )));
    }
    let mut cursor = match (&args.since, &args.cursor_file) {
        (Some(s), _) => Some(
            s.parse::<Position>()
                .map_err(|e| ServiceError::Config(format!("--since: {e}")))?,
        ),
        (None, Some(f)) => read_cursor(f)?,
        (None, None) => None,
    };
    let mut backoff = Backoff::new(Policy::CLIENT);
    loop {
        let end = session(&args, &mut cursor, &shutdown, &mut backoff).await;
        match end {
            End::Stop => return Ok(()),
            End::Fatal(e) => return Err(ServiceError::Bug(anyhow::anyhow!(e))),
            End::Again(why) => {
                let wait = backoff.next_wait();
                eprintln!(
                    "disconnected: {why}; reconnecting in {} ms{}",
                    wait.as_millis(),
                    cursor.map(|c| format!(" from {c}")).unwrap_or_default()
                );
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.cancelled() => return Ok(()),
                }
            }
        }
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One connection: connect, stream until it ends.
async fn session(
    args: &WatchArgs,
    cursor: &mut Option<Position>,
    shutdown: &Cancel,
    backoff: &mut Backoff,
) -> End {
    let mut ws = match open(args, *cursor, shutdown).await {
        Ok(ws) => ws,
        Err(end) => return end,
    };
    let silence = Duration::from_secs(args.silence_secs.max(1));
    loop {
        let msg = tokio::select! {
            m = ws.next() => m,
            _ = shutdown.cancelled() => {
                let _ = ws.close(None).await;
                return End::Stop;
            }
            _ = tokio::time::sleep(silence) => {
                return End::Again(format!("no message for {} s (heartbeats stopped): reconnecting", silence.as_secs()));
            }
        };
        let text = match msg {
            None => return End::Again("connection ended".into()),
            Some(Err(e)) => return End::Again(format!("read: {e}")),
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(Message::Close(frame))) => return closed(frame, args.verbose),
            Some(Ok(_)) => continue,
        };
        let v: Value = match serde_json::from_str(text.as_str()) {
            Ok(v) => v,
            Err(e) => return End::Fatal(format!("server sent something that is not JSON: {e}")),
        };
        if let Some(end) = on_message(&v, args, cursor, backoff) {
            return end;
        }
    }
}

/// Connect with the key, resuming after `cursor`.
async fn open(args: &WatchArgs, cursor: Option<Position>, shutdown: &Cancel) -> Result<Ws, End> {
    let url = url_with_since(&base_url(args), cursor);
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| End::Fatal(format!("invalid url {}: {e}", args.url)))?;
    let auth = format!("Bearer {}", args.key)
        .parse()
        .map_err(|_| End::Fatal("the key is not a valid header value".into()))?;
    req.headers_mut().insert("authorization", auth);
    let connected = tokio::select! {
        r = tokio::time::timeout(Duration::from_secs(10), tokio_tungstenite::connect_async(req)) => r,
        _ = shutdown.cancelled() => return Err(End::Stop),
    };
    match connected {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(e)) => Err(End::Again(format!("connect: {e}"))),
        Err(_) => Err(End::Again("connect timed out".into())),
    }
}

/// A close frame: 1008 (the key refused) ends the watch, anything else reconnects.
fn closed(frame: Option<CloseFrame>, verbose: bool) -> End {
    let (code, reason) = frame.map_or((CloseCode::Status, String::new()), |f| {
        (f.code, f.reason.to_string())
    });
    if verbose {
        eprintln!("close {} {reason}", u16::from(code));
    }
    if code == CloseCode::Policy {
        return End::Fatal(format!("server refused the session (1008): {reason}"));
    }
    End::Again(format!("closed {} {reason}", u16::from(code)))
}

/// Act on one server message: print it, move the resume point. `Some` ends the session.
fn on_message(
    v: &Value,
    args: &WatchArgs,
    cursor: &mut Option<Position>,
    backoff: &mut Backoff,
) -> Option<End> {
    match v["type"].as_str() {
        Some("hello") => {
            backoff.reset();
            // Before the first trade, the stream's starting cursor is the resume point:
            // otherwise trades dispatched while reconnecting would be skipped.
            if cursor.is_none() {
                *cursor = resume_of(v);
            }
            if args.verbose {
                eprintln!(
                    "hello session {} epoch {} cursor {} head {}",
                    v["session"],
                    v["epoch"],
                    v["cursor"].as_str().unwrap_or("?"),
                    v["head"]
                );
            }
        }
        Some("trade") => {
            let Some(c) = resume_of(v) else {
                return Some(End::Fatal(format!("trade without a valid cursor: {v}")));
            };
            // After a reorg the new branch may come at or below cursors already printed
            // (after their `retract`): the server sends each trade once, in order.
            println!("{}", trade_line(v));
            *cursor = Some(c);
            return save(args, *cursor);
        }
        Some("retract") => {
            // Drop that trade (cursor and block hash); the resume point stays: resuming from
            // an orphaned block makes the server retract and replay from the ancestor.
            println!(
                "{} RETRACTED {}",
                v["cursor"].as_str().unwrap_or("?"),
                v["trade"]["wallet"].as_str().unwrap_or("")
            );
        }
        Some("heartbeat") if resume_of(v).is_some() && cursor.is_some() => {
            // Where the session stands (the common ancestor after a reorg).
            *cursor = resume_of(v);
            let end = save(args, *cursor);
            if end.is_none() && args.verbose {
                eprintln!(
                    "heartbeat head {} resume {}",
                    v["head"],
                    v["resume"].as_str().unwrap_or("?")
                );
            }
            return end;
        }
        Some("heartbeat") if args.verbose => eprintln!(
            "heartbeat head {} cursor {}",
            v["head"],
            v["cursor"].as_str().unwrap_or("?")
        ),
        Some("heartbeat") => {}
        Some("pending" | "void") => println!("{}", pending_line(v)),
        Some("resync") => {
            return Some(End::Fatal(format!(
            "the server cannot replay that far: backfill with GET /v1/trades?after={} and restart",
            v["after"].as_str().unwrap_or("?")
        )))
        }
        _ if args.verbose => eprintln!("unknown message {v}"),
        _ => {}
    }
    None
}

/// Write the resume point to `--cursor-file`, if given; a failed write ends the watch.
fn save(args: &WatchArgs, cursor: Option<Position>) -> Option<End> {
    let (Some(f), Some(c)) = (&args.cursor_file, cursor) else {
        return None;
    };
    write_cursor(f, c)
        .err()
        .map(|e| End::Fatal(format!("cannot write {}: {e}", f.display())))
}

/// Cancelled on SIGINT or SIGTERM.
pub fn on_signals() -> Cancel {
    pmw_core::shutdown::on_signals()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const AT: &str = "000000000101-000003:ab12cd34";

    fn args() -> WatchArgs {
        WatchArgs {
            key: "pmw_x".into(),
            url: "ws://127.0.0.1:1/v1/ws".into(),
            cursor_file: None,
            since: None,
            verbose: false,
            pending: false,
            silence_secs: 45,
        }
    }

    #[test]
    fn hello_resets_the_backoff_and_starts_from_its_cursor_only_without_one() {
        let mut backoff = Backoff::new(Policy::CLIENT);
        for _ in 0..5 {
            backoff.next_wait();
        }
        let mut cursor = None;
        let hello = json!({"type": "hello", "resume": AT});
        assert!(on_message(&hello, &args(), &mut cursor, &mut backoff).is_none());
        assert_eq!(backoff.failures(), 0);
        assert_eq!(cursor, Some(AT.parse().unwrap()));
        let mut kept = Some("000000000090-000000".parse().unwrap());
        on_message(&hello, &args(), &mut kept, &mut backoff);
        assert_eq!(kept, Some("000000000090-000000".parse().unwrap()));
    }

    #[test]
    fn a_trade_moves_the_cursor_and_one_without_a_cursor_ends_the_watch() {
        let (mut backoff, mut cursor) = (Backoff::new(Policy::CLIENT), None);
        let trade = json!({"type": "trade", "resume": AT, "trade": {}});
        assert!(on_message(&trade, &args(), &mut cursor, &mut backoff).is_none());
        assert_eq!(cursor, Some(AT.parse().unwrap()));
        let bad = json!({"type": "trade", "trade": {}});
        let end = on_message(&bad, &args(), &mut cursor, &mut backoff);
        assert!(matches!(end, Some(End::Fatal(_))));
    }

    #[test]
    fn a_heartbeat_moves_only_a_cursor_already_set_and_resync_ends_the_watch() {
        let (mut backoff, mut cursor) = (Backoff::new(Policy::CLIENT), None);
        let beat = json!({"type": "heartbeat", "resume": AT});
        on_message(&beat, &args(), &mut cursor, &mut backoff);
        assert_eq!(cursor, None);
        cursor = Some("000000000090-000000".parse().unwrap());
        on_message(&beat, &args(), &mut cursor, &mut backoff);
        assert_eq!(cursor, Some(AT.parse().unwrap()));
        let resync = json!({"type": "resync", "after": "x"});
        let end = on_message(&resync, &args(), &mut cursor, &mut backoff);
        assert!(matches!(end, Some(End::Fatal(e)) if e.contains("after=x")));
    }

    #[test]
    fn pending_voids_and_confirming_trades_have_lines_of_their_own() {
        let p = json!({"type": "pending", "pending_id": 7, "fill": {"side": "BUY", "price": "0.5",
            "shares": "10", "wallet": "0xaa"}, "market": {"question": "Q?", "outcome": "Yes"}});
        assert_eq!(
            pending_line(&p),
            r#"PENDING 7 BUY  0.5 x 10 0xaa "Q?" [Yes]"#
        );
        let v = json!({"type": "void", "pending_id": 7, "reason": "dropped", "wallet": "0xaa"});
        assert_eq!(pending_line(&v), "VOID 7 dropped 0xaa");
        let t = json!({"type": "trade", "cursor": "c", "pending_id": 7, "trade": {"side": "BUY",
            "price": "0.5", "shares": "10", "wallet": "0xaa"}});
        assert_eq!(trade_line(&t), "c BUY  0.5 x 10 0xaa confirms pending 7");
        let mut a = args();
        assert_eq!(base_url(&a), "ws://127.0.0.1:1/v1/ws");
        a.pending = true;
        assert_eq!(base_url(&a), "ws://127.0.0.1:1/v1/ws?events=trade,pending");
    }

    #[test]
    fn a_policy_close_ends_the_watch_and_a_restart_close_reconnects() {
        let frame = |code| {
            Some(CloseFrame {
                code,
                reason: "why".into(),
            })
        };
        assert!(matches!(
            closed(frame(CloseCode::Policy), false),
            End::Fatal(_)
        ));
        assert!(
            matches!(closed(frame(CloseCode::Restart), false), End::Again(e) if e == "closed 1012 why")
        );
        assert!(matches!(closed(None, false), End::Again(_)));
    }
}

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
use pmw_core::exit::ServiceError;
use pmw_core::Position;
use rand::Rng;
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken as Cancel;

#[derive(Debug, Args)]
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
    /// Reconnect (and resume) when nothing, not even a heartbeat, arrived for this many seconds:
    /// a frozen server keeps the TCP connection open but says nothing.
    #[arg(long, default_value_t = 45)]
    silence_secs: u64,
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

const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

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
    if let Some(q) = v["market"]["question"].as_str() {
        line.push_str(&format!(" {q:?}"));
        if let Some(o) = v["market"]["outcome"].as_str() {
            line.push_str(&format!(" [{o}]"));
        }
    }
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
    let mut backoff = BACKOFF_MIN;
    loop {
        let end = session(&args, &mut cursor, &shutdown, &mut backoff).await;
        match end {
            End::Stop => return Ok(()),
            End::Fatal(e) => return Err(ServiceError::Bug(anyhow::anyhow!(e))),
            End::Again(why) => {
                let wait = backoff.mul_f64(rand::thread_rng().gen_range(0.5..1.0));
                eprintln!(
                    "disconnected: {why}; reconnecting in {} ms{}",
                    wait.as_millis(),
                    cursor.map(|c| format!(" from {c}")).unwrap_or_default()
                );
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.cancelled() => return Ok(()),
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// One connection: connect, stream until it ends.
async fn session(
    args: &WatchArgs,
    cursor: &mut Option<Position>,
    shutdown: &Cancel,
    backoff: &mut Duration,
) -> End {
    let url = url_with_since(&args.url, *cursor);
    let mut req = match url.as_str().into_client_request() {
        Ok(r) => r,
        Err(e) => return End::Fatal(format!("invalid url {}: {e}", args.url)),
    };
    match format!("Bearer {}", args.key).parse() {
        Ok(v) => {
            req.headers_mut().insert("authorization", v);
        }
        Err(_) => return End::Fatal("the key is not a valid header value".into()),
    }
    let connected = tokio::select! {
        r = tokio::time::timeout(Duration::from_secs(10), tokio_tungstenite::connect_async(req)) => r,
        _ = shutdown.cancelled() => return End::Stop,
    };
    let mut ws = match connected {
        Ok(Ok((ws, _))) => ws,
        Ok(Err(e)) => return End::Again(format!("connect: {e}")),
        Err(_) => return End::Again("connect timed out".into()),
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
            Some(Ok(Message::Close(frame))) => {
                let (code, reason) = frame.map_or((CloseCode::Status, String::new()), |f| {
                    (f.code, f.reason.to_string())
                });
                if args.verbose {
                    eprintln!("close {} {reason}", u16::from(code));
                }
                if code == CloseCode::Policy {
                    return End::Fatal(format!("server refused the session (1008): {reason}"));
                }
                return End::Again(format!("closed {} {reason}", u16::from(code)));
            }
            Some(Ok(_)) => continue,
        };
        let v: Value = match serde_json::from_str(text.as_str()) {
            Ok(v) => v,
            Err(e) => return End::Fatal(format!("server sent something that is not JSON: {e}")),
        };
        match v["type"].as_str() {
            Some("hello") => {
                *backoff = BACKOFF_MIN;
                // Before the first trade, the stream's starting cursor is the resume point:
                // otherwise trades dispatched while reconnecting would be skipped.
                if cursor.is_none() {
                    *cursor = resume_of(&v);
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
                let Some(c) = resume_of(&v) else {
                    return End::Fatal(format!("trade without a valid cursor: {v}"));
                };
                // After a reorg the new branch may come at or below cursors already printed
                // (after their `retract`): the server sends each trade once, in order.
                println!("{}", trade_line(&v));
                *cursor = Some(c);
                if let Some(f) = &args.cursor_file {
                    if let Err(e) = write_cursor(f, c) {
                        return End::Fatal(format!("cannot write {}: {e}", f.display()));
                    }
                }
            }
            Some("retract") => {
                // Drop that trade (cursor and block hash); the resume point stays: resuming from
                // an orphaned block makes the server retract and replay from the ancestor.
                println!("{} RETRACTED {}", v["cursor"].as_str().unwrap_or("?"), v["trade"]["wallet"].as_str().unwrap_or(""));
            }
            Some("heartbeat") if resume_of(&v).is_some() && cursor.is_some() => {
                // Where the session stands (the common ancestor after a reorg).
                *cursor = resume_of(&v);
                if let (Some(f), Some(c)) = (&args.cursor_file, *cursor) {
                    if let Err(e) = write_cursor(f, c) {
                        return End::Fatal(format!("cannot write {}: {e}", f.display()));
                    }
                }
                if args.verbose {
                    eprintln!("heartbeat head {} resume {}", v["head"], v["resume"].as_str().unwrap_or("?"));
                }
            }
            Some("heartbeat") if args.verbose => eprintln!(
                "heartbeat head {} cursor {}",
                v["head"],
                v["cursor"].as_str().unwrap_or("?")
            ),
            Some("heartbeat") => {}
            Some("resync") => {
                return End::Fatal(format!(
                    "the server cannot replay that far: backfill with GET /v1/trades?after={} and restart",
                    v["after"].as_str().unwrap_or("?")
                ))
            }
            _ if args.verbose => eprintln!("unknown message {v}"),
            _ => {}
        }
    }
}

/// Cancelled on SIGINT or SIGTERM.
pub fn on_signals() -> Cancel {
    pmw_core::shutdown::on_signals()
}

//! Local chat-service receivers (Discord, Slack, Telegram): a real axum server on 127.0.0.1:0
//! per service that checks each request against the service's documented shape (POST,
//! `application/json`, the path — `/api/webhooks/<id>/<token>`, `/services/T…/B…/<secret>`,
//! `/bot<token>/sendMessage` — and the JSON fields: Discord `content`/`embeds`, Slack
//! `text`/`blocks`, Telegram `chat_id`/`text`/`parse_mode`), answers a malformed one 400 as the
//! service would, and plays a script of answers, including each service's rate-limit answer
//! (Discord 429 JSON `retry_after`, Slack 429 `Retry-After`, Telegram 429 JSON
//! `parameters.retry_after`) and its "gone" answer. No traffic leaves the machine.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};

/// Which service a receiver plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Discord,
    Slack,
    Telegram,
}

/// One scripted answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Play {
    /// The service's success answer.
    Ok,
    /// Its rate-limit answer, asking to wait this many seconds.
    Limit(f64),
    /// Its answer for a destination that is gone (deleted webhook, blocked bot).
    Gone,
    /// A bare status.
    Status(u16),
}

/// One request as received, with what the shape check found wrong (empty when well formed).
#[derive(Debug, Clone)]
pub struct ChatHit {
    pub path: String,
    pub body: Value,
    /// The message text (`content` or `text`).
    pub text: String,
    pub violations: Vec<String>,
    /// Whether any Standard Webhooks signature header came along (chat posts carry none).
    pub signed: bool,
    pub at_ms: i64,
}

struct Inner {
    service: Service,
    plays: Vec<Play>,
    hits: Mutex<Vec<ChatHit>>,
}

/// A running receiver (stopped when dropped).
pub struct ChatReceiver {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

/// The bot token the Telegram receiver accepts.
pub const TELEGRAM_TOKEN: &str = "123456789:AAHsecretTokenForTestsOnly_abcdefg";

impl ChatReceiver {
    /// Request `n` gets `plays[n]` (the last one repeats).
    pub async fn start(service: Service, plays: Vec<Play>) -> ChatReceiver {
        assert!(!plays.is_empty());
        let inner = Arc::new(Inner {
            service,
            plays,
            hits: Mutex::new(Vec::new()),
        });
        let app = Router::new().fallback(handle).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ChatReceiver { addr, inner, task }
    }

    /// The incoming-webhook URL to register (Discord, Slack), whose path is its secret.
    pub fn url(&self) -> String {
        let port = self.addr.port();
        match self.inner.service {
            Service::Discord => {
                format!("http://127.0.0.1:{port}/api/webhooks/1234567890/discordSecretPath_XYZ123")
            }
            Service::Slack => {
                format!(
                    "http://127.0.0.1:{port}/services/T0TESTTEAM/B0TESTHOOK/slackSecretPathXYZ123"
                )
            }
            Service::Telegram => self.api(),
        }
    }

    /// The Bot API base to configure (Telegram).
    pub fn api(&self) -> String {
        format!("http://127.0.0.1:{}", self.addr.port())
    }

    pub fn hits(&self) -> Vec<ChatHit> {
        self.inner.hits.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.inner.hits.lock().unwrap().len()
    }
}

impl Drop for ChatReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(
    State(inner): State<Arc<Inner>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut violations = check(inner.service, &method, uri.path(), &headers, &body);
    if body.is_null() {
        violations.push("body is not JSON".into());
    }
    let text_field = if inner.service == Service::Discord {
        "content"
    } else {
        "text"
    };
    let n = {
        let mut hits = inner.hits.lock().unwrap();
        hits.push(ChatHit {
            path: uri.path().to_string(),
            text: body[text_field].as_str().unwrap_or("").to_string(),
            body: body.clone(),
            violations: violations.clone(),
            signed: headers.contains_key("webhook-signature"),
            at_ms: pmw_core::UnixMs::now().as_i64(),
        });
        hits.len() - 1
    };
    if !violations.is_empty() {
        return (StatusCode::BAD_REQUEST, violations.join("; ")).into_response();
    }
    let play = inner.plays[n.min(inner.plays.len() - 1)];
    answer(inner.service, play)
}

/// What is wrong with a request, by the service's documented shape.
fn check(
    s: Service,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: &Value,
) -> Vec<String> {
    let mut v = Vec::new();
    if method != Method::POST {
        v.push(format!("method {method}, not POST"));
    }
    let ct = headers
        .get("content-type")
        .and_then(|c| c.to_str().ok())
        .unwrap_or("");
    if !ct.starts_with("application/json") {
        v.push(format!("content-type {ct:?}"));
    }
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let text = |k: &str| body[k].as_str().filter(|t| !t.trim().is_empty());
    match s {
        Service::Discord => {
            if !(parts.len() == 4 && parts[0] == "api" && parts[1] == "webhooks") {
                v.push(format!("path {path} is not /api/webhooks/<id>/<token>"));
            }
            match text("content") {
                Some(c) if c.chars().count() <= 2000 => {}
                _ => v.push("content missing, empty or over 2000 characters".into()),
            }
            if !(body["embeds"].is_null()
                || body["embeds"].as_array().is_some_and(|e| e.len() <= 10))
            {
                v.push("embeds is not an array of at most 10".into());
            }
        }
        Service::Slack => {
            if !(parts.len() == 4 && parts[0] == "services") {
                v.push(format!("path {path} is not /services/T…/B…/<secret>"));
            }
            if text("text").is_none() {
                v.push("text missing".into());
            }
            if !(body["blocks"].is_null() || body["blocks"].is_array()) {
                v.push("blocks is not an array".into());
            }
        }
        Service::Telegram => {
            if path != format!("/bot{TELEGRAM_TOKEN}/sendMessage") {
                v.push(format!(
                    "path {} is not /bot<token>/sendMessage",
                    path.len()
                ));
            }
            if !(body["chat_id"].is_string() || body["chat_id"].is_i64()) {
                v.push("chat_id missing".into());
            }
            match text("text") {
                Some(t) if t.chars().count() <= 4096 => {}
                _ => v.push("text missing, empty or over 4096 characters".into()),
            }
            if !matches!(
                body["parse_mode"].as_str(),
                None | Some("HTML" | "MarkdownV2" | "Markdown")
            ) {
                v.push("parse_mode is not HTML, MarkdownV2 or Markdown".into());
            }
        }
    }
    v
}

/// The service's answer for `play`.
fn answer(s: Service, play: Play) -> Response {
    let json_resp = |status: u16, v: Value| {
        (StatusCode::from_u16(status).unwrap(), axum::Json(v)).into_response()
    };
    match (s, play) {
        (_, Play::Status(code)) => StatusCode::from_u16(code).unwrap().into_response(),
        (Service::Discord, Play::Ok) => StatusCode::NO_CONTENT.into_response(),
        (Service::Slack, Play::Ok) => (StatusCode::OK, "ok").into_response(),
        (Service::Telegram, Play::Ok) => {
            json_resp(200, json!({"ok": true, "result": {"message_id": 1}}))
        }
        (Service::Discord, Play::Limit(secs)) => json_resp(
            429,
            json!({"message": "You are being rate limited.", "retry_after": secs, "global": false}),
        ),
        (Service::Slack, Play::Limit(secs)) => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", format!("{}", secs.ceil() as u64))],
            "rate_limited",
        )
            .into_response(),
        (Service::Telegram, Play::Limit(secs)) => json_resp(
            429,
            json!({"ok": false, "error_code": 429,
                   "description": format!("Too Many Requests: retry after {}", secs.ceil()),
                   "parameters": {"retry_after": secs.ceil() as u64}}),
        ),
        (Service::Discord, Play::Gone) => {
            json_resp(404, json!({"message": "Unknown Webhook", "code": 10015}))
        }
        (Service::Slack, Play::Gone) => (StatusCode::NOT_FOUND, "no_service").into_response(),
        (Service::Telegram, Play::Gone) => json_resp(
            403,
            json!({"ok": false, "error_code": 403, "description": "Forbidden: bot was blocked by the user"}),
        ),
    }
}

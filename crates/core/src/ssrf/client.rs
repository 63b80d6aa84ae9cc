//! The guarded HTTP client of every outbound webhook request (push's deliveries, the API's test
//! events). Its DNS resolver is [`super::resolve::GuardedResolver`]; literal-IP URLs never reach a
//! resolver, so each URL is checked by [`super::validate_url`] before the request. Redirects are
//! never followed, proxies from the environment are ignored (a proxy would resolve the name
//! itself), idle connections are pooled per host up to what the caller asks (push: its attempts
//! in flight per endpoint) for 30 s.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderName;

use super::resolve::{GuardedResolver, Refused};
use super::{validate_url, UrlError};
use crate::webhook::sign::SignedHeaders;
use crate::UnixMs;

/// `User-Agent` of every attempt.
pub const USER_AGENT: &str = concat!("pmw-webhooks/", env!("CARGO_PKG_VERSION"));
/// Idle connections kept per host by [`GuardedClient::new`].
pub const POOL_IDLE_PER_HOST: usize = 2;
/// How much of a non-2xx response body is kept.
pub const BODY_SNIPPET_BYTES: usize = 256;

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("webhook http client: {0}")]
pub struct ClientBuildError(#[from] reqwest::Error);

/// Why an attempt got no HTTP response.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("destination refused: {0}")]
    Url(#[from] UrlError),
    #[error("destination refused: {0}")]
    Resolve(String),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("{0}")]
    Network(String),
}

/// The parts of a response a sender needs.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    /// Raw `Retry-After` header, if any.
    pub retry_after: Option<String>,
    /// When the response head arrived (ms).
    pub received_ms: i64,
    /// The start of the body for non-2xx responses (lossy UTF-8).
    pub body_snippet: String,
}

/// reqwest with the SSRF guard, no redirects, no proxies, a timeout and a small pool.
#[derive(Debug, Clone)]
pub struct GuardedClient {
    http: reqwest::Client,
    allow_private: bool,
}

impl GuardedClient {
    /// A client keeping [`POOL_IDLE_PER_HOST`] idle connections per host.
    pub fn new(timeout: Duration, allow_private: bool) -> Result<GuardedClient, ClientBuildError> {
        GuardedClient::with_pool(timeout, allow_private, POOL_IDLE_PER_HOST)
    }

    /// A client keeping `idle_per_host` idle connections per host (0: none).
    pub fn with_pool(
        timeout: Duration,
        allow_private: bool,
        idle_per_host: usize,
    ) -> Result<GuardedClient, ClientBuildError> {
        let http = reqwest::Client::builder()
            .dns_resolver(Arc::new(GuardedResolver { allow_private }))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .referer(false)
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .pool_max_idle_per_host(idle_per_host)
            .pool_idle_timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            .user_agent(USER_AGENT)
            .build()?;
        Ok(GuardedClient {
            http,
            allow_private,
        })
    }

    /// The underlying client (its resolver is guarded; URLs are not checked here).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub fn allow_private(&self) -> bool {
        self.allow_private
    }

    /// POST `body` as JSON with the signature headers. The URL is checked first; a 3xx comes
    /// back as a response (never followed).
    pub async fn post(
        &self,
        url: &str,
        headers: &SignedHeaders,
        body: Vec<u8>,
    ) -> Result<HttpResponse, SendError> {
        self.post_with(url, &headers.pairs(), body).await
    }

    /// POST a JSON body with no signature headers (chat destinations: the URL or the bot token
    /// is the credential), through the same guard, timeout and classification.
    pub async fn post_unsigned(&self, url: &str, body: Vec<u8>) -> Result<HttpResponse, SendError> {
        self.post_with(url, &[], body).await
    }

    async fn post_with(
        &self,
        url: &str,
        headers: &[(HeaderName, &str)],
        body: Vec<u8>,
    ) -> Result<HttpResponse, SendError> {
        let url = validate_url(url, self.allow_private)?;
        let mut req = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        for (name, value) in headers {
            req = req.header(name.clone(), *value);
        }
        let mut resp = req.send().await.map_err(classify)?;
        let received_ms = UnixMs::now().as_i64();
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body_snippet = if resp.status().is_success() {
            String::new()
        } else {
            snippet(&mut resp).await
        };
        Ok(HttpResponse {
            status,
            retry_after,
            received_ms,
            body_snippet,
        })
    }
}

/// The start of a body, best effort: a body that errors or stalls is simply cut short.
async fn snippet(resp: &mut reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < BODY_SNIPPET_BYTES {
        match resp.chunk().await {
            Ok(Some(c)) => bytes.extend_from_slice(&c),
            _ => break,
        }
    }
    bytes.truncate(BODY_SNIPPET_BYTES);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The error chain as one line (its URL cut down to the host: [`crate::redact`]), and whether
/// the guard refused the destination.
fn classify(e: reqwest::Error) -> SendError {
    let e = crate::redact::reqwest_error(e);
    let mut parts = vec![e.to_string()];
    let mut guard = None;
    let mut src: Option<&(dyn StdError + 'static)> = e.source();
    while let Some(s) = src {
        if let Some(g) = s.downcast_ref::<Refused>() {
            guard = Some(g.to_string());
        }
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        src = s.source();
    }
    if let Some(g) = guard {
        return SendError::Resolve(g);
    }
    let text = parts.join(": ");
    if e.is_timeout() {
        SendError::Timeout(text)
    } else {
        SendError::Network(text)
    }
}

//! The guarded HTTP client every webhook attempt goes through. Its DNS resolver drops forbidden
//! addresses from each answer (and fails when none remain), so the address connected to is the
//! one checked: there is no window for DNS rebinding. Literal-IP URLs never reach a resolver, so
//! each URL is checked by [`pmw_core::ssrf::validate_url`] before the request. Redirects are
//! never followed, proxies from the environment are ignored (a proxy would resolve the name
//! itself), connections are pooled sparingly.

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pmw_core::ssrf::{self, UrlError};
use pmw_core::UnixMs;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::sign::SignedHeaders;

/// `User-Agent` of every attempt.
pub const USER_AGENT: &str = concat!("pmw-webhooks/", env!("CARGO_PKG_VERSION"));
/// Idle connections kept per host.
pub const POOL_IDLE_PER_HOST: usize = 2;
/// How much of a non-2xx response body is kept for the delivery log.
pub const BODY_SNIPPET_BYTES: usize = 256;

/// A name whose addresses were all refused, or that did not resolve.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error(
        "{host} resolves only to refused addresses ({addrs}); private destinations are not allowed"
    )]
    Forbidden { host: String, addrs: String },
    #[error("{host} is a local name; private destinations are not allowed")]
    LocalName { host: String },
    #[error("{host} did not resolve: {reason}")]
    Resolve { host: String, reason: String },
    #[error("{host} resolved to no address")]
    Empty { host: String },
}

/// Keep the addresses a webhook may reach; fail when none remain.
pub fn filter_addrs(
    host: &str,
    addrs: Vec<SocketAddr>,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, GuardError> {
    if addrs.is_empty() {
        return Err(GuardError::Empty { host: host.into() });
    }
    if allow_private {
        return Ok(addrs);
    }
    let (ok, refused): (Vec<_>, Vec<_>) =
        addrs.into_iter().partition(|a| !ssrf::is_forbidden(a.ip()));
    if ok.is_empty() {
        let addrs = refused
            .iter()
            .map(|a| a.ip().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        return Err(GuardError::Forbidden {
            host: host.into(),
            addrs,
        });
    }
    if !refused.is_empty() {
        tracing::debug!(host, refused = refused.len(), "webhook dns answer filtered");
    }
    Ok(ok)
}

/// Resolve `host` with the system resolver and keep only permitted addresses (port 0: the
/// client substitutes the URL's port).
pub async fn resolve_checked(
    host: &str,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, GuardError> {
    if !allow_private && ssrf::is_local_name(host) {
        return Err(GuardError::LocalName { host: host.into() });
    }
    let addrs = tokio::net::lookup_host((host, 0))
        .await
        .map_err(|e| GuardError::Resolve {
            host: host.into(),
            reason: e.to_string(),
        })?
        .collect();
    filter_addrs(host, addrs, allow_private)
}

/// The `reqwest` resolver built on [`resolve_checked`].
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver {
    pub allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow = self.allow_private;
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs = resolve_checked(&host, allow).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

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

/// The parts of a response the delivery engine needs.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    /// Raw `Retry-After` header, if any.
    pub retry_after: Option<String>,
    /// When the response head arrived (ms).
    pub received_ms: i64,
    /// The start of the body for non-2xx responses (lossy UTF-8), for the delivery log.
    pub body_snippet: String,
}

/// reqwest with the SSRF guard, no redirects, no proxies, a timeout and a small pool.
#[derive(Debug, Clone)]
pub struct GuardedClient {
    http: reqwest::Client,
    allow_private: bool,
}

impl GuardedClient {
    pub fn new(timeout: Duration, allow_private: bool) -> Result<GuardedClient, ClientBuildError> {
        let http = reqwest::Client::builder()
            .dns_resolver(Arc::new(GuardedResolver { allow_private }))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .referer(false)
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .pool_max_idle_per_host(POOL_IDLE_PER_HOST)
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
        let url = ssrf::validate_url(url, self.allow_private)?;
        let mut req = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        for (name, value) in headers.pairs() {
            req = req.header(name, value);
        }
        let mut resp = req.send().await.map_err(classify)?;
        let received_ms = UnixMs::now().as_i64();
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut snippet = Vec::new();
        if !resp.status().is_success() {
            // Best effort: a body that errors or stalls is simply cut short.
            while snippet.len() < BODY_SNIPPET_BYTES {
                match resp.chunk().await {
                    Ok(Some(c)) => snippet.extend_from_slice(&c),
                    _ => break,
                }
            }
            snippet.truncate(BODY_SNIPPET_BYTES);
        }
        Ok(HttpResponse {
            status,
            retry_after,
            received_ms,
            body_snippet: String::from_utf8_lossy(&snippet).into_owned(),
        })
    }
}

/// The error chain as one line, and whether the guard refused the destination.
fn classify(e: reqwest::Error) -> SendError {
    let mut parts = vec![e.to_string()];
    let mut guard = None;
    let mut src: Option<&(dyn StdError + 'static)> = e.source();
    while let Some(s) = src {
        if let Some(g) = s.downcast_ref::<GuardError>() {
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

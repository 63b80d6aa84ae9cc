//! The API's own SSRF-guarded HTTP client for test events (`POST /v1/webhooks/{id}/test`): the
//! URL is checked by [`pmw_core::ssrf::validate_url`], and the DNS resolver drops forbidden
//! addresses from each answer (failing when none remain), so the address connected to is the one
//! checked. No redirects, no proxies from the environment, a short timeout.

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pmw_core::ssrf;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// `User-Agent` of test events (the same product as push's deliveries).
pub const USER_AGENT: &str = concat!("pmw-webhooks/", env!("CARGO_PKG_VERSION"));
/// How long a test attempt may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// How much of a non-2xx response body is returned.
pub const BODY_SNIPPET_BYTES: usize = 256;

/// A name that resolved to refused addresses only (or to none).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(String);

#[derive(Debug, Clone, Copy)]
struct GuardedResolver {
    allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow = self.allow_private;
        let host = name.as_str().to_string();
        Box::pin(async move {
            if !allow && ssrf::is_local_name(&host) {
                return Err(Box::new(Refused(format!("{host} is a local name"))) as _);
            }
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| allow || !ssrf::is_forbidden(a.ip()))
                .collect();
            if addrs.is_empty() {
                return Err(
                    Box::new(Refused(format!("{host} resolves to no permitted address"))) as _,
                );
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The guarded client.
#[derive(Debug, Clone)]
pub struct HookClient {
    http: reqwest::Client,
    allow_private: bool,
}

/// What one attempt got.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The HTTP status, when a response arrived.
    pub status: Option<u16>,
    /// Why no 2xx arrived: the transport error, or the start of a non-2xx body.
    pub error: Option<String>,
}

impl HookClient {
    pub fn new(allow_private: bool) -> Result<HookClient, reqwest::Error> {
        let http = reqwest::Client::builder()
            .dns_resolver(Arc::new(GuardedResolver { allow_private }))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .referer(false)
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(0)
            .user_agent(USER_AGENT)
            .build()?;
        Ok(HookClient {
            http,
            allow_private,
        })
    }

    /// POST `body` as JSON with the signature headers; never follows a redirect.
    pub async fn post(&self, url: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Outcome {
        let url = match ssrf::validate_url(url, self.allow_private) {
            Ok(u) => u,
            Err(e) => {
                return Outcome {
                    status: None,
                    error: Some(format!("destination refused: {e}")),
                }
            }
        };
        let mut req = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let mut resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                return Outcome {
                    status: None,
                    error: Some(chain(&e)),
                }
            }
        };
        let status = resp.status();
        if status.is_success() {
            return Outcome {
                status: Some(status.as_u16()),
                error: None,
            };
        }
        let mut snippet = Vec::new();
        while snippet.len() < BODY_SNIPPET_BYTES {
            match resp.chunk().await {
                Ok(Some(c)) => snippet.extend_from_slice(&c),
                _ => break,
            }
        }
        snippet.truncate(BODY_SNIPPET_BYTES);
        Outcome {
            status: Some(status.as_u16()),
            error: Some(format!(
                "HTTP {}: {}",
                status.as_u16(),
                String::from_utf8_lossy(&snippet)
            )),
        }
    }
}

/// The error and its sources as one line.
fn chain(e: &reqwest::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut src: Option<&(dyn StdError + 'static)> = e.source();
    while let Some(s) = src {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        src = s.source();
    }
    parts.join(": ")
}

//! The client of test events (`POST /v1/webhooks/{id}/test`): core's SSRF-guarded client
//! ([`pmw_core::ssrf::client`], the one push delivers through: URL checked, DNS answers filtered,
//! no redirects, no proxies), with a short timeout and no pooled connections, and its answer as
//! the test reports it.

use std::time::Duration;

use pmw_core::ssrf::client::{ClientBuildError, GuardedClient, HttpResponse, SendError};
use pmw_core::webhook::sign::SignedHeaders;

/// How long a test attempt may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The guarded client.
#[derive(Debug, Clone)]
pub struct HookClient {
    guarded: GuardedClient,
}

/// What one attempt got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The HTTP status, when a response arrived.
    pub status: Option<u16>,
    /// Why no 2xx arrived: the transport error, or the start of a non-2xx body.
    pub error: Option<String>,
}

impl Outcome {
    /// A test's report of an attempt: delivered on 2xx, else why not.
    pub fn of(sent: Result<HttpResponse, SendError>) -> Outcome {
        match sent {
            Err(e) => Outcome {
                status: None,
                // A transport error can name the URL: only its host is kept.
                error: Some(pmw_core::redact::text(&e.to_string())),
            },
            Ok(r) if (200..300).contains(&r.status) => Outcome {
                status: Some(r.status),
                error: None,
            },
            Ok(r) => Outcome {
                status: Some(r.status),
                error: Some(format!("HTTP {}: {}", r.status, r.body_snippet)),
            },
        }
    }
}

impl HookClient {
    pub fn new(allow_private: bool) -> Result<HookClient, ClientBuildError> {
        Ok(HookClient {
            guarded: GuardedClient::with_pool(TIMEOUT, allow_private, 0)?,
        })
    }

    /// POST `body` as JSON with the signature headers; never follows a redirect.
    pub async fn post(&self, url: &str, headers: &SignedHeaders, body: Vec<u8>) -> Outcome {
        Outcome::of(self.guarded.post(url, headers, body).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, snippet: &str) -> HttpResponse {
        HttpResponse {
            status,
            retry_after: None,
            received_ms: 0,
            body_snippet: snippet.into(),
        }
    }

    #[test]
    fn a_2xx_is_delivered_and_anything_else_says_why_not() {
        assert_eq!(
            Outcome::of(Ok(response(204, ""))),
            Outcome {
                status: Some(204),
                error: None
            }
        );
        assert_eq!(
            Outcome::of(Ok(response(500, "boom"))),
            Outcome {
                status: Some(500),
                error: Some("HTTP 500: boom".into())
            }
        );
        assert_eq!(
            Outcome::of(Ok(response(302, ""))).error.as_deref(),
            Some("HTTP 302: ")
        );
        let refused = Outcome::of(Err(SendError::Resolve("h is a local name".into())));
        assert_eq!(refused.status, None);
        assert_eq!(
            refused.error.as_deref(),
            Some("destination refused: h is a local name")
        );
    }
}

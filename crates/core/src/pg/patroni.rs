//! Which member Patroni names the primary (`PMW_POSTGRES_PATRONI_URLS`, docs/OPERATIONS.md).
//! Read-write alone does not name the primary: a primary that was frozen or cut off still takes
//! read-write sessions after it thaws, until its Patroni's next loop demotes it (16 s were seen),
//! and a session there reads a ledger and cursors that stopped at the fault. Patroni's REST API
//! answers `GET /primary` with 200 only while that member holds the leader key and its lease
//! (`ttl`) has not run out by its own clock, so a member that missed its renewals stops
//! answering 200 the moment it thaws. With the URLs set, a session connects only to a host
//! Patroni names ([`super::follow::connect`]) and the liveness probe ends every session to a
//! node Patroni stops naming ([`super::liveness`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How long a member's REST API may take to answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(1);

/// What a member's REST API says of its own leadership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// 200: it holds the leader key.
    Primary,
    /// Any other status: it does not.
    Not,
    /// No answer within [`ASK_TIMEOUT`] (down, frozen, unreachable).
    NoAnswer,
}

/// The REST API of each Postgres host's Patroni, in the order of the hosts of
/// `PMW_POSTGRES_URL`; empty when unset (no check: a one-host URL, or HA without Patroni).
#[derive(Clone, Default)]
pub struct Patroni {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    urls: Vec<String>,
    http: reqwest::Client,
}

impl std::fmt::Debug for Patroni {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: &[String] = self.inner.as_ref().map_or(&[], |i| &i.urls);
        f.debug_struct("Patroni").field("urls", &urls).finish()
    }
}

impl Patroni {
    /// The REST APIs at `urls` (`http://host:8008`, one per Postgres host, in order); one
    /// client per list in a process, however many sessions ask.
    pub fn new(urls: Vec<String>) -> Patroni {
        if urls.is_empty() {
            return Patroni::default();
        }
        static MADE: OnceLock<Mutex<HashMap<Vec<String>, Patroni>>> = OnceLock::new();
        let mut made = MADE.get_or_init(Default::default).lock().expect("patroni");
        made.entry(urls.clone())
            .or_insert_with(|| Patroni::build(urls))
            .clone()
    }

    fn build(urls: Vec<String>) -> Patroni {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(ASK_TIMEOUT)
            .connect_timeout(ASK_TIMEOUT)
            .pool_max_idle_per_host(1)
            .build()
            .expect("a plain HTTP client builds");
        let urls = urls
            .into_iter()
            .map(|u| u.trim_end_matches('/').to_string())
            .collect();
        Patroni {
            inner: Some(Arc::new(Inner { urls, http })),
        }
    }

    /// Whether the check is on.
    pub fn is_set(&self) -> bool {
        self.inner.is_some()
    }

    /// What member `i` says of itself (`Named::Primary` when the check is off).
    pub async fn ask(&self, i: usize) -> Named {
        let Some(inner) = &self.inner else {
            return Named::Primary;
        };
        let Some(url) = inner.urls.get(i) else {
            return Named::NoAnswer;
        };
        match inner.http.get(format!("{url}/primary")).send().await {
            Ok(r) if r.status() == reqwest::StatusCode::OK => Named::Primary,
            Ok(_) => Named::Not,
            Err(_) => Named::NoAnswer,
        }
    }

    /// The hosts (by index among `n`) whose member says it is the primary, asked all at once
    /// and returned at the first that says so (a frozen member's silence, [`ASK_TIMEOUT`], is
    /// waited for only when no member names itself); every index when the check is off.
    pub async fn primaries(&self, n: usize) -> Vec<usize> {
        if self.inner.is_none() {
            return (0..n).collect();
        }
        first_named((0..n).map(|i| async move { (i, self.ask(i).await) })).await
    }
}

/// The index of the first answer that is [`Named::Primary`] among `asks` run at once (empty when
/// none is).
async fn first_named<F>(asks: impl IntoIterator<Item = F>) -> Vec<usize>
where
    F: std::future::Future<Output = (usize, Named)>,
{
    use futures::StreamExt;
    let mut asks: futures::stream::FuturesUnordered<F> = asks.into_iter().collect();
    while let Some((i, named)) = asks.next().await {
        if named == Named::Primary {
            return vec![i];
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;

    use futures::FutureExt;

    use super::*;

    type Ask = Pin<Box<dyn Future<Output = (usize, Named)>>>;

    fn now(i: usize, named: Named) -> Ask {
        Box::pin(futures::future::ready((i, named)))
    }

    fn silent() -> Ask {
        Box::pin(futures::future::pending())
    }

    #[test]
    fn the_first_member_naming_itself_is_not_held_up_by_a_silent_one() {
        let asks = [silent(), now(1, Named::Not), now(2, Named::Primary)];
        assert_eq!(first_named(asks).now_or_never(), Some(vec![2]));
        // None names itself: every answer is waited for.
        let none = [now(0, Named::NoAnswer), now(1, Named::Not)];
        assert_eq!(first_named(none).now_or_never(), Some(vec![]));
        assert_eq!(
            first_named([silent(), now(1, Named::Not)]).now_or_never(),
            None
        );
    }
}

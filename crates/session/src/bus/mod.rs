//! Edge mode's broker (docs/ARCHITECTURE.md §3.6): the connection to the NATS JetStream cluster,
//! the one stream a push leader publishes its rounds' frames to ([`stream`]), the fenced publisher
//! ([`publish`]), the rounds it publishes ([`round`]) and the follower an edge reads them with
//! ([`follow`]). Everything here runs on nats-server 2.9.10 (Debian bookworm): docs/OPERATIONS.md
//! ("Edge mode") lists the JetStream features used and the release each came in.

mod access;
pub mod follow;
mod frame;
pub mod publish;
pub mod round;
pub mod sign;
pub mod stream;

use std::time::Duration;

use async_nats::jetstream;

use pmw_core::backoff::{Backoff, Policy};

pub use access::BusAccess;
pub use follow::{Event, Follower, Gap, Refused};
pub use frame::{Frame, FrameId, OutFrame};
pub use publish::{FencedPublisher, Stored};

/// What can go wrong on the bus.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// No usable broker (connect, stream API, or a publish that found no stream leader in time).
    #[error("broker unavailable: {0}")]
    Unavailable(String),
    /// The stream moved past what this publisher last stored: another leader published since.
    /// The publisher is deposed and must not publish again until it claims anew under the lock.
    #[error("fenced: the stream's last sequence is {actual}, this publisher expected {expected}")]
    Fenced { expected: u64, actual: u64 },
    /// The stream's latest epoch marker, signed, is of a newer epoch than this claimant's: an
    /// older leader never claims over a newer one (it must not publish).
    #[error("superseded: epoch {theirs} claimed the stream, this publisher's epoch is {ours}")]
    Superseded { ours: i64, theirs: i64 },
    /// A frame or configuration the bus refuses (a subject token with `.`, `*`, `>`, …).
    #[error("invalid: {0}")]
    Invalid(String),
}

/// Where the broker is and what the stream keeps.
#[derive(Debug, Clone)]
pub struct BusConfig {
    /// Client URLs of the cluster's nodes (`PMW_NATS_URLS`, comma-separated).
    pub urls: Vec<String>,
    /// The role's credentials and TLS settings (the broker is locked: deploy/nats/nats.conf).
    pub access: BusAccess,
    /// The stream's name.
    pub stream: String,
    /// First subject token: frames go to `<prefix>.frames.<account>`, epoch claims to
    /// `<prefix>.epoch`.
    pub prefix: String,
    /// Copies of every message (3: one node may be lost).
    pub replicas: usize,
    /// How long a frame stays: the resume window served from the stream; older positions come
    /// from the ledger stores.
    pub max_age: Duration,
    /// How long JetStream remembers a message id: a successor's republish within it is a
    /// duplicate, stored once. Must exceed the longest failover.
    pub duplicate_window: Duration,
    /// The most bytes the stream keeps (its oldest frames are dropped beyond): a bound on the
    /// broker's disk whatever is published.
    pub max_bytes: i64,
    /// The largest message the stream accepts (at most the servers' `max_payload`).
    pub max_msg_size: i32,
    /// How long one publish waits for the broker's ack before it is tried again.
    pub ack_timeout: Duration,
    /// How long one JetStream API request (stream info, last message, consumer create) waits
    /// for an answer. The client's own request timeout is 10 s, and a request sent as a node
    /// dies or a stream elects its leader can wait all of it; bounded, it is tried again.
    pub api_timeout: Duration,
    /// How long a round's publish keeps retrying before it reports the broker unavailable (the
    /// caller's cursor waits meanwhile and it retries the whole round).
    pub give_up: Duration,
    /// The key a publisher signs every message with (`PMW_BUS_SIGNING_KEY`; a publisher
    /// refuses to claim without one).
    pub signer: Option<sign::SigningKey>,
    /// The public keys a reader accepts (`PMW_BUS_VERIFY_KEYS`; a publisher also accepts its
    /// own key's).
    pub verify: sign::VerifyKeys,
}

impl BusConfig {
    /// The defaults with `urls` (comma-separated, as `PMW_NATS_URLS`).
    pub fn new(urls: &str) -> BusConfig {
        BusConfig {
            urls: urls
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(String::from)
                .collect(),
            access: BusAccess::default(),
            stream: "PMW_FRAMES".into(),
            prefix: "pmw".into(),
            replicas: 3,
            max_age: Duration::from_secs(3600),
            duplicate_window: Duration::from_secs(120),
            max_bytes: 1 << 30,
            max_msg_size: 1 << 20,
            ack_timeout: Duration::from_secs(2),
            api_timeout: Duration::from_secs(2),
            give_up: Duration::from_secs(10),
            signer: None,
            verify: sign::VerifyKeys::default(),
        }
    }

    /// The defaults with `urls`, the stream `stream` and the subject prefix `prefix` (a
    /// service's `*_NATS_URLS`, `*_NATS_STREAM` and `*_NATS_PREFIX`).
    pub fn named(urls: &str, stream: &str, prefix: &str) -> BusConfig {
        BusConfig {
            stream: stream.into(),
            prefix: prefix.into(),
            ..BusConfig::new(urls)
        }
    }

    /// The same, presenting `access` to the broker.
    pub fn with_access(self, access: BusAccess) -> BusConfig {
        BusConfig { access, ..self }
    }

    /// Every URL parses, the access settings hold ([`BusAccess::check`]), the stream name and
    /// prefix are one subject token each and the limits are positive.
    pub fn check(&self) -> Result<(), BusError> {
        self.access.check(&self.addrs()?)?;
        if self.max_bytes <= 0 || self.max_msg_size <= 0 {
            return Err(BusError::Invalid(
                "the stream's max bytes and max message size must be positive".into(),
            ));
        }
        check_token(&self.stream)?;
        check_token(&self.prefix)
    }

    /// These settings with the signing key `signer` and the verify keys `verify`.
    pub fn signed(self, signer: Option<sign::SigningKey>, verify: sign::VerifyKeys) -> BusConfig {
        BusConfig {
            signer,
            verify,
            ..self
        }
    }

    /// The keys messages are verified with: the verify keys and the signing key's public half.
    pub fn keys(&self) -> sign::VerifyKeys {
        match &self.signer {
            Some(k) => self.verify.clone().with(k),
            None => self.verify.clone(),
        }
    }

    /// The URLs parsed (at least one). An unparsable URL is not quoted: it may hold a secret.
    fn addrs(&self) -> Result<Vec<async_nats::ServerAddr>, BusError> {
        if self.urls.is_empty() {
            return Err(BusError::Invalid("no NATS URL".into()));
        }
        self.urls
            .iter()
            .enumerate()
            .map(|(i, u)| {
                u.parse::<async_nats::ServerAddr>().map_err(|e| {
                    BusError::Invalid(format!("NATS URL {} does not parse: {e}", i + 1))
                })
            })
            .collect()
    }

    /// The subject of one account's frames.
    pub fn frames_subject(&self, account: &str) -> Result<String, BusError> {
        check_token(account)?;
        Ok(format!("{}.frames.{account}", self.prefix))
    }

    /// The subject of the leaders' epoch claims.
    pub fn epoch_subject(&self) -> String {
        format!("{}.epoch", self.prefix)
    }
}

/// A subject token pmw puts an account in: 1-128 of `[A-Za-z0-9_-]`.
pub(crate) fn check_token(t: &str) -> Result<(), BusError> {
    let ok = !t.is_empty()
        && t.len() <= 128
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(BusError::Invalid(format!(
            "{t:?} is not a subject token (1-128 of A-Z a-z 0-9 _ -)"
        )))
    }
}

/// A connection to the cluster and its JetStream context.
#[derive(Clone)]
pub struct Bus {
    pub config: BusConfig,
    pub client: async_nats::Client,
    pub js: jetstream::Context,
}

impl Bus {
    /// Connect to any of the configured nodes, as the configured role ([`BusAccess`]). The
    /// client reconnects on its own, to any node, waiting per the store policy
    /// ([`Policy::STORE`]) between tries.
    pub async fn connect(config: BusConfig, name: &str) -> Result<Bus, BusError> {
        Bus::connect_with(config, name, async_nats::ConnectOptions::new()).await
    }

    /// [`Bus::connect`] from the client options `opts` (e.g. with an event callback).
    pub async fn connect_with(
        config: BusConfig,
        name: &str,
        opts: async_nats::ConnectOptions,
    ) -> Result<Bus, BusError> {
        let addrs = config.addrs()?;
        config.access.check(&addrs)?;
        let opts = opts
            .name(name)
            .connection_timeout(Duration::from_secs(2))
            .reconnect_delay_callback(reconnect_wait);
        let client = config
            .access
            .apply(opts, &addrs)
            .connect(addrs)
            .await
            .map_err(|e| BusError::Unavailable(format!("connect: {e}")))?;
        let js = jetstream::context::ContextBuilder::new()
            .timeout(config.ack_timeout)
            .build(client.clone());
        Ok(Bus { config, client, js })
    }
}

impl Bus {
    /// One JetStream API request (`what` names it in the error), answered within
    /// [`BusConfig::api_timeout`] or reported [`BusError::Unavailable`].
    pub(crate) async fn api<T, E: std::fmt::Display>(
        &self,
        what: &str,
        request: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, BusError> {
        self.answered(what, request)
            .await?
            .map_err(|e| BusError::Unavailable(format!("{what}: {e}")))
    }

    /// The broker's answer to one request, error included for the caller to tell apart, within
    /// [`BusConfig::api_timeout`]; no answer is [`BusError::Unavailable`].
    pub(crate) async fn answered<F: std::future::Future>(
        &self,
        what: &str,
        request: F,
    ) -> Result<F::Output, BusError> {
        let bound = self.config.api_timeout;
        tokio::time::timeout(bound, request)
            .await
            .map_err(|_| BusError::Unavailable(format!("{what}: no answer in {bound:?}")))
    }
}

/// The wait before reconnect attempt `attempts` (the client counts from 1): the store policy's
/// jittered doubling, capped.
fn reconnect_wait(attempts: usize) -> Duration {
    let mut b = Backoff::new(Policy::STORE);
    let mut wait = Duration::ZERO;
    for _ in 0..attempts.min(16) {
        wait = b.next_wait();
    }
    wait
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_split_on_commas_and_trimmed() {
        let c = BusConfig::new(" nats://127.0.0.1:1, nats://127.0.0.1:2,,");
        assert_eq!(c.urls, ["nats://127.0.0.1:1", "nats://127.0.0.1:2"]);
    }

    #[test]
    fn a_config_with_a_bad_url_or_token_is_refused() {
        assert!(BusConfig::new("nats://127.0.0.1:4222").check().is_ok());
        assert!(BusConfig::new("").check().is_err());
        assert!(BusConfig::new("nats://127.0.0.1:notaport").check().is_err());
        let mut c = BusConfig::new("nats://127.0.0.1:4222");
        c.stream = "A.B".into();
        assert!(c.check().is_err());
    }

    #[test]
    fn accounts_are_single_subject_tokens() {
        let c = BusConfig::new("nats://127.0.0.1:1");
        assert_eq!(c.frames_subject("acct_7-x").unwrap(), "pmw.frames.acct_7-x");
        for bad in ["", "a.b", "a*", ">", "a b", &"x".repeat(129)] {
            assert!(
                matches!(c.frames_subject(bad), Err(BusError::Invalid(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn reconnect_waits_stay_within_the_store_policy() {
        assert_eq!(reconnect_wait(0), Duration::ZERO);
        let first = reconnect_wait(1);
        assert!(first >= Policy::STORE.first / 2 && first <= Policy::STORE.first);
        for n in [5, 50, 5000] {
            let w = reconnect_wait(n);
            assert!(
                w >= Policy::STORE.cap / 2 && w <= Policy::STORE.cap,
                "{n}: {w:?}"
            );
        }
    }
}

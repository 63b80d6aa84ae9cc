//! The one retry policy every loop that reconnects or retries uses: exponential from `first`,
//! capped at `cap`, with "equal jitter" (each wait is drawn from [d/2, d]) so a fleet that lost
//! the same store does not come back in lock-step. Caps are short on purpose: a store that
//! came back is found within one cap (issue 28: a 322 ms Postgres restart must not cost a
//! subscriber a 30 s backoff). Webhook delivery retries to a subscriber's receiver are a
//! different thing (a published schedule, `push::webhook::retry`) and do not use this.

use std::time::Duration;

use rand::Rng;

/// First wait and cap of one kind of retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub first: Duration,
    pub cap: Duration,
}

impl Policy {
    /// Reconnecting to Postgres or ClickHouse, or retrying a statement that failed on one.
    pub const STORE: Policy = Policy {
        first: Duration::from_millis(100),
        cap: Duration::from_secs(1),
    };
    /// Reconnecting to an RPC provider (subscription or HTTP).
    pub const RPC: Policy = Policy {
        first: Duration::from_millis(100),
        cap: Duration::from_secs(2),
    };
    /// A client of pmw's own API (pmwctl watch) reconnecting to a server that went away.
    pub const CLIENT: Policy = Policy {
        first: Duration::from_millis(250),
        cap: Duration::from_secs(5),
    };
}

/// The state of one retry loop: call [`Backoff::next_wait`] after each failure and
/// [`Backoff::reset`] after a success.
#[derive(Clone, Debug)]
pub struct Backoff {
    policy: Policy,
    failures: u32,
}

impl Backoff {
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            failures: 0,
        }
    }

    /// The ceiling of the next wait: `first · 2^failures`, at most `cap`.
    pub fn ceiling(&self) -> Duration {
        let factor = 1u32 << self.failures.min(20);
        self.policy
            .first
            .saturating_mul(factor)
            .min(self.policy.cap)
    }

    /// The wait before the next try (jittered within [ceiling/2, ceiling]); counts a failure.
    pub fn next_wait(&mut self) -> Duration {
        let ceiling = self.ceiling();
        self.failures = self.failures.saturating_add(1);
        let half = ceiling / 2;
        half + half.mul_f64(rand::thread_rng().gen_range(0.0..=1.0))
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_from_first_up_to_the_cap_and_stay_within_the_jitter_band() {
        let p = Policy {
            first: Duration::from_millis(100),
            cap: Duration::from_millis(1000),
        };
        let mut b = Backoff::new(p);
        let ceilings = [100, 200, 400, 800, 1000, 1000, 1000];
        for c in ceilings {
            let c = Duration::from_millis(c);
            assert_eq!(b.ceiling(), c);
            let w = b.next_wait();
            assert!(w >= c / 2 && w <= c, "{w:?} outside [{:?}, {c:?}]", c / 2);
        }
        assert_eq!(b.failures(), 7);
        b.reset();
        assert_eq!(b.ceiling(), Duration::from_millis(100));
    }

    #[test]
    fn jitter_spreads_the_waits() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let mut b = Backoff::new(Policy::STORE);
            seen.insert(b.next_wait().as_micros());
        }
        assert!(
            seen.len() > 10,
            "50 first waits took only {} values",
            seen.len()
        );
    }

    #[test]
    fn many_failures_do_not_overflow() {
        let mut b = Backoff::new(Policy::RPC);
        for _ in 0..10_000 {
            assert!(b.next_wait() <= Policy::RPC.cap);
        }
    }

    #[test]
    fn store_and_rpc_caps_are_within_the_recovery_budgets() {
        // docs/RELIABILITY.md: a store restart recovers within 5 s of it accepting
        // connections, an RPC cut within 3 s of the restore; one cap must fit well inside.
        assert!(Policy::STORE.cap <= Duration::from_secs(1));
        assert!(Policy::RPC.cap <= Duration::from_secs(2));
    }
}

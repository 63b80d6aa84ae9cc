//! Provider health and the branch rule. A provider is demoted while it reports another chain id,
//! its last call failed, its head subscription is down, or its head is more than the allowed lag
//! behind or ahead of the providers' median head (one provider announcing a head far above the
//! others neither demotes them nor leads); it is promoted again as soon as none of these holds
//! (its poll and subscription keep retrying under the one RPC backoff).
//!
//! The branch rule: canonical questions ("which block is at height n") go to one provider
//! first, the leader, which changes only when it is demoted or another healthy provider's head
//! is at least [`LEAD_MARGIN`] (2) blocks higher; ingest leaves its branch only on a parent-hash
//! mismatch proven by the leader's headers. Two providers that disagree at one height, or on two
//! branches growing in step (each one block ahead in turn), never make ingest switch back and
//! forth; a branch two blocks longer is followed (and a provider on a dead branch falls behind
//! and is demoted as lagging).

use serde::Serialize;

/// Where a provider stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    Healthy,
    /// Its last call (or head poll) failed.
    Failing,
    /// Its head subscription is not connected, or has announced no head yet.
    NoSubscription,
    /// Its head is more than the allowed lag behind the median head.
    Lagging,
    /// Its head is more than the allowed lag above the median head (a head no one else sees).
    Ahead,
    /// It reports another chain id than the configured one: never asked.
    WrongChain,
}

impl Standing {
    pub fn name(self) -> &'static str {
        match self {
            Standing::Healthy => "healthy",
            Standing::Failing => "failing",
            Standing::NoSubscription => "no_subscription",
            Standing::Lagging => "lagging",
            Standing::Ahead => "ahead",
            Standing::WrongChain => "wrong_chain",
        }
    }
}

/// What health is judged on.
#[derive(Debug, Clone, Copy, Default)]
pub struct Health {
    /// The highest head number it announced.
    pub head: u64,
    pub ws_up: bool,
    pub failing: bool,
    pub wrong_chain: bool,
}

impl Health {
    /// Whether its head counts toward the median (it is connected, answering, on our chain).
    pub fn counts(&self) -> bool {
        !self.wrong_chain && !self.failing && self.ws_up && self.head > 0
    }
}

/// A provider's standing, given the median head of the providers ([`median`]).
pub fn standing(h: &Health, median: u64, max_lag: u64) -> Standing {
    if h.wrong_chain {
        Standing::WrongChain
    } else if h.failing {
        Standing::Failing
    } else if !h.ws_up || h.head == 0 {
        Standing::NoSubscription
    } else if median.saturating_sub(h.head) > max_lag {
        Standing::Lagging
    } else if h.head.saturating_sub(median) > max_lag {
        Standing::Ahead
    } else {
        Standing::Healthy
    }
}

/// The median of the heads of the providers that count ([`Health::counts`]), the lower one of
/// an even count: the highest head at least half of them reached (0 when none counts).
pub fn median(health: &[Health]) -> u64 {
    let mut heads: Vec<u64> = health
        .iter()
        .filter(|h| h.counts())
        .map(|h| h.head)
        .collect();
    heads.sort_unstable();
    heads
        .get(heads.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0)
}

/// How many blocks higher another provider's head must be to take the lead from a healthy one.
pub const LEAD_MARGIN: u64 = 2;

/// The leader after a change: `current` stays unless it is not healthy or a healthy provider's
/// head is [`LEAD_MARGIN`] or more above its own; a new leader is the healthy one with the
/// highest head (the first listed on a tie). With none healthy, the highest head leads.
pub fn leader(current: usize, heads: &[u64], healthy: &[bool]) -> usize {
    let best_of = |candidates: &dyn Fn(usize) -> bool| {
        (0..heads.len()).filter(|&i| candidates(i)).fold(
            None,
            |best: Option<usize>, i| match best {
                Some(b) if heads[b] >= heads[i] => Some(b),
                _ => Some(i),
            },
        )
    };
    let Some(top) = best_of(&|i| healthy[i]) else {
        return best_of(&|_| true).unwrap_or(0);
    };
    if current < heads.len() && healthy[current] && heads[current] + LEAD_MARGIN > heads[top] {
        current
    } else {
        top
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standing_names_the_first_reason() {
        let h = |head, ws_up, failing| Health {
            head,
            ws_up,
            failing,
            wrong_chain: false,
        };
        assert_eq!(standing(&h(104, true, false), 100, 3), Standing::Ahead);
        let wrong = Health {
            wrong_chain: true,
            ..h(100, true, false)
        };
        assert_eq!(standing(&wrong, 100, 3), Standing::WrongChain);
        assert_eq!(standing(&h(100, true, false), 103, 3), Standing::Healthy);
        assert_eq!(standing(&h(100, true, false), 104, 3), Standing::Lagging);
        assert_eq!(
            standing(&h(100, false, false), 100, 3),
            Standing::NoSubscription
        );
        assert_eq!(standing(&h(100, false, true), 100, 3), Standing::Failing);
        // Connected, nothing announced yet: not "lagging" (not a demotion), not healthy either.
        assert_eq!(
            standing(&h(0, true, false), 100, 3),
            Standing::NoSubscription
        );
    }

    #[test]
    fn the_median_ignores_one_far_head_and_providers_that_do_not_count() {
        let h = |head| Health {
            head,
            ws_up: true,
            ..Health::default()
        };
        assert_eq!(median(&[h(100), h(101), h(1_000_000)]), 101);
        assert_eq!(median(&[h(100), h(1_000_000)]), 100);
        let cut = Health {
            failing: true,
            ..h(10)
        };
        assert_eq!(median(&[h(40), cut]), 40);
        assert_eq!(median(&[]), 0);
    }

    #[test]
    fn an_equal_head_elsewhere_does_not_move_the_leader() {
        // Two providers on two branches at the same height: the leader stays, either way.
        assert_eq!(leader(0, &[100, 100], &[true, true]), 0);
        assert_eq!(leader(1, &[100, 100], &[true, true]), 1);
    }

    #[test]
    fn one_block_ahead_is_not_enough_to_take_the_lead() {
        // Another branch one block ahead (it reached the height first): no switch, either way.
        assert_eq!(leader(0, &[100, 101], &[true, true]), 0);
        assert_eq!(leader(1, &[101, 100], &[true, true]), 1);
    }

    #[test]
    fn two_blocks_ahead_takes_the_lead_and_equal_does_not_take_it_back() {
        assert_eq!(leader(0, &[100, 102], &[true, true]), 1);
        assert_eq!(leader(1, &[102, 102], &[true, true]), 1);
        assert_eq!(leader(1, &[103, 102], &[true, true]), 1);
    }

    #[test]
    fn a_demoted_leader_hands_over_and_a_demoted_head_never_leads() {
        assert_eq!(leader(0, &[100, 99], &[false, true]), 1);
        assert_eq!(leader(1, &[100, 120], &[true, false]), 0);
        assert_eq!(leader(2, &[100, 120, 120], &[true, true, true]), 2);
        // The current leader far behind: the first of the highest takes over.
        assert_eq!(leader(0, &[100, 120, 120], &[true, true, true]), 1);
    }

    #[test]
    fn with_none_healthy_the_highest_head_leads() {
        assert_eq!(leader(0, &[100, 105], &[false, false]), 1);
        assert_eq!(leader(0, &[7], &[false]), 0);
    }
}

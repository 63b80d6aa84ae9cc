//! Simulation settings: the world (wallets, markets, version mix, order shapes, fees, seed)
//! and the run (matches per block, pacing, count, duration), with deterministic demo defaults.

use std::time::Duration;

use anyhow::{bail, ensure};
use pmw_core::Address;
use serde::{Deserialize, Serialize};

use crate::abi::keccak256;
use crate::types::{TokenId, B256};

/// A prediction market the simulator trades: one condition, one token per outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Market {
    pub question: String,
    pub condition_id: B256,
    pub slug: String,
    /// Outcome names; `outcomes[i]` is the outcome of `token_ids[i]`.
    pub outcomes: Vec<String>,
    pub token_ids: Vec<TokenId>,
    #[serde(default)]
    pub neg_risk: bool,
    #[serde(default)]
    pub closed: bool,
    /// The slug of the event the market belongs to (`GET /events?slug=`); none: an event of
    /// its own, with the market's slug.
    #[serde(default)]
    pub event: Option<String>,
}

impl Market {
    /// A binary market with token ids and condition id derived from `slug` (deterministic).
    pub fn demo(question: &str, slug: &str, outcomes: [&str; 2], neg_risk: bool) -> Market {
        let token =
            |o: &str| TokenId::from_be_bytes(&keccak256(format!("pmw-sim token {slug} {o}")));
        Market {
            question: question.to_string(),
            condition_id: B256(keccak256(format!("pmw-sim condition {slug}"))),
            slug: slug.to_string(),
            outcomes: outcomes.iter().map(|o| o.to_string()).collect(),
            token_ids: outcomes.iter().map(|o| token(o)).collect(),
            neg_risk,
            closed: false,
            event: None,
        }
    }

    /// The same market in event `slug`.
    pub fn in_event(mut self, slug: &str) -> Market {
        self.event = Some(slug.to_string());
        self
    }

    /// The slug of the market's event.
    pub fn event_slug(&self) -> &str {
        self.event.as_deref().unwrap_or(&self.slug)
    }

    /// Index of `token` in this market's tokens.
    pub fn outcome_index(&self, token: &TokenId) -> Option<usize> {
        self.token_ids.iter().position(|t| t == token)
    }
}

/// `n` deterministic demo wallets: the last 20 bytes of keccak("pmw-sim demo wallet {i}").
pub fn demo_wallets(n: usize) -> Vec<Address> {
    (0..n)
        .map(|i| {
            let h = keccak256(format!("pmw-sim demo wallet {i}"));
            Address::from_slice(&h[12..]).expect("20 bytes")
        })
        .collect()
}

/// The default markets: two plain CTF markets and a two-market NegRisk event.
pub fn demo_markets() -> Vec<Market> {
    vec![
        Market::demo(
            "Will the pmw demo index close above 100 on Friday?",
            "pmw-demo-index-above-100-friday",
            ["Yes", "No"],
            false,
        ),
        Market::demo(
            "Will it rain in Lisbon on pmw demo day?",
            "pmw-demo-rain-lisbon",
            ["Yes", "No"],
            false,
        ),
        Market::demo(
            "Will Team Alpha win the pmw demo cup?",
            "pmw-demo-cup-team-alpha",
            ["Yes", "No"],
            true,
        )
        .in_event("pmw-demo-cup"),
        Market::demo(
            "Will Team Beta win the pmw demo cup?",
            "pmw-demo-cup-team-beta",
            ["Yes", "No"],
            true,
        )
        .in_event("pmw-demo-cup"),
    ]
}

/// What the simulated world looks like. Two runs with the same config and seed plan the same
/// matches.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct SimConfig {
    /// Wallets that place orders (makers and aggressors). At least two.
    pub wallets: Vec<Address>,
    pub markets: Vec<Market>,
    /// RNG seed.
    pub seed: u64,
    /// Share of matches settled on the V2 exchanges (0 = all V1, 1 = all V2).
    pub v2_share: f64,
    /// Maker orders per match are drawn from 1..=max_makers (capped by wallets - 1).
    pub max_makers: usize,
    /// Share of matches whose makers take the opposite side of the same token; the rest are
    /// mint/merge matches (makers on the same side of the complementary token), binary
    /// markets only.
    pub complementary_share: f64,
    /// Largest maker order fill, in whole shares (fills are multiples of 0.01 share).
    pub max_order_shares: u64,
    /// Fees are drawn from 0..=max_fee_bps basis points of the fee asset's amount (taker
    /// orders only; maker orders pay no fee, as on Polymarket).
    pub max_fee_bps: u32,
    /// Account that sends the transactions (must be unlocked in anvil). Default: the last of
    /// `eth_accounts`.
    pub sender: Option<Address>,
    /// Send each match as the real settlement call (V1 through its fee module, V2 to the
    /// exchange) to the settlement stand-ins, instead of `emitMatch` to the emitters: the
    /// mempool then carries real-shaped settlements (docs/SETTLEMENT.md).
    #[serde(default)]
    pub settle: bool,
    /// Settle mode: share of matches sent doomed (the taker's limit one unit above what it
    /// receives), so they mine with status 0.
    pub revert_share: f64,
    /// Settle mode: share of matches replaced in the pool by a higher-fee transaction with the
    /// same nonce (a plain transfer), so they never mine.
    pub replace_share: f64,
    /// Settle mode: share of matches dropped from the pool (`anvil_dropTransaction`).
    pub drop_share: f64,
    /// Settle mode: share of multi-maker V2 matches whose taker order names a worse limit than
    /// it gets, so the calldata's estimate differs from the logs.
    pub estimate_gap_share: f64,
    /// Settle mode: how long a doomed-to-vanish transaction stays in the pool before it is
    /// replaced or dropped (for a mempool watcher to see it).
    pub linger_ms: u64,
    /// Settle mode on an automining chain: how long a batch waits in the pool before the
    /// simulator mines it (0: at once), so a mempool watcher sees it as on a chain with a block
    /// time.
    pub hold_ms: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            wallets: demo_wallets(6),
            markets: demo_markets(),
            seed: 1,
            v2_share: 0.5,
            max_makers: 3,
            complementary_share: 0.7,
            max_order_shares: 500,
            max_fee_bps: 20,
            sender: None,
            settle: false,
            revert_share: 0.0,
            replace_share: 0.0,
            drop_share: 0.0,
            estimate_gap_share: 0.0,
            linger_ms: 300,
            hold_ms: 0,
        }
    }
}

impl SimConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.wallets.len() >= 2, "need at least two wallets");
        let mut w = self.wallets.clone();
        w.sort();
        w.dedup();
        ensure!(w.len() == self.wallets.len(), "wallets must be distinct");
        ensure!(!self.markets.is_empty(), "need at least one market");
        for m in &self.markets {
            ensure!(
                m.token_ids.len() >= 2 && m.token_ids.len() == m.outcomes.len(),
                "market {}: need one token per outcome, at least two",
                m.slug
            );
            if m.token_ids.iter().any(TokenId::is_zero) {
                bail!(
                    "market {}: token id 0 is the collateral id in V1 events",
                    m.slug
                );
            }
        }
        ensure!(
            (0.0..=1.0).contains(&self.v2_share),
            "v2_share must be in [0, 1]"
        );
        ensure!(
            (0.0..=1.0).contains(&self.complementary_share),
            "complementary_share must be in [0, 1]"
        );
        ensure!(self.max_makers >= 1, "max_makers must be at least 1");
        ensure!(
            (1..=1_000_000).contains(&self.max_order_shares),
            "max_order_shares must be in 1..=1000000"
        );
        ensure!(
            self.max_fee_bps <= 1_000,
            "max_fee_bps must be at most 1000 (10%)"
        );
        let fates = [self.revert_share, self.replace_share, self.drop_share];
        for share in fates.iter().chain([&self.estimate_gap_share]) {
            ensure!(
                (0.0..=1.0).contains(share),
                "mempool shares must be in [0, 1]"
            );
        }
        ensure!(
            fates.iter().sum::<f64>() <= 1.0,
            "revert_share + replace_share + drop_share must be at most 1"
        );
        ensure!(
            self.settle || self.mempool_shares() == 0.0,
            "revert/replace/drop/estimate-gap shares need settle mode"
        );
        Ok(())
    }

    /// The sum of the mempool behaviours' shares (0: every match settles plainly).
    pub fn mempool_shares(&self) -> f64 {
        self.revert_share + self.replace_share + self.drop_share + self.estimate_gap_share
    }

    /// The market holding `token`, with the token's outcome index.
    pub fn market_of(&self, token: &TokenId) -> Option<(&Market, usize)> {
        self.markets
            .iter()
            .find_map(|m| m.outcome_index(token).map(|i| (m, i)))
    }
}

/// How long and how fast [`crate::Sim::spawn`] runs.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Matches sent together, one transaction each; they land in the same block (on an
    /// automining chain the simulator mines the batch as one block).
    pub matches_per_block: u32,
    /// Pause after each batch is mined. On an interval-mining chain the wait for receipts
    /// already paces batches at the block time.
    pub interval: Duration,
    /// Stop after this many matches.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            matches_per_block: 2,
            interval: Duration::ZERO,
            count: None,
            duration: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_deterministic() {
        let c = SimConfig::default();
        c.validate().unwrap();
        assert_eq!(demo_wallets(3), demo_wallets(3));
        assert_eq!(demo_markets(), demo_markets());
        let (m, i) = c.market_of(&c.markets[2].token_ids[1]).unwrap();
        assert_eq!((m.slug.as_str(), i), ("pmw-demo-cup-team-alpha", 1));
        assert!(m.neg_risk);
    }

    #[test]
    fn rejects_bad_worlds() {
        let mut c = SimConfig::default();
        c.wallets.truncate(1);
        assert!(c.validate().is_err());
        let mut c = SimConfig::default();
        c.markets[0].outcomes.pop();
        assert!(c.validate().is_err());
    }
}

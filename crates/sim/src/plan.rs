//! Match planning: draws realistic matches from the seeded RNG (prices on a 0.01 tick that
//! random-walk per market, 6-decimal amounts with collateral = price × shares exactly, small
//! taker fees) and ABI-encodes them as `emitMatch` calldata for the V1 or V2 emitter.

use std::collections::HashMap;

use pmw_core::Address;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::abi::{self, Token};
use crate::config::SimConfig;
use crate::contracts::Exchange;
use crate::types::{FeeAsset, Role, Side, TokenId, Version, B256};

/// One 0.01 share, in 6-decimal units: fills are whole multiples, so price × shares is exact.
pub const SHARE_TICK: u64 = 10_000;
/// One whole share (or one unit of collateral), in 6-decimal units.
pub const ONE: u64 = 1_000_000;

/// One order's fill in a planned match, in the owner's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedFill {
    pub order_hash: B256,
    /// The order's owner (the event's `maker`).
    pub owner: Address,
    pub role: Role,
    pub side: Side,
    pub token_id: TokenId,
    /// Outcome tokens, 6 decimals.
    pub shares: u64,
    /// Collateral, 6 decimals; `collateral * 100 == shares * price_cents`.
    pub collateral: u64,
    pub price_cents: u32,
    pub fee: u64,
    pub fee_asset: FeeAsset,
    /// The order's fee rate: `fee` is this rate of what the order receives (V1's exchange
    /// computes it so; the settlement call carries the rate).
    pub fee_rate_bps: u32,
    pub builder: B256,
    pub metadata: B256,
}

impl PlannedFill {
    /// `(makerAmountFilled, takerAmountFilled)`: a BUY gives collateral and takes shares, a
    /// SELL the reverse (both versions).
    pub fn amounts(&self) -> (u64, u64) {
        match self.side {
            Side::Buy => (self.collateral, self.shares),
            Side::Sell => (self.shares, self.collateral),
        }
    }
}

/// A match: the aggressor's taker order against one or more resting maker orders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedMatch {
    /// Sequence number within the simulator (stable across a replay in a reorg).
    pub id: u64,
    pub exchange: Exchange,
    pub taker: PlannedFill,
    pub makers: Vec<PlannedFill>,
    /// What the settlement is meant to become (settle mode; always `Mine` otherwise).
    pub fate: Fate,
    /// How much less than it receives the taker order's limit names (settle mode, V2
    /// multi-maker matches): the calldata's estimate is off by this much.
    pub limit_gap: u64,
}

/// What a planned settlement is meant to become.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fate {
    Mine,
    Revert,
    Replace,
    Drop,
}

impl PlannedMatch {
    /// The fills in the order the exchange emits them: makers, then the taker order.
    pub fn fills_in_log_order(&self) -> impl Iterator<Item = &PlannedFill> {
        self.makers.iter().chain(std::iter::once(&self.taker))
    }

    /// `emitMatch` calldata for this match's exchange version.
    pub fn calldata(&self) -> Vec<u8> {
        let v = self.exchange.version;
        let tuple = |f: &PlannedFill| fill_tuple(v, f);
        abi::calldata(
            v.emit_match_selector(),
            &[
                tuple(&self.taker),
                Token::Array(self.makers.iter().map(tuple).collect()),
            ],
        )
    }
}

fn fill_tuple(version: Version, f: &PlannedFill) -> Token {
    let (making, taking) = f.amounts();
    let u = |v: u64| Token::uint(v as u128);
    match version {
        Version::V1 => {
            // makerAssetId == 0 means the order BUYs takerAssetId with collateral.
            let (maker_asset, taker_asset) = match f.side {
                Side::Buy => (Token::uint(0), Token::token_id(f.token_id)),
                Side::Sell => (Token::token_id(f.token_id), Token::uint(0)),
            };
            Token::Tuple(vec![
                Token::bytes32(&f.order_hash),
                Token::address(&f.owner),
                maker_asset,
                taker_asset,
                u(making),
                u(taking),
                u(f.fee),
            ])
        }
        Version::V2 => Token::Tuple(vec![
            Token::bytes32(&f.order_hash),
            Token::address(&f.owner),
            Token::uint(f.side.as_u8() as u128),
            Token::token_id(f.token_id),
            u(making),
            u(taking),
            u(f.fee),
            Token::bytes32(&f.builder),
            Token::bytes32(&f.metadata),
        ]),
    }
}

/// Draws matches from a seeded RNG. Deterministic: same config, same sequence.
#[derive(Debug)]
pub struct Planner {
    rng: StdRng,
    /// Last traded price (cents) of outcome 0 of each market, by market index.
    prices: HashMap<usize, u32>,
    next_id: u64,
}

impl Planner {
    pub fn new(seed: u64) -> Planner {
        Planner {
            rng: StdRng::seed_from_u64(seed),
            prices: HashMap::new(),
            next_id: 0,
        }
    }

    /// Plans the next match.
    pub fn plan(&mut self, cfg: &SimConfig) -> PlannedMatch {
        let id = self.next_id;
        self.next_id += 1;
        let terms = self.terms(cfg);
        let (aggressor, makers) = draw_makers(&mut self.rng, cfg, &terms);
        let taker = draw_taker(&mut self.rng, cfg, &terms, aggressor, &makers);
        let (fate, limit_gap) = self.mempool(cfg, &terms, &taker, makers.len());
        PlannedMatch {
            id,
            exchange: terms.exchange,
            taker,
            makers,
            fate,
            limit_gap,
        }
    }

    /// The match's mempool behaviour; draws nothing when none is configured, so plans without
    /// them are the same as before they existed.
    fn mempool(
        &mut self,
        cfg: &SimConfig,
        t: &Terms,
        taker: &PlannedFill,
        makers: usize,
    ) -> (Fate, u64) {
        if cfg.mempool_shares() == 0.0 {
            return (Fate::Mine, 0);
        }
        let roll: f64 = self.rng.gen();
        let fate = if roll < cfg.revert_share {
            Fate::Revert
        } else if roll < cfg.revert_share + cfg.replace_share {
            Fate::Replace
        } else if roll < cfg.revert_share + cfg.replace_share + cfg.drop_share {
            Fate::Drop
        } else {
            Fate::Mine
        };
        let gap = fate == Fate::Mine
            && t.version == Version::V2
            && makers > 1
            && self.rng.gen_bool(cfg.estimate_gap_share);
        // Up to 3% of what the taker receives, at least one base unit.
        let (_, taking) = taker.amounts();
        let limit_gap = if gap {
            (taking / 100 * self.rng.gen_range(1..=3)).max(1)
        } else {
            0
        };
        (fate, limit_gap)
    }

    /// The market, exchange, token, price and sides of the next match.
    fn terms(&mut self, cfg: &SimConfig) -> Terms {
        let rng = &mut self.rng;
        let market_idx = rng.gen_range(0..cfg.markets.len());
        let market = &cfg.markets[market_idx];
        let version = if rng.gen_bool(cfg.v2_share) {
            Version::V2
        } else {
            Version::V1
        };
        // Price of outcome 0 random-walks by up to 3 ticks, within 0.02..=0.98.
        let start = rng.gen_range(20..=80);
        let p0 = self.prices.entry(market_idx).or_insert(start);
        *p0 = (*p0 as i64 + rng.gen_range(-3..=3)).clamp(2, 98) as u32;
        let p0 = *p0;

        let outcome = rng.gen_range(0..market.token_ids.len());
        let token = market.token_ids[outcome];
        let binary = market.token_ids.len() == 2;
        let price = if binary && outcome == 1 { 100 - p0 } else { p0 };
        let taker_side = if rng.gen_bool(0.5) {
            Side::Buy
        } else {
            Side::Sell
        };
        // Complementary: makers take the other side of the same token at the same price.
        // Otherwise mint (all BUY) or merge (all SELL): makers on the taker's side of the
        // complementary token, at the complementary price.
        let complementary = !binary || rng.gen_bool(cfg.complementary_share);
        let (maker_side, maker_token, maker_price) = if complementary {
            (taker_side.opposite(), token, price)
        } else {
            (taker_side, market.token_ids[1 - outcome], 100 - price)
        };
        Terms {
            version,
            exchange: Exchange::of(version, market.neg_risk),
            token,
            price,
            taker_side,
            maker_side,
            maker_token,
            maker_price,
        }
    }
}

/// What a match trades, on each side.
struct Terms {
    version: Version,
    exchange: Exchange,
    token: TokenId,
    price: u32,
    taker_side: Side,
    maker_side: Side,
    maker_token: TokenId,
    maker_price: u32,
}

/// The aggressor, and the makers it matches (other wallets, 1..=`max_makers` of them).
fn draw_makers(rng: &mut StdRng, cfg: &SimConfig, t: &Terms) -> (Address, Vec<PlannedFill>) {
    let mut others: Vec<Address> = cfg.wallets.clone();
    let aggressor = others.remove(rng.gen_range(0..others.len()));
    others.shuffle(rng);
    let n_makers = rng.gen_range(1..=cfg.max_makers.min(others.len()));

    let max_ticks = cfg.max_order_shares * (ONE / SHARE_TICK);
    let mut makers = Vec::with_capacity(n_makers);
    for owner in others.into_iter().take(n_makers) {
        // Mostly small orders, sometimes large ones.
        let ticks = if rng.gen_bool(0.8) {
            rng.gen_range(1..=max_ticks.min(5_000))
        } else {
            rng.gen_range(1..=max_ticks)
        };
        let shares = ticks * SHARE_TICK;
        makers.push(PlannedFill {
            order_hash: B256(rng.gen()),
            owner,
            role: Role::Maker,
            side: t.maker_side,
            token_id: t.maker_token,
            shares,
            collateral: collateral(shares, t.maker_price),
            price_cents: t.maker_price,
            fee: 0,
            fee_asset: fee_asset(t.version, t.maker_side),
            fee_rate_bps: 0,
            builder: B256::ZERO,
            metadata: B256::ZERO,
        });
    }
    (aggressor, makers)
}

/// The aggressor's taker fill: every maker's shares, and a small fee.
fn draw_taker(
    rng: &mut StdRng,
    cfg: &SimConfig,
    t: &Terms,
    aggressor: Address,
    makers: &[PlannedFill],
) -> PlannedFill {
    let shares: u64 = makers.iter().map(|m| m.shares).sum();
    let taker_collateral = collateral(shares, t.price);
    let fee_asset = fee_asset(t.version, t.taker_side);
    let fee_bps = rng.gen_range(0..=cfg.max_fee_bps);
    let fee_base = match fee_asset {
        FeeAsset::Collateral => taker_collateral,
        FeeAsset::Shares => shares,
    };
    let (builder, metadata) = if t.version == Version::V2 && rng.gen_bool(0.3) {
        (B256(rng.gen()), B256(rng.gen()))
    } else {
        (B256::ZERO, B256::ZERO)
    };
    PlannedFill {
        order_hash: B256(rng.gen()),
        owner: aggressor,
        role: Role::Taker,
        side: t.taker_side,
        token_id: t.token,
        shares,
        collateral: taker_collateral,
        price_cents: t.price,
        fee: fee_base * fee_bps as u64 / 10_000,
        fee_asset,
        fee_rate_bps: fee_bps,
        builder,
        metadata,
    }
}

/// Collateral for `shares` at `price_cents`: exact, since shares are whole 0.01 multiples.
pub fn collateral(shares: u64, price_cents: u32) -> u64 {
    debug_assert_eq!(shares % SHARE_TICK, 0);
    shares / 100 * price_cents as u64
}

/// What an order's fee is paid in: V1 BUY in outcome tokens, otherwise collateral.
pub fn fee_asset(version: Version, side: Side) -> FeeAsset {
    match (version, side) {
        (Version::V1, Side::Buy) => FeeAsset::Shares,
        _ => FeeAsset::Collateral,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_matches() {
        let cfg = SimConfig::default();
        let mut a = Planner::new(7);
        let mut b = Planner::new(7);
        for _ in 0..50 {
            assert_eq!(a.plan(&cfg), b.plan(&cfg));
        }
        let mut c = Planner::new(8);
        assert_ne!(Planner::new(7).plan(&cfg), c.plan(&cfg));
    }

    #[test]
    fn matches_are_consistent() {
        let cfg = SimConfig {
            max_makers: 4,
            ..SimConfig::default()
        };
        let mut p = Planner::new(3);
        let (mut v1, mut v2, mut multi, mut mint_merge) = (0, 0, 0, 0);
        for i in 0..500 {
            let m = p.plan(&cfg);
            assert_eq!(m.id, i);
            match m.exchange.version {
                Version::V1 => v1 += 1,
                Version::V2 => v2 += 1,
            }
            assert!(!m.makers.is_empty() && m.makers.len() <= 4);
            multi += usize::from(m.makers.len() > 1);
            assert_eq!(
                m.taker.shares,
                m.makers.iter().map(|f| f.shares).sum::<u64>()
            );
            let (market, _) = cfg.market_of(&m.taker.token_id).unwrap();
            assert_eq!(market.neg_risk, m.exchange.neg_risk);
            for f in m.fills_in_log_order() {
                assert!((1..=99).contains(&f.price_cents));
                assert_eq!(
                    f.collateral * 100,
                    f.shares * f.price_cents as u64,
                    "exact price"
                );
                assert_eq!(f.shares % SHARE_TICK, 0);
                assert!(f.shares <= cfg.max_order_shares * ONE * 4);
            }
            for mk in &m.makers {
                assert_ne!(mk.owner, m.taker.owner, "aggressor never fills itself");
                assert_eq!(mk.fee, 0);
                if mk.token_id == m.taker.token_id {
                    assert_eq!(mk.side, m.taker.side.opposite());
                    assert_eq!(mk.price_cents, m.taker.price_cents);
                } else {
                    mint_merge += 1;
                    assert_eq!(mk.side, m.taker.side);
                    assert_eq!(mk.price_cents, 100 - m.taker.price_cents);
                }
            }
            let base = match m.taker.fee_asset {
                FeeAsset::Collateral => m.taker.collateral,
                FeeAsset::Shares => m.taker.shares,
            };
            assert!(m.taker.fee * 10_000 <= base * cfg.max_fee_bps as u64);
        }
        assert!(v1 > 150 && v2 > 150, "v1 {v1} v2 {v2}");
        assert!(multi > 100 && mint_merge > 50);
    }

    #[test]
    fn calldata_layout() {
        let cfg = SimConfig::default();
        let mut p = Planner::new(1);
        for _ in 0..20 {
            let m = p.plan(&cfg);
            let data = m.calldata();
            let per = m.exchange.version.order_filled_data_words() + 2;
            // selector, taker tuple, offset, length, maker tuples
            assert_eq!(data.len(), 4 + 32 * (per + 2 + per * m.makers.len()));
            assert_eq!(data[..4], m.exchange.version.emit_match_selector());
        }
    }
}

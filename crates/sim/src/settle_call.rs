//! A planned match as the real settlement call (docs/SETTLEMENT.md): V1 through the exchange's
//! fee module (`matchOrders`, seven arguments), V2 to the exchange (`matchOrders` with the
//! condition id). Each fill becomes an order whose amounts are exactly the fill's, so the
//! stand-ins emit the planned fills; the orders' hashes, which the stand-ins compute on chain,
//! are taken from pmw's decoder of that very calldata (a mismatch then fails the receipt check).

use anyhow::{anyhow, Context};
use ethabi::Token;
use pmw_core::trade::settle::{self, Call, Domain};
use pmw_core::Address;
use primitive_types::U256;

use crate::config::SimConfig;
use crate::plan::{Fate, PlannedFill, PlannedMatch};
use crate::settlement::FEE_MODULES;
use crate::types::{Version, B256};

/// Where a settlement goes and what it says.
pub struct SettlementCall {
    pub to: Address,
    pub input: Vec<u8>,
}

/// Builds `m`'s settlement call and sets its fills' order hashes to the ones the exchange will
/// compute (`chain_id`: the chain the exchange hashes orders for).
pub fn settlement_call(
    m: &mut PlannedMatch,
    cfg: &SimConfig,
    chain_id: u64,
) -> anyhow::Result<SettlementCall> {
    let version = m.exchange.version;
    let makers: Vec<Token> = m
        .makers
        .iter()
        .map(|f| order(version, f, f.amounts().1))
        .collect();
    let (taker_making, taker_taking) = m.taker.amounts();
    // The taker's limit: what it receives, one unit more for a doomed settlement (the exchange
    // refuses it), or less by the planned gap (the calldata then underestimates the fill).
    let limit = match m.fate {
        Fate::Revert => taker_taking + 1,
        _ => taker_taking - m.limit_gap.min(taker_taking.saturating_sub(1)),
    };
    let taker = order(version, &m.taker, limit);
    let maker_making = Token::Array(m.makers.iter().map(|f| uint(f.amounts().0)).collect());
    let maker_fees = Token::Array(m.makers.iter().map(|f| uint(f.fee)).collect());
    let (call, to, args) = match m.exchange.version {
        Version::V1 => {
            let module = FEE_MODULES
                .iter()
                .find(|f| f.exchange == m.exchange.address)
                .ok_or_else(|| anyhow!("no fee module for {}", m.exchange.address))?;
            let args = vec![
                taker,
                Token::Array(makers),
                uint(taker_making),
                uint(taker_taking),
                maker_making,
                uint(m.taker.fee),
                maker_fees,
            ];
            (Call::V1FeeModuleMatchOrders, module.address, args)
        }
        Version::V2 => {
            let (market, _) = cfg
                .market_of(&m.taker.token_id)
                .context("the match's token is in no configured market")?;
            let args = vec![
                Token::FixedBytes(market.condition_id.0.to_vec()),
                taker,
                Token::Array(makers),
                uint(taker_making),
                maker_making,
                uint(m.taker.fee),
                maker_fees,
            ];
            (Call::V2MatchOrders, m.exchange.address, args)
        }
    };
    let mut input = call.selector().to_vec();
    input.extend(ethabi::encode(&args));
    let domain = Domain {
        chain_id,
        exchange: m.exchange.address,
    };
    let decoded = settle::decode(&input, &domain).context("decode the settlement just built")?;
    let fills: Vec<&mut PlannedFill> = m.makers.iter_mut().chain([&mut m.taker]).collect();
    anyhow::ensure!(
        decoded.fills.len() == fills.len(),
        "one decoded fill per planned fill"
    );
    for (fill, planned) in fills.into_iter().zip(&decoded.fills) {
        fill.order_hash = B256(planned.order.hash);
    }
    Ok(SettlementCall { to, input })
}

/// The order of one planned fill: its maker amount is the fill's (filled whole), its taker
/// amount `taking` (the limit), its salt the plan's random order hash, so every order is
/// distinct.
fn order(version: Version, f: &PlannedFill, taking: u64) -> Token {
    let (making, _) = f.amounts();
    let owner = Token::Address(ethabi::Address::from_slice(f.owner.as_bytes()));
    let salt = Token::Uint(U256::from_big_endian(&f.order_hash.0));
    let token = Token::Uint(f.token_id.0);
    let side = uint(u64::from(f.side.as_u8()));
    let signature = Token::Bytes(
        f.order_hash
            .0
            .iter()
            .chain(&f.order_hash.0)
            .chain(&[27])
            .copied()
            .collect(),
    );
    match version {
        Version::V1 => Token::Tuple(vec![
            salt,
            owner.clone(),
            owner,
            Token::Address(ethabi::Address::zero()),
            token,
            uint(making),
            uint(taking),
            uint(0),
            uint(0),
            uint(u64::from(f.fee_rate_bps)),
            side,
            uint(0),
            signature,
        ]),
        Version::V2 => Token::Tuple(vec![
            salt,
            owner.clone(),
            owner,
            token,
            uint(making),
            uint(taking),
            side,
            uint(0),
            uint(0),
            Token::FixedBytes(f.metadata.0.to_vec()),
            Token::FixedBytes(f.builder.0.to_vec()),
            signature,
        ]),
    }
}

fn uint(v: u64) -> Token {
    Token::Uint(U256::from(v))
}

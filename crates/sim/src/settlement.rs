//! The settlement stand-ins (`contracts/SettlementV1.sol`, `contracts/SettlementV2.sol`): the
//! V1/V2 exchanges and the V1 fee modules, taking the real settlement calls (same selectors and
//! argument types as Polymarket's contracts, docs/SETTLEMENT.md) and emitting the exchange
//! events for them, with order hashes computed on chain. [`install`] puts them at the exchange
//! and fee module addresses of a local chain.

use std::sync::OnceLock;

use pmw_core::Address;

use crate::contracts::{addr, Artifact, EXCHANGES, V1_CTF_EXCHANGE, V1_NEG_RISK_EXCHANGE};
use crate::rpc::Rpc;
use crate::types::{Version, B256};

/// V1 fee module of the CTF exchange (Polymarket/exchange-fee-module README).
pub const V1_FEE_MODULE: Address = addr("0x56C79347e95530c01A2FC76E732f9566dA16E113");
/// V1 fee module of the NegRisk exchange (reported by explorers and third-party decoders).
pub const V1_NEG_RISK_FEE_MODULE: Address = addr("0xB768891e3130F6dF18214Ac804d4DB76c2C37730");

/// A fee module and the exchange it proxies settlements to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeeModule {
    pub address: Address,
    pub exchange: Address,
}

pub const FEE_MODULES: [FeeModule; 2] = [
    FeeModule {
        address: V1_FEE_MODULE,
        exchange: V1_CTF_EXCHANGE,
    },
    FeeModule {
        address: V1_NEG_RISK_FEE_MODULE,
        exchange: V1_NEG_RISK_EXCHANGE,
    },
];

/// The fee modules as pmw-live's `PMW_LIVE_MEMPOOL_FEE_MODULES` takes them
/// (`0x<module>=0x<exchange>`, space-separated).
pub fn fee_modules_setting() -> String {
    FEE_MODULES
        .iter()
        .map(|f| format!("{}={}", f.address.to_lower_hex(), f.exchange.to_lower_hex()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One compiled stand-in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contract {
    SettlementV1,
    FeeModuleV1,
    SettlementV2,
}

impl Contract {
    pub fn artifact(self) -> &'static Artifact {
        static ALL: OnceLock<[Artifact; 3]> = OnceLock::new();
        let all = ALL.get_or_init(|| {
            [
                Artifact::parse(include_str!("../contracts/out/SettlementV1.json")),
                Artifact::parse(include_str!("../contracts/out/FeeModuleV1.json")),
                Artifact::parse(include_str!("../contracts/out/SettlementV2.json")),
            ]
        });
        &all[self as usize]
    }

    /// The stand-in of an exchange version.
    pub fn exchange(version: Version) -> Contract {
        match version {
            Version::V1 => Contract::SettlementV1,
            Version::V2 => Contract::SettlementV2,
        }
    }
}

/// Installs the settlement stand-ins at the four exchange addresses (replacing the emitters)
/// and at the two V1 fee modules, each fee module pointed at its exchange (storage slot 0).
pub async fn install(rpc: &Rpc) -> anyhow::Result<()> {
    for exchange in EXCHANGES {
        let code = &Contract::exchange(exchange.version).artifact().runtime_code;
        rpc.set_code(&exchange.address, code).await?;
    }
    for module in FEE_MODULES {
        rpc.set_code(
            &module.address,
            &Contract::FeeModuleV1.artifact().runtime_code,
        )
        .await?;
        let mut word = [0u8; 32];
        word[12..].copy_from_slice(module.exchange.as_bytes());
        rpc.set_storage(&module.address, 0, B256(word)).await?;
    }
    Ok(())
}

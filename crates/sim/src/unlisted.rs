//! An unlisted emitter: the emitter contract installed at an address that is not one of the
//! four exchanges, sending a planned match there. Its logs are byte for byte a real exchange's
//! (`OrderFilled`, `OrdersMatched`), which is the point: anyone can emit a look-alike event, and
//! pmw must record the emitter, never deliver its fills, until an operator lists it. Its fills
//! are not in [`Sim::emitted`] (they are no trades).

use anyhow::{ensure, Context};
use pmw_core::Address;
use serde::Serialize;

use crate::contracts::Exchange;
use crate::rpc::Receipt;
use crate::sim::Sim;
use crate::types::{Side, TokenId, Version, B256};

/// The address `pmw-sim unlisted` installs at by default (no exchange is there).
pub const DEFAULT_ADDRESS: Address = Address([
    0x7e, 0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0e, 0x11,
]);

/// One look-alike `OrderFilled` an unlisted emitter put on chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnlistedFill {
    pub log_index: u64,
    pub maker: Address,
    pub side: Side,
    pub token_id: TokenId,
    pub shares: u64,
    pub collateral: u64,
}

/// What one look-alike match emitted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnlistedMatch {
    pub address: Address,
    pub version: Version,
    pub tx_hash: B256,
    pub block_number: u64,
    pub block_hash: B256,
    /// Every log of the transaction (the fills and `OrdersMatched`).
    pub events: usize,
    pub fills: Vec<UnlistedFill>,
}

impl Sim {
    /// Install the `version` emitter at `at` (`anvil_setCode`, idempotent) and send one planned
    /// match to it; what it emitted, read back from the receipt. `at` must not be one of the
    /// four exchanges.
    pub async fn emit_unlisted(
        &self,
        at: Address,
        version: Version,
    ) -> anyhow::Result<UnlistedMatch> {
        ensure!(
            Exchange::at(&at).is_none(),
            "{at} is an exchange address, not an unlisted one"
        );
        let rpc = self.rpc();
        let code = &version.artifact().runtime_code;
        if rpc.code(&at).await? != *code {
            rpc.set_code(&at, code)
                .await
                .with_context(|| format!("anvil_setCode at {at}"))?;
        }
        let mut state = self.inner.chain.lock().await;
        let mut m = state.planner.plan(&self.inner.config);
        m.exchange = Exchange {
            version,
            neg_risk: false,
            address: at,
        };
        let req = self.tx_request(at, m.calldata(), m.makers.len() + 1);
        let hash = rpc.send_transaction(&req).await?;
        let receipt = rpc
            .wait_receipt(&hash, std::time::Duration::from_secs(60))
            .await?;
        drop(state);
        let planned: Vec<_> = m.fills_in_log_order().cloned().collect();
        read_back(at, version, &receipt, &planned)
    }
}

fn read_back(
    at: Address,
    version: Version,
    receipt: &Receipt,
    planned: &[crate::plan::PlannedFill],
) -> anyhow::Result<UnlistedMatch> {
    let tx = receipt.transaction_hash;
    ensure!(receipt.status.map(|s| s.0) == Some(1), "tx {tx} reverted");
    let filled = version.order_filled_topic();
    let fills: Vec<_> = receipt
        .logs
        .iter()
        .filter(|l| l.address == at && l.topics.first() == Some(&filled))
        .collect();
    ensure!(
        fills.len() == planned.len(),
        "tx {tx}: {} OrderFilled logs, planned {}",
        fills.len(),
        planned.len()
    );
    Ok(UnlistedMatch {
        address: at,
        version,
        tx_hash: tx,
        block_number: receipt.block_number.0,
        block_hash: receipt.block_hash,
        events: receipt.logs.iter().filter(|l| l.address == at).count(),
        fills: fills
            .iter()
            .zip(planned)
            .map(|(l, p)| UnlistedFill {
                log_index: l.log_index.0,
                maker: p.owner,
                side: p.side,
                token_id: p.token_id,
                shares: p.shares,
                collateral: p.collateral,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_address_is_no_exchange() {
        assert!(Exchange::at(&DEFAULT_ADDRESS).is_none());
        assert_eq!(
            DEFAULT_ADDRESS.to_lower_hex(),
            "0x7e57000000000000000000000000000000000e11"
        );
    }
}

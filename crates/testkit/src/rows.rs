//! Stored trade rows for tests: identity set, everything else plain (a V1 buy of one share at 0.5
//! by `0x11…11` from `0x22…22`, detected at 1 s, version 1).

use pmw_core::ch::TradeRow;

/// A visible trade at `(block, log_index)` of the block whose hash is `block_hash`.
pub fn trade(block: u64, log_index: u32, block_hash: &str) -> TradeRow {
    TradeRow {
        block_number: block,
        log_index,
        block_hash: block_hash.into(),
        tx_hash: format!("0x{block:016x}{log_index:08x}"),
        block_time_ms: 0,
        exchange: "0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e".into(),
        exchange_version: 1,
        order_hash: format!("0x{log_index:08x}{block:016x}"),
        maker: format!("0x{}", "11".repeat(20)),
        taker: format!("0x{}", "22".repeat(20)),
        side: 0,
        token_id: "7".into(),
        shares: "1".into(),
        collateral: "0.5".into(),
        price: "0.5".into(),
        fee: "0".into(),
        fee_asset: "collateral".into(),
        t_detect_ms: 1_000,
        backfilled: 0,
        retracted: 0,
        version: 1,
        audit: 0,
    }
}

/// Plant `rows` in the Postgres hot ledger as they are (the production append, partitions made
/// first): what a test's ledger holds, without pmw-live.
pub async fn plant(c: &tokio_postgres::Client, rows: &[TradeRow]) {
    use pmw_core::pg::ledger;
    for r in rows {
        ledger::ensure_partition(c, ledger::partition_of(r.block_number))
            .await
            .expect("ledger partition");
    }
    ledger::append(c, rows, pmw_core::UnixMs::now())
        .await
        .expect("planted in the ledger");
}

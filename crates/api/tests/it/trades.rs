//! `GET /v1/trades`: keyset pages return every trade exactly once, in ledger order, while new
//! trades keep arriving; nothing past the ingest watermark; retractions hidden; the shape of the
//! pushed `trade` message; bad cursors, limits, wallets and parameters refused.

use std::time::Duration;

use crate::common::{set_watermark, trade_row, wallet, Api};
use pmw_core::Cursor;
use pmw_testkit::rows::plant;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyset_pages_see_every_trade_once_while_trades_arrive() {
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    let (a, b, other) = (wallet(1), wallet(2), wallet(3));
    for w in [&a, &b] {
        api.post("/v1/subscriptions", &key, json!({"wallet": w}))
            .await
            .expect(201, None);
    }
    // A writer that behaves like live: a block's rows, then the watermark, in block order.
    let db_cfg = api.db.cfg.clone();
    let writes = api.db.connect().await;
    let (aa, bb, oo) = (a.clone(), b.clone(), other.clone());
    let writer = tokio::spawn(async move {
        let pool = pmw_core::pg::pool(&db_cfg, "test-writer").unwrap();
        let mut expected = Vec::new();
        for block in 1..=60u64 {
            let mut rows = Vec::new();
            for log in 0..(block % 4) as u32 {
                let w = [&aa, &bb, &oo][(block as usize + log as usize) % 3];
                rows.push(trade_row(block, log, w));
                if w != &oo {
                    expected.push(Cursor {
                        block,
                        log_index: log,
                    });
                }
            }
            plant(&writes, &rows).await;
            pool.get()
                .await
                .unwrap()
                .execute(
                    "INSERT INTO ingest_cursor (id, block_number, block_hash, updated_ms) VALUES (1, $1, '0x', 0) \
                     ON CONFLICT (id) DO UPDATE SET block_number = EXCLUDED.block_number",
                    &[&(block as i64)],
                )
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
        expected
    });

    let mut seen: Vec<Cursor> = Vec::new();
    let mut after = "000000000000-000000".to_string();
    let mut idle_after_writer = 0;
    loop {
        let r = api
            .get(&format!("/v1/trades?after={after}&limit=7"), &key)
            .await;
        r.expect(200, None);
        let trades = r.body["trades"].as_array().unwrap();
        assert!(trades.len() <= 7);
        for t in trades {
            seen.push(t["cursor"].as_str().unwrap().parse().unwrap());
            assert_ne!(
                t["trade"]["wallet"],
                other.as_str(),
                "only followed wallets"
            );
        }
        after = r.body["next"].as_str().unwrap().to_string();
        if trades.is_empty() {
            if writer.is_finished() {
                idle_after_writer += 1;
                if idle_after_writer > 1 {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let expected = writer.await.unwrap();
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "ledger order, no duplicate"
    );
    assert_eq!(seen, expected, "every trade exactly once");

    // One wallet only, any wallet (followed or not).
    let r = api
        .get(&format!("/v1/trades?wallet={other}&limit=1000"), &key)
        .await;
    r.expect(200, None);
    let n = r.body["trades"].as_array().unwrap().len();
    assert!(
        n > 0
            && r.body["trades"]
                .as_array()
                .unwrap()
                .iter()
                .all(|t| t["trade"]["wallet"] == other.as_str())
    );
    assert_eq!(r.body["more"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watermark_retractions_shape_and_bad_input() {
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    let w = wallet(7);
    let mut rows = vec![
        trade_row(5, 0, &w),
        trade_row(5, 1, &w),
        trade_row(6, 0, &w),
        trade_row(8, 0, &w),
    ];
    let planting = api.db.connect().await;
    plant(&planting, &rows).await;
    // Retract (5, 1): a newer version with retracted = 1.
    rows[1].retracted = 1;
    rows[1].version = 2;
    plant(&planting, &rows[1..2]).await;
    let c = api.db.pg.get().await.unwrap();
    c.execute(
        "INSERT INTO market_names (token_id, status, question, outcome, slug, condition_id, next_attempt_ms, first_seen_ms) \
         VALUES ('1234567890', 'resolved', 'Will it rain?', 'Yes', 'rain', '0xc0', 0, 0)",
        &[],
    )
    .await
    .unwrap();

    // No watermark yet: nothing is visible.
    let r = api.get(&format!("/v1/trades?wallet={w}"), &key).await;
    r.expect(200, None);
    assert_eq!(r.body["trades"].as_array().unwrap().len(), 0);
    assert_eq!(r.body["next"], "000000000000-000000");
    set_watermark(&api.db, 7).await;
    let r = api.get(&format!("/v1/trades?wallet={w}"), &key).await;
    let got: Vec<&str> = r.body["trades"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["cursor"].as_str().unwrap())
        .collect();
    assert_eq!(
        got,
        ["000000000005-000000", "000000000006-000000"],
        "retracted hidden, block 8 past the watermark"
    );
    assert_eq!(r.body["next"], "000000000006-000000");

    // The shape of the pushed `trade` message (README), written out from the stored row.
    let (t, row) = (&r.body["trades"][0], &rows[0]);
    let fill = serde_json::json!({
        "wallet": row.maker, "block_number": row.block_number, "log_index": row.log_index,
        "block_hash": row.block_hash, "tx_hash": row.tx_hash, "block_time_ms": row.block_time_ms,
        "exchange": row.exchange, "exchange_version": row.exchange_version,
        "order_hash": row.order_hash, "maker": row.maker, "taker": row.taker,
        "side": if row.side == 0 { "BUY" } else { "SELL" }, "token_id": row.token_id,
        "shares": row.shares, "collateral": row.collateral, "price": row.price, "fee": row.fee,
        "fee_asset": row.fee_asset,
    });
    assert_eq!(t["trade"], fill);
    assert_eq!(t["t_detect_ms"], row.t_detect_ms);
    assert_eq!(t["backfilled"], row.backfilled == 1);
    assert_eq!(
        t["market"],
        serde_json::json!({"question": "Will it rain?", "outcome": "Yes", "slug": "rain", "condition_id": "0xc0"})
    );

    // Checksummed wallet in the query works; bad input is refused.
    api.get(
        "/v1/trades?wallet=0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
        &key,
    )
    .await
    .expect(200, None);
    for (q, status, code) in [
        ("after=banana", 400, "invalid_cursor"),
        ("after=000000000005-0000000", 400, "invalid_cursor"),
        ("after=00000000000a-000000", 400, "invalid_cursor"),
        ("after=", 400, "invalid_cursor"),
        ("limit=0", 422, "invalid_limit"),
        ("limit=1001", 422, "invalid_limit"),
        ("limit=4294967295", 422, "invalid_limit"),
        ("limit=99999999999999999999", 400, "invalid_query"),
        ("limit=ten", 400, "invalid_query"),
        ("offset=10", 400, "invalid_query"),
        ("wallet=0x1234", 422, "invalid_address"),
        ("wallet=0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD", 422, "invalid_address"),
        ("wallet=0x0707070707070707070707070707070707070707&wallet=0x0707070707070707070707070707070707070707", 400, "invalid_query"),
    ] {
        api.get(&format!("/v1/trades?{q}"), &key).await.expect(status, Some(code));
    }
    api.call(reqwest::Method::GET, "/v1/trades", None, None)
        .await
        .expect(401, Some("unauthorized"));
}

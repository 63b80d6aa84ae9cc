//! The pending recorder fed by hand (pmw-live's own watcher off), on a private anvil mining
//! when told: a late sighting of a settlement the ledger holds is not recorded open; a
//! settlement seen under an earlier hash confirms its pending fills when re-sent under a new
//! one; a reorg of a confirmed settlement unconfirms it and its retraction names it; only a
//! provider holding the ledger's block says what became of a pending settlement.

use std::time::Duration;

use pmw_core::trade::settle::{self, Domain};
use pmw_core::types::Address;
use pmw_core::UnixMs;
use pmw_live::chain::pending::{Mined, PendingTx, Probe};
use pmw_live::config::ProviderUrls;
use pmw_live::mempool::Sighting;
use pmw_sim::anvil::Anvil;
use pmw_sim::rpc::Rpc;
use pmw_sim::settlement::FEE_MODULES;
use pmw_sim::types::B256;
use pmw_sim::{Outcome, SimConfig};
use pmw_testkit::eventually;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::pending::{settle_config, Setup, WITHIN};

/// A first sighting built from a transaction the node still has (mined or pending).
async fn sighting_of(s: &Setup, tx: &str) -> Sighting {
    let body = s.rpc("eth_getTransactionByHash", json!([tx])).await;
    let bytes = |k: &str| hex::decode(body[k].as_str().unwrap().trim_start_matches("0x")).unwrap();
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&bytes("hash"));
    let to: Address = body["to"].as_str().unwrap().parse().unwrap();
    let exchange = FEE_MODULES
        .iter()
        .find(|f| f.address == to)
        .map_or(to, |f| f.exchange);
    let chain_id = s.sim.rpc().chain_id().await.unwrap();
    let input = bytes("input");
    let settlement = settle::decode(&input, &Domain { chain_id, exchange }).unwrap();
    let nonce = body["nonce"].as_str().unwrap().trim_start_matches("0x");
    Sighting::First {
        tx: PendingTx {
            hash,
            from: body["from"].as_str().unwrap().parse().unwrap(),
            nonce: u64::from_str_radix(nonce, 16).unwrap(),
            to,
            input,
            provider: 0,
            seen_ms: UnixMs::now(),
        },
        settlement,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sighting_of_a_settlement_already_in_the_ledger_is_not_recorded() {
    let cfg = SimConfig {
        revert_share: 0.4,
        replace_share: 0.0,
        drop_share: 0.0,
        ..settle_config(44)
    };
    let s = Setup::new(&[], cfg).await;
    let live = s.start_live(false).await;
    let (mut mined, mut reverted) = (None, None);
    for _ in 0..20 {
        s.sim.run_block(3).await.unwrap();
        for x in s.sim.settlements() {
            match x.outcome {
                Outcome::Mined => mined = mined.or(Some(x.tx_hash.to_string())),
                Outcome::Reverted => reverted = reverted.or(Some(x.tx_hash.to_string())),
                _ => {}
            }
        }
        if mined.is_some() && reverted.is_some() {
            break;
        }
    }
    let (mined, reverted) = (mined.unwrap(), reverted.unwrap());
    let c = s.db.connect().await;
    let in_ledger = eventually(WITHIN, || async {
        let n: i64 = c
            .query_one("SELECT count(*) FROM ledger WHERE tx_hash = $1", &[&mined])
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            Ok(())
        } else {
            Err(())
        }
    })
    .await;
    assert!(in_ledger.is_ok(), "live committed the mined settlement");

    // The recorder, fed late sightings of both by hand.
    let (tx, stop, task) = s.recorder().await;
    tx.send(sighting_of(&s, &mined).await).await.unwrap();
    tx.send(sighting_of(&s, &reverted).await).await.unwrap();
    // The reverted one (not in the ledger) is recorded, then ends `reverted` at the next
    // watermark; the mined one is never recorded.
    let status = eventually(WITHIN, || async {
        // Each new block moves the watermark: the recorder's resolution runs on each.
        s.sim.rpc().mine().await.unwrap();
        let row = c
            .query_opt(
                "SELECT status FROM pending_txs WHERE tx_hash = $1",
                &[&reverted],
            )
            .await
            .unwrap();
        match row.map(|r| r.get::<_, String>(0)) {
            Some(s) if s != "open" => Ok(s),
            other => Err(other),
        }
    })
    .await;
    assert_eq!(status, Ok("reverted".to_string()));
    let recorded: i64 = c
        .query_one(
            "SELECT count(*) FROM pending_txs WHERE tx_hash = $1",
            &[&mined],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        recorded, 0,
        "a mined settlement's late sighting is not recorded"
    );
    stop.cancel();
    task.await.unwrap();
    live.stop().await.unwrap();
}

/// The settlement transactions waiting in anvil's pool.
async fn pooled(s: &Setup) -> Vec<String> {
    let pool = s.rpc("txpool_content", json!([])).await;
    let mut out = Vec::new();
    for by_nonce in pool["pending"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
    {
        for t in by_nonce.as_object().into_iter().flat_map(|m| m.values()) {
            out.push(t["hash"].as_str().unwrap().to_string());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_resent_under_a_new_hash_confirms_its_pending_fills() {
    let cfg = SimConfig {
        revert_share: 0.0,
        replace_share: 0.0,
        drop_share: 0.0,
        ..settle_config(45)
    };
    let s = Setup::new(&[], cfg).await;
    let live = s.start_live(false).await;
    let (tx, stop, task) = s.recorder().await;
    let c = s.db.connect().await;
    // Blocks are mined by hand: the settlements wait in the pool, where each is "seen" under
    // another hash (an earlier attempt of the same settlement), then one block mines them.
    s.rpc("evm_setAutomine", json!([false])).await;
    let (sent, mined) = tokio::join!(s.sim.run_block(2), pool_and_mine(&s, &c, &tx, earlier));
    sent.unwrap();
    assert_eq!(mined.len(), 2);
    for h in &mined {
        let receipt = s.rpc("eth_getTransactionReceipt", json!([h])).await;
        assert_eq!(receipt["status"], "0x1", "{h} mined");
        let logs = s.fills_of(h).await;
        let paired = eventually(WITHIN, || async {
            let rows = c
                .query(
                    "SELECT l.order_hash, f.id, l.pending_id, f.status, x.status \
                     FROM ledger_visible l \
                     LEFT JOIN pending_fills f ON f.tx_hash = $2 AND f.order_hash = l.order_hash \
                     LEFT JOIN pending_txs x ON x.tx_hash = f.tx_hash \
                     WHERE l.tx_hash = $1",
                    &[h, &earlier(h)],
                )
                .await
                .unwrap();
            if rows.len() < logs.len() {
                return Err(format!(
                    "{} of {} trades in the ledger",
                    rows.len(),
                    logs.len()
                ));
            }
            for r in rows {
                let (order, id, pending, fill, txs): (
                    String,
                    Option<i64>,
                    Option<i64>,
                    Option<String>,
                    Option<String>,
                ) = (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
                let confirmed = Some("confirmed".to_string());
                if id.is_none() || pending != id || fill != confirmed || txs != confirmed {
                    return Err(format!(
                        "{order}: fill {id:?}, pending_id {pending:?}, {fill:?}, tx {txs:?}"
                    ));
                }
            }
            Ok(())
        })
        .await;
        assert!(paired.is_ok(), "{h}: {paired:?}");
    }
    stop.cancel();
    task.await.unwrap();
    live.stop().await.unwrap();
}

/// The earlier attempt's hash of a settlement: its own with the first digit changed.
fn earlier(h: &str) -> String {
    format!("0x{}{}", if &h[2..3] == "e" { "f" } else { "e" }, &h[3..])
}

/// With anvil not mining by itself: waits for two settlements in the pool, feeds the recorder
/// a sighting of each under the hash `rename` gives it, waits until both are recorded, then
/// mines one block. Returns the settlements' own hashes.
async fn pool_and_mine(
    s: &Setup,
    c: &tokio_postgres::Client,
    tx: &mpsc::Sender<Sighting>,
    rename: fn(&str) -> String,
) -> Vec<String> {
    let waited = tokio::time::Instant::now();
    let mut hashes = pooled(s).await;
    while hashes.len() < 2 {
        assert!(waited.elapsed() < WITHIN, "settlements never pooled");
        tokio::time::sleep(Duration::from_millis(50)).await;
        hashes = pooled(s).await;
    }
    for h in &hashes {
        let Sighting::First {
            tx: mut p,
            settlement,
        } = sighting_of(s, h).await
        else {
            unreachable!()
        };
        hex::decode_to_slice(&rename(h)[2..], &mut p.hash).unwrap();
        tx.send(Sighting::First { tx: p, settlement })
            .await
            .unwrap();
    }
    let recorded = eventually(WITHIN, || async {
        let n: i64 = c
            .query_one("SELECT count(*) FROM pending_txs", &[])
            .await
            .unwrap()
            .get(0);
        if n as usize == hashes.len() {
            Ok(())
        } else {
            Err(n)
        }
    })
    .await;
    assert!(recorded.is_ok(), "sightings recorded: {recorded:?}");
    s.rpc("evm_mine", json!([])).await;
    hashes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_of_a_confirmed_settlement_unconfirms_it_and_its_retraction_names_it() {
    let cfg = SimConfig {
        revert_share: 0.0,
        replace_share: 0.0,
        drop_share: 0.0,
        ..settle_config(46)
    };
    let s = Setup::new(&[], cfg).await;
    let live = s.start_live(false).await;
    let (tx, stop, task) = s.recorder().await;
    let c = s.db.connect().await;
    // Blocks live has ingested below the settlement's: the reorg's common ancestor.
    let ingested = eventually(WITHIN, || async {
        s.rpc("evm_mine", json!([])).await;
        let n: i64 = c
            .query_one("SELECT count(*) FROM chain_blocks", &[])
            .await
            .unwrap()
            .get(0);
        if n >= 2 {
            Ok(())
        } else {
            Err(n)
        }
    })
    .await;
    assert!(ingested.is_ok(), "live ingests: {ingested:?}");
    s.rpc("evm_setAutomine", json!([false])).await;
    let own = |h: &str| h.to_string();
    let (sent, mined) = tokio::join!(s.sim.run_block(2), pool_and_mine(&s, &c, &tx, own));
    sent.unwrap();
    let confirmed_count =
        "SELECT count(*) FROM ledger WHERE tx_hash = ANY($1) AND pending_id IS NOT NULL";
    let confirmed = eventually(WITHIN, || async {
        let n: i64 = c
            .query_one(confirmed_count, &[&mined])
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            Ok(n)
        } else {
            Err(n)
        }
    })
    .await
    .expect("the settlements confirmed");
    s.rpc("evm_setAutomine", json!([true])).await;
    let outcome = s.sim.reorg(1).await.unwrap();
    assert!(
        !outcome.orphaned.is_empty(),
        "the reorg orphaned the settlements' fills"
    );
    // Live unwinds: each confirmed trade gets a retraction carrying the same pending_id.
    let retracted = eventually(WITHIN, || async {
        s.rpc("evm_mine", json!([])).await; // a head above the new branch
        let rows = c
            .query(
                "SELECT r.pending_id, t.pending_id FROM ledger r \
                 JOIN ledger t ON t.block_number = r.block_number AND t.log_index = r.log_index \
                  AND t.block_hash = r.block_hash AND t.retracted = 0 \
                 WHERE r.retracted = 1 AND r.tx_hash = ANY($1)",
                &[&mined],
            )
            .await
            .unwrap();
        let pairs: Vec<(Option<i64>, Option<i64>)> =
            rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        if pairs.len() as i64 >= confirmed {
            Ok(pairs)
        } else {
            Err(pairs)
        }
    })
    .await;
    let Ok(retracted) = retracted else {
        panic!(
            "the orphaned trades not retracted: {retracted:?}; live: {:?}",
            live.stop().await
        );
    };
    for (r, t) in retracted {
        assert!(t.is_some() && r == t, "retraction {r:?} of trade {t:?}");
    }
    let rows = c
        .query(
            "SELECT f.status, count(e.id) FILTER (WHERE e.kind = 'void') FROM pending_fills f \
             LEFT JOIN pending_events e ON e.fill_id = f.id GROUP BY f.id, f.status",
            &[],
        )
        .await
        .unwrap();
    assert!(!rows.is_empty());
    // The new branch does not hold them: no fill stays confirmed (each is `unwound` until the
    // resolution ends it; `pending::fills_a_reorg_unconfirms_end_again_the_way_the_new_branch_says`
    // follows that to the end), and none is voided twice.
    for r in rows {
        let (status, voids): (String, i64) = (r.get(0), r.get(1));
        assert!(
            status != "confirmed" && voids <= 1,
            "a fill the reorg took back: {status}, {voids} voids"
        );
    }
    stop.cancel();
    task.await.unwrap();
    live.stop().await.unwrap();
}

/// The transaction count of `sender` at block `at` (hex or tag), as `rpc`'s node says.
async fn count_at(rpc: &Rpc, sender: &str, at: Value) -> u64 {
    let n: String = rpc
        .call("eth_getTransactionCount", json!([sender, at]))
        .await
        .unwrap();
    u64::from_str_radix(n.trim_start_matches("0x"), 16).unwrap()
}

/// The hash of block `n` on `rpc`'s node, as bytes.
async fn hash_at(rpc: &Rpc, n: u64) -> [u8; 32] {
    rpc.block(n).await.unwrap().expect("the block").hash.0
}

/// Found by pmw-check under reorgs: a settlement that mined with status 1 was voided `replaced`,
/// its sender's nonce read on one branch beside its receipt read on another. The resolution's
/// facts now come from one provider holding the ledger's block: here a second node, on a chain of
/// its own where the sender's nonce is past the settlement's, is listed first; it says nothing,
/// and the node the ledger follows says the settlement is pending, then mined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_provider_holding_the_ledgers_block_judges_a_pending_settlement() {
    let cfg = SimConfig {
        revert_share: 0.0,
        replace_share: 0.0,
        drop_share: 0.0,
        ..settle_config(47)
    };
    let s = Setup::new(&[], cfg).await;
    let other = Anvil::spawn_with(&[]).await.unwrap();
    let other_rpc = Rpc::new(&other.http_url()).unwrap();
    let urls = |a: &Anvil| ProviderUrls {
        name: a.http_url(),
        ws_url: a.ws_url(),
        http_url: a.http_url(),
    };
    let both = Probe::new(&[urls(&other), urls(&s.anvil)]).unwrap();
    let off_branch = Probe::new(&[urls(&other)]).unwrap();
    // A block above genesis (which both nodes share), then settlements wait in the pool.
    s.rpc("evm_mine", json!([])).await;
    s.rpc("evm_setAutomine", json!([false])).await;
    let judge = async {
        let waited = tokio::time::Instant::now();
        let mut pool = pooled(&s).await;
        while pool.is_empty() {
            assert!(waited.elapsed() < WITHIN, "no settlement pooled");
            tokio::time::sleep(Duration::from_millis(50)).await;
            pool = pooled(&s).await;
        }
        let body = s.rpc("eth_getTransactionByHash", json!([pool[0]])).await;
        let sender = body["from"].as_str().unwrap().to_string();
        let nonce = u64::from_str_radix(&body["nonce"].as_str().unwrap()[2..], 16).unwrap();
        let mut hash = [0u8; 32];
        hex::decode_to_slice(&pool[0][2..], &mut hash).unwrap();
        let from: Address = sender.parse().unwrap();
        let w = s.sim.rpc().latest_block().await.unwrap().number.0;
        let anchor = hash_at(s.sim.rpc(), w).await;
        // The other chain: the sender's nonce past the settlement's, and a block `w` of its own
        // (its state differs from the first block on).
        let _: Value = other_rpc
            .call(
                "anvil_setNonce",
                json!([sender, format!("0x{:x}", nonce + 3)]),
            )
            .await
            .unwrap();
        let _: Value = other_rpc
            .call("anvil_mine", json!([format!("0x{:x}", w + 1)]))
            .await
            .unwrap();
        assert!(count_at(&other_rpc, &sender, json!(format!("0x{w:x}"))).await > nonce);
        assert_ne!(hash_at(&other_rpc, w).await, anchor, "two chains");
        let seen = both.at_anchor(hash, from, w, anchor).await.unwrap();
        let truth = count_at(s.sim.rpc(), &sender, json!(format!("0x{w:x}"))).await;
        assert_eq!(
            (seen.mined, seen.nonce_at_w),
            (None, truth),
            "pending at {w}"
        );
        assert!(truth <= nonce, "the ledger's chain has not used its nonce");
        let refused = off_branch.at_anchor(hash, from, w, anchor).await;
        assert!(refused.is_err(), "a node off the branch: {refused:?}");
        s.rpc("evm_mine", json!([])).await;
        let receipt = s
            .sim
            .rpc()
            .receipt(&B256(hash))
            .await
            .unwrap()
            .expect("mined");
        let anchor = hash_at(s.sim.rpc(), w + 1).await;
        let seen = both.at_anchor(hash, from, w + 1, anchor).await.unwrap();
        let mined = Mined {
            block: receipt.block_number.0,
            ok: receipt.status.is_some_and(|q| q.0 == 1),
        };
        assert_eq!(seen.mined, Some(mined), "mined at {}", w + 1);
    };
    let (sent, ()) = tokio::join!(s.sim.run_block(1), judge);
    sent.unwrap();
}

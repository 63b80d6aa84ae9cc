//! The pending tier's life in Postgres, on a private anvil mining every 2 s fed by pmw-sim in
//! settle mode: every settlement that went through the pool is recorded and ends exactly one
//! way, the way the chain itself says (receipts, nonces and logs read here over plain JSON-RPC,
//! not from pmw's tables); a mined one's ledger rows carry its pending fills' ids. The recorder
//! fed by hand: `pending_fed.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use pmw_core::trade::exchange::ORDER_FILLED_TOPICS;
use pmw_core::trade::Allowlist;
use pmw_live::chain::pending::Probe;
use pmw_live::config::ProviderUrls;
use pmw_live::mempool::Sighting;
use pmw_live::pending::{targets, Recorder, Settings};
use pmw_live::LiveConfig;
use pmw_sim::anvil::Anvil;
use pmw_sim::settlement::FEE_MODULES;
use pmw_sim::{Outcome, ReorgPlan, ReplayOrder, Settlement, Sim, SimConfig};
use pmw_testkit::{eventually, ServiceHandle, TestDb};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub(crate) const WITHIN: Duration = Duration::from_secs(60);

pub(crate) fn fee_modules() -> String {
    FEE_MODULES
        .iter()
        .map(|f| format!("{}={}", f.address.to_lower_hex(), f.exchange.to_lower_hex()))
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) fn settle_config(seed: u64) -> SimConfig {
    SimConfig {
        seed,
        settle: true,
        revert_share: 0.2,
        replace_share: 0.2,
        drop_share: 0.2,
        linger_ms: 300,
        ..SimConfig::default()
    }
}

pub(crate) struct Setup {
    pub(crate) db: TestDb,
    pub(crate) anvil: Anvil,
    pub(crate) sim: Sim,
}

impl Setup {
    pub(crate) async fn new(anvil_args: &[&str], cfg: SimConfig) -> Setup {
        let db = TestDb::new().await;
        let anvil = Anvil::spawn_with(anvil_args).await.expect("anvil");
        let sim = Sim::connect_with(&anvil.http_url(), cfg).await.unwrap();
        sim.install_emitters().await.unwrap();
        Setup { db, anvil, sim }
    }

    pub(crate) async fn start_live(&self, mempool: bool) -> ServiceHandle {
        let head = self.sim.rpc().latest_block().await.unwrap().number.0;
        let live = LiveConfig {
            live_start_block: Some(head + 1),
            live_lock_segment_ms: 1_000,
            live_poll_interval_ms: 200,
            gamma_url: "http://127.0.0.1:9".into(),
            live_mempool: mempool,
            live_mempool_fee_modules: Some(fee_modules()),
            live_pending_expire_blocks: 20,
            ..LiveConfig::default()
        };
        let mut core = self.db.cfg.clone();
        core.rpc_ws_url = self.anvil.ws_url();
        core.rpc_http_url = self.anvil.http_url();
        ServiceHandle::spawn(move |stop| {
            pmw_live::run_with(core, live, Allowlist::polymarket(), stop)
        })
    }

    /// A pending recorder of its own on this chain and database, fed by hand.
    pub(crate) async fn recorder(
        &self,
    ) -> (
        mpsc::Sender<Sighting>,
        CancellationToken,
        tokio::task::JoinHandle<()>,
    ) {
        let providers = vec![ProviderUrls {
            name: "anvil".into(),
            ws_url: self.anvil.ws_url(),
            http_url: self.anvil.http_url(),
        }];
        let recorder = Recorder {
            pg: self.db.pg.clone(),
            probe: Probe::new(&providers).unwrap(),
            settings: Settings {
                targets: targets(&Allowlist::polymarket(), Some(&fee_modules())).unwrap(),
                providers,
                chain_id: self.sim.rpc().chain_id().await.unwrap(),
                expire_blocks: 20,
                drop_grace_blocks: 3,
            },
        };
        let (tx, rx) = mpsc::channel(8);
        let stop = CancellationToken::new();
        let task = tokio::spawn(recorder.run(rx, stop.clone()));
        (tx, stop, task)
    }

    pub(crate) async fn rpc(&self, method: &str, params: Value) -> Value {
        self.sim.rpc().call(method, params).await.unwrap()
    }

    /// What the chain says became of a settlement transaction, from its receipt and its
    /// sender's mined nonce (`sender`, `nonce`: the transaction's own fields).
    pub(crate) async fn truth(&self, tx: &str, sender: &str, nonce: i64) -> &'static str {
        let receipt = self.rpc("eth_getTransactionReceipt", json!([tx])).await;
        if !receipt.is_null() {
            return match receipt["status"].as_str() {
                Some("0x1") => "confirmed",
                _ => "reverted",
            };
        }
        let mined = self
            .rpc("eth_getTransactionCount", json!([sender, "latest"]))
            .await;
        let mined = u64::from_str_radix(mined.as_str().unwrap().trim_start_matches("0x"), 16);
        if mined.unwrap() as i64 > nonce {
            "replaced"
        } else {
            "dropped"
        }
    }

    /// The OrderFilled logs of a mined transaction, by order hash: (block, log index).
    pub(crate) async fn fills_of(&self, tx: &str) -> BTreeMap<String, (i64, i32)> {
        let receipt = self.rpc("eth_getTransactionReceipt", json!([tx])).await;
        let block = receipt["blockNumber"].clone();
        let topics: Vec<String> = ORDER_FILLED_TOPICS
            .iter()
            .map(|t| format!("0x{}", hex::encode(t)))
            .collect();
        let filter = json!({"fromBlock": block, "toBlock": block, "topics": [topics]});
        let logs = self.sim.rpc().logs(filter).await.unwrap();
        logs.iter()
            .filter(|l| l.transaction_hash.to_string() == tx)
            .map(|l| {
                let key = (l.block_number.0 as i64, l.log_index.0 as i32);
                (l.topics[1].to_string(), key)
            })
            .collect()
    }
}

/// Runs settlement batches until the watcher has recorded one (its subscription is live).
async fn warm_up(s: &Setup, c: &tokio_postgres::Client) -> usize {
    let started = tokio::time::Instant::now();
    loop {
        assert!(started.elapsed() < WITHIN, "no settlement recorded");
        s.sim.run_block(1).await.unwrap();
        let n: i64 = c
            .query_one("SELECT count(*) FROM pending_txs", &[])
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            return s.sim.settlements().len();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pending_settlement_ends_the_way_the_chain_says() {
    let s = Setup::new(&["--block-time", "2"], settle_config(43)).await;
    let live = s.start_live(true).await;
    let c = s.db.connect().await;
    let warmup = warm_up(&s, &c).await;
    for _ in 0..3 {
        s.sim.run_block(5).await.unwrap();
    }
    // A last batch with a dropped settlement: nothing after it reuses its nonce.
    for _ in 0..12 {
        s.sim.run_block(5).await.unwrap();
        let all = s.sim.settlements();
        if all[all.len() - 5..]
            .iter()
            .any(|x| x.outcome == Outcome::Dropped)
        {
            break;
        }
    }
    let settlements = s.sim.settlements()[warmup..].to_vec();
    let hashes: Vec<String> = settlements.iter().map(|x| x.tx_hash.to_string()).collect();
    let ended = eventually(WITHIN, || async {
        let open: i64 = c
            .query_one(
                "SELECT count(*) FROM pending_fills WHERE status = 'open' AND tx_hash = ANY($1)",
                &[&hashes],
            )
            .await
            .unwrap()
            .get(0);
        if open == 0 {
            Ok(())
        } else {
            Err(open)
        }
    })
    .await;
    if let Err(open) = ended {
        panic!("{open} pending fills still open after {WITHIN:?}");
    }
    let mut ends = BTreeSet::new();
    for (x, hash) in settlements.iter().zip(&hashes) {
        let row = c
            .query_opt(
                "SELECT sender, nonce, status FROM pending_txs WHERE tx_hash = $1",
                &[hash],
            )
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("settlement {x:?} went through the pool unrecorded"));
        let (sender, nonce, status): (String, i64, String) = (row.get(0), row.get(1), row.get(2));
        let truth = s.truth(hash, &sender, nonce).await;
        assert_eq!(status, truth, "{x:?}");
        ends.insert(truth);
        exactly_one_end(&c, hash, truth, x.fills).await;
        if truth == "confirmed" {
            paired_in_the_ledger(&s, &c, hash).await;
        }
    }
    let all: BTreeSet<&str> = ["confirmed", "reverted", "replaced", "dropped"].into();
    assert_eq!(ends, all, "every end seen");
    live.stop().await.unwrap();
}

/// A reorg takes confirmed fills' trades back (found by pmw-check: an endpoint whose confirming
/// trade was cancelled by its retract kept the `pending` open for good). The fills end again, as
/// the new branch says, once each: mined again, paired with the new trade (its ledger row
/// carries their `pending_id`); not mined again, voided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fills_a_reorg_unconfirms_end_again_the_way_the_new_branch_says() {
    let cfg = SimConfig {
        seed: 44,
        settle: true,
        hold_ms: 300,
        // Settle mode needs a doomed share; this seed's batches below all confirm.
        revert_share: 0.001,
        ..SimConfig::default()
    };
    let s = Setup::new(&[], cfg).await;
    let live = s.start_live(true).await;
    let c = s.db.connect().await;
    warm_up(&s, &c).await;
    for replay_orphaned in [true, false] {
        let before = s.sim.settlements().len();
        s.sim.run_block(3).await.unwrap();
        let batch = s.sim.settlements()[before..].to_vec();
        let hashes: Vec<String> = batch.iter().map(|x| x.tx_hash.to_string()).collect();
        let confirmed = eventually(WITHIN, || async {
            let n: i64 = c
                .query_one(
                    "SELECT count(*) FROM pending_txs WHERE status <> 'open' \
                     AND tx_hash = ANY($1)",
                    &[&hashes],
                )
                .await
                .unwrap()
                .get(0);
            (!batch.is_empty() && n as usize == batch.len()).then_some(())
        })
        .await;
        assert!(confirmed.is_some(), "the batch ended: {batch:?}");
        let plan = ReorgPlan {
            replay_orphaned,
            replay_order: ReplayOrder::Same,
            ..ReorgPlan::new(1)
        };
        let head = s
            .sim
            .reorg_with(plan)
            .await
            .unwrap()
            .new_head
            .hash
            .to_string();
        // pmw-live has unwound the old branch and committed the new head.
        let followed = eventually(WITHIN, || async {
            let at: String = c
                .query_one("SELECT block_hash FROM ingest_cursor WHERE id = 1", &[])
                .await
                .unwrap()
                .get(0);
            (at == head).then_some(())
        })
        .await;
        assert!(
            followed.is_some(),
            "pmw-live never reached the new head {head}"
        );
        for (x, hash) in batch.iter().zip(&hashes) {
            ends_after_the_reorg(&s, &c, x, hash, replay_orphaned).await;
        }
    }
    live.stop().await.unwrap();
}

/// How a settlement whose trades a reorg took back ends. `replayed`: the new branch fills its
/// orders again (the simulator's replay: a new transaction of the same calldata), so each fill
/// is confirmed by the new trade, whose ledger row names it and whose transaction the chain
/// mined with status 1. Otherwise as the chain says of the settlement (a void).
async fn ends_after_the_reorg(
    s: &Setup,
    c: &tokio_postgres::Client,
    x: &Settlement,
    hash: &str,
    replayed: bool,
) {
    if replayed {
        let paired = eventually(WITHIN, || async {
            let rows = c
                .query(
                    "SELECT l.tx_hash FROM pending_fills f JOIN ledger_visible l \
                     ON l.pending_id = f.id AND l.order_hash = f.order_hash \
                     WHERE f.tx_hash = $1 AND f.status = 'confirmed' AND l.tx_hash <> f.tx_hash",
                    &[&hash],
                )
                .await
                .unwrap();
            let txs: BTreeSet<String> = rows.iter().map(|r| r.get(0)).collect();
            (rows.len() == x.fills).then_some(txs)
        })
        .await;
        let txs = paired.unwrap_or_else(|| panic!("{x:?}: its fills never paired again"));
        for tx in txs {
            let receipt = s.rpc("eth_getTransactionReceipt", json!([tx])).await;
            assert_eq!(receipt["status"], "0x1", "the replay {tx} of {hash}");
        }
        exactly_one_end(c, hash, "confirmed", x.fills).await;
        return;
    }
    let r = c
        .query_one(
            "SELECT sender, nonce FROM pending_txs WHERE tx_hash = $1",
            &[&hash],
        )
        .await
        .unwrap();
    let truth = s.truth(hash, &r.get::<_, String>(0), r.get(1)).await;
    let ended = eventually(WITHIN, || async {
        // Empty blocks move the watermark (a drop is judged over a few).
        s.rpc("evm_mine", json!([])).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let status: String = c
            .query_one(
                "SELECT status FROM pending_txs WHERE tx_hash = $1",
                &[&hash],
            )
            .await
            .unwrap()
            .get(0);
        (status == truth).then_some(())
    })
    .await;
    assert!(ended.is_some(), "{x:?} never ended {truth}");
    exactly_one_end(c, hash, truth, x.fills).await;
}

/// Every fill of `tx` has status `end`, one `pending` event, and one `void` event with its
/// reason unless it confirmed.
async fn exactly_one_end(c: &tokio_postgres::Client, tx: &str, end: &str, fills: usize) {
    let rows = c
        .query(
            "SELECT f.status, \
                    count(*) FILTER (WHERE e.kind = 'pending'), \
                    count(*) FILTER (WHERE e.kind = 'void'), \
                    min(e.reason) \
             FROM pending_fills f LEFT JOIN pending_events e ON e.fill_id = f.id \
             WHERE f.tx_hash = $1 GROUP BY f.id, f.status ORDER BY f.id",
            &[&tx],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), fills, "{tx}: one row per planned fill");
    for r in rows {
        let (status, pending, void, reason): (String, i64, i64, Option<String>) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        assert_eq!(status, end, "{tx}");
        assert_eq!(pending, 1, "{tx}: one pending event per fill");
        if end == "confirmed" {
            assert_eq!(
                (void, reason),
                (0, None),
                "{tx}: a confirmed fill is never voided"
            );
        } else {
            assert_eq!((void, reason.as_deref()), (1, Some(end)), "{tx}");
        }
    }
}

/// Each OrderFilled log of `tx` is a ledger row whose pending_id is the pending fill of the
/// same order hash, which names that row's seq.
pub(crate) async fn paired_in_the_ledger(s: &Setup, c: &tokio_postgres::Client, tx: &str) {
    let logs = s.fills_of(tx).await;
    assert!(!logs.is_empty(), "{tx}: a mined settlement has fills");
    for (order_hash, (block, log_index)) in logs {
        let row = c
            .query_one(
                "SELECT l.pending_id, l.seq, f.id, f.confirmed_ledger \
                 FROM ledger_visible l \
                 JOIN pending_fills f ON f.tx_hash = l.tx_hash AND f.order_hash = $3 \
                 WHERE l.block_number = $1 AND l.log_index = $2",
                &[&block, &log_index, &order_hash],
            )
            .await
            .unwrap();
        let (pending_id, seq, id, confirmed): (Option<i64>, i64, i64, Option<i64>) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        assert_eq!(pending_id, Some(id), "{tx} {order_hash}: ledger.pending_id");
        assert_eq!(confirmed, Some(seq), "{tx} {order_hash}: confirmed_ledger");
    }
}

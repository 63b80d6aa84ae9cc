//! Shared harness for pmw-live tests: a private anvil with the emitters installed, live running
//! in-process against a private database, and comparisons against what the simulator emitted.

use std::collections::BTreeMap;
use std::time::Duration;

use pmw_core::ch::{trades, TradeRow};
use pmw_core::trade::Allowlist;
use pmw_core::{CoreConfig, Cursor};
use pmw_live::LiveConfig;
use pmw_sim::anvil::Anvil;
use pmw_sim::{Emitted, Sim};
use pmw_testkit::{eventually, ServiceHandle, TestDb};

pub struct Harness {
    pub db: TestDb,
    pub anvil: Anvil,
    pub sim: Sim,
}

impl Harness {
    pub async fn new() -> Harness {
        Harness::with_anvil(&[]).await
    }

    /// A harness whose anvil gets `args` (e.g. `--slots-in-an-epoch 2`: `finalized` trails the
    /// head by 4 blocks).
    pub async fn with_anvil(args: &[&str]) -> Harness {
        let db = TestDb::new().await;
        let anvil = Anvil::spawn_with(args).await.expect("anvil");
        let sim = Sim::connect(&anvil.http_url()).await.expect("sim");
        sim.install_emitters().await.expect("emitters");
        Harness { db, anvil, sim }
    }

    /// Live settings that start at the next block and react fast.
    pub async fn live_config(&self) -> LiveConfig {
        let head = self.sim.rpc().latest_block().await.unwrap().number.0;
        LiveConfig {
            live_start_block: Some(head + 1),
            live_lock_segment_ms: 1_000,
            live_poll_interval_ms: 200,
            gamma_url: "http://127.0.0.1:9".into(),
            ..LiveConfig::default()
        }
    }

    /// Core settings pointing at this harness's chain (overridable per test).
    pub fn core(&self) -> CoreConfig {
        let mut cfg = self.db.cfg.clone();
        cfg.rpc_ws_url = self.anvil.ws_url();
        cfg.rpc_http_url = self.anvil.http_url();
        cfg
    }

    pub fn start_live(&self, core: CoreConfig, live: LiveConfig) -> ServiceHandle {
        ServiceHandle::spawn(move |stop| {
            pmw_live::run_with(core, live, Allowlist::polymarket(), stop)
        })
    }

    /// The ingest watermark.
    pub async fn cursor(&self) -> Option<(u64, String)> {
        let c = self.db.connect().await;
        c.query_opt(
            "SELECT block_number, block_hash FROM ingest_cursor WHERE id = 1",
            &[],
        )
        .await
        .unwrap()
        .map(|r| (r.get::<_, i64>(0) as u64, r.get(1)))
    }

    /// Wait until the watermark is at the chain head (number and hash).
    pub async fn wait_caught_up(&self, within: Duration) {
        let polled = eventually(within, || async {
            let head = self.sim.rpc().latest_block().await.unwrap();
            let cursor = self.cursor().await;
            match &cursor {
                Some((n, h)) if *n == head.number.0 && *h == head.hash.to_string() => Ok(()),
                _ => Err((head.number.0, cursor)),
            }
        })
        .await;
        if let Err((head, cursor)) = polled {
            panic!("live did not catch up with head {head} within {within:?} (cursor {cursor:?})");
        }
    }

    /// Every `ingest_latency` row once the one of block `head` is stored. The writer inserts off
    /// the ingest path (after a gather of 50 ms), so right after the watermark reaches `head`
    /// the last rows may not be there yet; it inserts in block order, so the head's row means
    /// every earlier one is in.
    pub async fn latency_rows_through(&self, head: u64) -> Vec<pmw_core::ch::IngestLatencyRow> {
        let all = pmw_core::ch::Window {
            from_ms: 0,
            to_ms: i64::MAX,
        };
        let polled = eventually(Duration::from_secs(30), || async {
            let rows = pmw_core::ch::latency::ingest_in_window(&self.db.ch, all)
                .await
                .unwrap();
            if rows.iter().any(|r| r.block_number >= head) {
                Ok(rows)
            } else {
                Err(rows.len())
            }
        })
        .await;
        polled.unwrap_or_else(|n| {
            panic!("no ingest_latency row of block {head} within 30 s ({n} rows)")
        })
    }

    /// Wait until the projector has copied every hot-ledger row to ClickHouse.
    pub async fn projected(&self, within: Duration) {
        let c = self.db.connect().await;
        let done = eventually(within, || async {
            let r = c
                .query_one(
                    "SELECT s.seq, h.seq FROM stored_cursor s, ledger_head h",
                    &[],
                )
                .await
                .unwrap();
            r.get::<_, i64>(0) == r.get::<_, i64>(1)
        })
        .await;
        assert!(done, "the projector did not catch up within {within:?}");
    }

    /// Every trade visible to readers (the one ledger: the hot ledger, ClickHouse below its
    /// floor).
    pub async fn visible(&self) -> Vec<TradeRow> {
        let c = self.db.connect().await;
        pmw_core::pg::ledger::trades_after(&c, &self.db.ch, Cursor::ORIGIN, u64::MAX / 2, 1_000_000)
            .await
            .unwrap()
    }

    /// Every trade visible in ClickHouse, once the projector (live must run) has caught up.
    pub async fn projected_visible(&self) -> Vec<TradeRow> {
        self.projected(Duration::from_secs(30)).await;
        trades::trades_after(&self.db.ch, Cursor::ORIGIN, u64::MAX, 1_000_000)
            .await
            .unwrap()
    }
}

/// 6-decimal base units as an exact decimal string, written independently of the decoder.
pub fn units6(v: u64) -> String {
    let s = format!("{}.{:06}", v / 1_000_000, v % 1_000_000);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Assert the readers' view is exactly the simulator's canonical record, field by field.
pub fn assert_exactly_emitted(visible: &[TradeRow], canonical: &[Emitted]) {
    let mut expected: BTreeMap<(u64, u32), &Emitted> = BTreeMap::new();
    for e in canonical {
        assert!(
            expected
                .insert((e.block_number, e.log_index as u32), e)
                .is_none(),
            "sim recorded a key twice"
        );
    }
    let mut seen = BTreeMap::new();
    for r in visible {
        assert!(
            seen.insert((r.block_number, r.log_index), r).is_none(),
            "trade {:?} visible twice",
            r.cursor()
        );
    }
    let missing: Vec<_> = expected.keys().filter(|k| !seen.contains_key(k)).collect();
    let extra: Vec<_> = seen.keys().filter(|k| !expected.contains_key(k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, extra {extra:?}"
    );
    for (k, e) in &expected {
        let r = seen[k];
        let ctx = format!("trade {k:?}");
        assert_eq!(r.block_hash, e.block_hash.to_string(), "{ctx}");
        assert_eq!(r.tx_hash, e.tx_hash.to_string(), "{ctx}");
        assert_eq!(r.exchange, e.exchange.to_lower_hex(), "{ctx}");
        assert_eq!(
            r.exchange_version,
            if e.version == pmw_sim::types::Version::V1 {
                1
            } else {
                2
            },
            "{ctx}"
        );
        assert_eq!(r.maker, e.maker.to_lower_hex(), "{ctx}");
        assert_eq!(r.taker, e.taker.to_lower_hex(), "{ctx}");
        assert_eq!(
            r.side,
            if e.side == pmw_sim::types::Side::Buy {
                0
            } else {
                1
            },
            "{ctx}"
        );
        assert_eq!(r.token_id, e.token_id.0.to_string(), "{ctx}");
        assert_eq!(r.shares, units6(e.shares), "{ctx}");
        assert_eq!(r.collateral, units6(e.collateral), "{ctx}");
        assert_eq!(r.fee, units6(e.fee), "{ctx}");
        assert_eq!(r.order_hash, e.order_hash.to_string(), "{ctx}");
    }
}

/// p50 and p99 (nearest rank) of a list of milliseconds.
pub fn p50_p99(mut v: Vec<i64>) -> (i64, i64) {
    v.sort_unstable();
    if v.is_empty() {
        return (0, 0);
    }
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    (rank(0.50), rank(0.99))
}

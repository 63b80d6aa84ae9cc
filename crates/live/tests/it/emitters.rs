//! Unlisted emitters (issue 45 item 4) on a private anvil: the simulator's look-alike emitter
//! at an address outside the exchange list fills a wallet; live records the emitter (address,
//! first block, events) and never stores its fills; the audit finds it again in finalized
//! blocks (after the ingest record was lost); once the address is in
//! `PMW_LIVE_EXTRA_EXCHANGES`, its warning stops and its later fills are ingested.

use std::time::Duration;

use pmw_core::pg::emitters::{open, warning, UnlistedEmitter};
use pmw_live::LiveConfig;
use pmw_sim::unlisted::DEFAULT_ADDRESS;
use pmw_sim::Version;
use pmw_testkit::{eventually, ServiceHandle};

use crate::audit::{audit_fast, wait_audited, ANVIL_FINALITY};
use crate::common::{assert_exactly_emitted, Harness};

const WITHIN: Duration = Duration::from_secs(60);

fn start(h: &Harness, live: LiveConfig) -> ServiceHandle {
    let core = h.core();
    let allow = live.exchanges().expect("exchange list");
    ServiceHandle::spawn(move |stop| pmw_live::run_with(core, live, allow, stop))
}

/// The record of `address` once `done` holds for it.
async fn record_when(
    h: &Harness,
    address: &str,
    done: impl Fn(&UnlistedEmitter) -> bool,
) -> UnlistedEmitter {
    let c = h.db.connect().await;
    let polled = eventually(WITHIN, || async {
        let (list, _) = open(&c, 100).await.unwrap();
        let found = list.into_iter().find(|e| e.address == address);
        match found {
            Some(e) if done(&e) => Ok(e),
            other => Err(other),
        }
    })
    .await;
    polled.unwrap_or_else(|last| panic!("no such record of {address} within {WITHIN:?}: {last:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlisted_emitter_is_recorded_never_stored_found_by_the_audit_and_ingested_once_listed()
{
    let h = Harness::with_anvil(ANVIL_FINALITY).await;
    let addr = DEFAULT_ADDRESS.to_lower_hex();

    // 1. Live with the built-in list: a real match, a look-alike one, a real one.
    let live = start(&h, audit_fast(h.live_config().await, false));
    h.sim.run_matches(1).await.unwrap();
    let fake = h
        .sim
        .emit_unlisted(DEFAULT_ADDRESS, Version::V2)
        .await
        .unwrap();
    h.sim.run_matches(1).await.unwrap();
    h.wait_caught_up(WITHIN).await;
    assert!(
        fake.fills.len() >= 2 && fake.events == fake.fills.len() + 1,
        "premise: {fake:?}"
    );
    let r = record_when(&h, &addr, |e| e.events > 0).await;
    assert_eq!(r.first_block, fake.block_number as i64);
    assert_eq!(r.last_block, fake.block_number as i64);
    assert_eq!(
        r.events, fake.events as i64,
        "every fill and the match event"
    );
    assert_eq!(r.first_tx, fake.tx_hash.to_string());
    // What `pmwctl status` and `/v1/ready` show (core's one query and warning).
    let (list, total) = open(&h.db.connect().await, 5).await.unwrap();
    let w = warning(&list, total).expect("a warning");
    let names = format!(
        "{addr} (from block {}, {} events",
        fake.block_number, fake.events
    );
    assert!(w.contains(&names), "{w}");
    // Never stored (so never delivered): the ledger is exactly the real exchanges' fills.
    let visible = h.visible().await;
    assert!(
        visible.iter().all(|t| t.exchange != addr),
        "a look-alike fill was stored"
    );
    assert_exactly_emitted(&visible, &h.sim.canonical());
    live.stop().await.unwrap();

    // 2. The ingest record is lost (say live ran a build without the watch): the audit of
    // finalized blocks finds the emitter again.
    let c = h.db.connect().await;
    c.execute("DELETE FROM unlisted_emitters", &[])
        .await
        .unwrap();
    let live = start(&h, audit_fast(h.live_config().await, true));
    wait_audited(&h, fake.block_number).await;
    let r = record_when(&h, &addr, |e| e.audit_events > 0).await;
    assert_eq!((r.events, r.audit_events), (0, fake.events as i64));
    assert_eq!(r.first_block, fake.block_number as i64);
    assert!(
        h.visible().await.iter().all(|t| t.exchange != addr),
        "the audit stored no look-alike fill"
    );
    live.stop().await.unwrap();

    // 3. The operator lists it: the warning stops, and its later fills are ingested.
    let mut listed = audit_fast(h.live_config().await, true);
    listed.live_extra_exchanges = Some(format!("{}=2", DEFAULT_ADDRESS.to_checksum()));
    let live = start(&h, listed);
    let still = eventually(WITHIN, || async { open(&c, 100).await.unwrap().1 == 0 }).await;
    assert!(still, "the listed emitter still warns");
    let later = h
        .sim
        .emit_unlisted(DEFAULT_ADDRESS, Version::V2)
        .await
        .unwrap();
    h.wait_caught_up(WITHIN).await;
    let visible = h.visible().await;
    let mut got: Vec<(u64, u32, String)> = visible
        .iter()
        .filter(|t| t.exchange == addr)
        .map(|t| (t.block_number, t.log_index, t.maker.clone()))
        .collect();
    got.sort();
    let want: Vec<(u64, u32, String)> = later
        .fills
        .iter()
        .map(|f| {
            (
                later.block_number,
                f.log_index as u32,
                f.maker.to_lower_hex(),
            )
        })
        .collect();
    assert_eq!(
        got, want,
        "exactly the listed emitter's later fills are stored"
    );
    live.stop().await.unwrap();
}

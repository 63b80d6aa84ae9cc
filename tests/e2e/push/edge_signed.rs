//! Edge mode's frames signed, end to end: with push leading and two pmw-edge instances serving
//! clients, someone who can publish on the stream stores a forged round part (a fake trade of a
//! client's wallet, chained to the leader's last part and signed under the leader's key id with
//! another key) and four bytes of junk (the attack). Every edge refuses both and keeps
//! serving: its clients get exactly the chain's trades, none closed; `/health` says
//! `degraded` with the refusals counted; the push leader is not deposed.

use std::time::Duration;

use async_nats::HeaderMap;
use pmw_core::ch::TradeRow;
use pmw_core::{Cursor, Position};
use pmw_session::bus::round::{RoundPart, RoundRow, Stream, ALL};
use pmw_session::bus::sign::{self, Bound, SigningKey};
use pmw_session::bus::{stream, Bus};
use pmw_sim::demo_wallets;
use serde_json::Value;

use super::edge::{drop_stream, edge_push, start_edge, trades_until};
use super::nats::{access, shared_bus};
use super::WITHIN;
use crate::harness::{connect, hello_cursor, Harness};

/// Far past any block the test's chain reaches.
const FAKE_BLOCK: u64 = 9_000_000;

/// A trade of `maker` at [`FAKE_BLOCK`] that never happened.
fn fake_row(maker: &str) -> RoundRow {
    let hash = format!("0x{:064x}", 0xbad);
    RoundRow {
        row: TradeRow {
            block_number: FAKE_BLOCK,
            log_index: 0,
            block_hash: hash.clone(),
            tx_hash: hash.clone(),
            block_time_ms: 1_700_000_000_000,
            exchange: "0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e".into(),
            exchange_version: 1,
            order_hash: hash,
            maker: maker.into(),
            taker: "0x00000000000000000000000000000000000000bb".into(),
            side: 0,
            token_id: "1".into(),
            shares: "1000000".into(),
            collateral: "999999".into(),
            price: "0.999999".into(),
            fee: "0".into(),
            fee_asset: "collateral".into(),
            t_detect_ms: 1_700_000_000_100,
            backfilled: 0,
            retracted: 0,
            version: 1,
            audit: 0,
        },
        market: None,
        pending_id: None,
    }
}

/// Store, as an attacker with publish access would, a part with a fake trade of `maker` right
/// after the leader's last part, signed under the leader's key id with another key.
async fn forge(bus: &Bus, maker: &str) {
    let keys = bus.config.keys();
    // The leader's first part may land a moment after the test saw push caught up (live may
    // not have ingested the block yet when it looked): wait for it, bounded.
    let deadline = tokio::time::Instant::now() + WITHIN;
    let (prev, body) = loop {
        if let Some(last) = stream::last_frame(bus, ALL, &keys).await.unwrap() {
            break last;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "a part on the stream within {WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let last = RoundPart::from_body(&body).unwrap();
    let fake = fake_row(maker);
    let part = RoundPart {
        stream: Stream::Ledger,
        from: last.through,
        through: Position::of(
            Cursor::new(FAKE_BLOCK, 999_999).unwrap(),
            &fake.row.block_hash,
        ),
        rewound: false,
        reorg_id: 0,
        watermark: Some(FAKE_BLOCK),
        retracts: vec![],
        rows: vec![fake],
        pending: vec![],
    };
    let frame = part.to_frame().unwrap();
    let subject = bus.config.frames_subject(ALL).unwrap();
    let id = frame.id.to_string();
    let bound = Bound {
        epoch: 1_000_000,
        subject: &subject,
        msg_id: &id,
        prev,
    };
    let wrong = SigningKey::parse(&sign::generate("e2e").unwrap().0).unwrap();
    let mut h = HeaderMap::new();
    h.insert("Nats-Msg-Id", id.as_str());
    h.insert("Pmw-Epoch", "1000000");
    h.insert("Pmw-Prev", prev.to_string().as_str());
    h.insert("Pmw-Key-Id", wrong.id());
    h.insert("Pmw-Sig", wrong.sign(&bound, &frame.body).as_str());
    store(bus, &subject, h, frame.body).await;
}

async fn store(bus: &Bus, subject: &str, h: HeaderMap, body: bytes::Bytes) {
    bus.js
        .publish_with_headers(subject.to_string(), h, body)
        .await
        .expect("publish")
        .await
        .expect("stored");
}

async fn health(addr: std::net::SocketAddr) -> Value {
    reqwest::get(format!("http://{addr}/health"))
        .await
        .expect("/health")
        .json()
        .await
        .expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_refuse_junk_and_a_forged_part_and_keep_serving() {
    let h = Harness::new().await;
    let wallets = demo_wallets(6);
    let mine = &wallets[..3];
    let (_, key) = h.account(mine).await;
    let bus = shared_bus();
    let (push, _) = h.start_push("push-a", edge_push(&h, &bus));
    h.trade(1, Duration::from_millis(50), 2).await;
    h.wait_pushed(WITHIN).await;
    let (edge_1, addr_1) = start_edge(&h, &bus).await;
    let (edge_2, addr_2) = start_edge(&h, &bus).await;
    let mut c_1 = connect(addr_1, &key, None).await;
    let from = hello_cursor(&mut c_1).await;
    let mut c_2 = connect(addr_2, &key, Some(from)).await;
    assert_eq!(health(addr_1).await["status"], "ok");

    // The attacker holds push's identity on the broker, not its signing key.
    let as_push = bus.config.clone().with_access(access(&bus.push));
    let attacker = Bus::connect(as_push, "pmw-test").await.unwrap();
    forge(&attacker, &mine[0].to_lower_hex()).await;
    let subject = bus.frames_subject(ALL).unwrap();
    store(&attacker, &subject, HeaderMap::new(), "junk".into()).await;
    h.trade(2, Duration::from_millis(100), 10).await;
    h.wait_pushed(WITHIN).await;

    let owed = h.expected(mine, from);
    let got_1 = trades_until(&mut c_1, owed.len()).await;
    let got_2 = trades_until(&mut c_2, owed.len()).await;
    println!(
        "edges after junk and a forgery: owed {} got {} and {} (closed: {}, {})",
        owed.len(),
        got_1.len(),
        got_2.len(),
        c_1.done.is_finished(),
        c_2.done.is_finished()
    );
    let fake = |got: &[Cursor]| got.iter().any(|c| c.block == FAKE_BLOCK);
    assert!(
        !fake(&got_1) && !fake(&got_2),
        "a client received the forged trade"
    );
    assert_eq!(got_1, owed, "what the client of edge 1 got");
    assert_eq!(got_2, owed, "what the client of edge 2 got");
    assert!(
        !c_1.done.is_finished() && !c_2.done.is_finished(),
        "an edge closed a session"
    );
    for addr in [addr_1, addr_2] {
        let v = health(addr).await;
        assert_eq!(v["status"], "degraded", "{addr}: {v}");
        assert_eq!(v["refused"]["forged"], 1, "{addr}: {v}");
        assert_eq!(v["refused"]["unsigned"], 1, "{addr}: {v}");
    }
    assert!(!push.is_finished(), "the junk deposed the push leader");
    edge_1.stop().await.unwrap();
    edge_2.stop().await.unwrap();
    push.stop().await.unwrap();
    drop_stream(&bus).await;
}

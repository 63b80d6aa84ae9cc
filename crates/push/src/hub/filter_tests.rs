//! The hub's fan-out under subscription filters: trades and retracts decided alike, and a newer
//! index's filters followed.

use std::sync::atomic::AtomicU16;

use pmw_core::filter::{Facts, Filter, Side};
use tokio::sync::mpsc;

use super::*;

fn facts(side: Side, shares: u128) -> Facts {
    Facts {
        side,
        shares,
        collateral: 1,
        token_id: "1".into(),
        condition_id: None,
    }
}

fn item_of(kind: Kind, wallet: &str, log_index: u32, side: Side) -> Arc<Item> {
    Arc::new(Item {
        kind,
        cursor: Cursor {
            block: 1,
            log_index,
        },
        position: Position::default(),
        wallet: wallet.into(),
        facts: facts(side, 1),
        t_detect_ms: 0,
        audit: false,
        body: "{}".into(),
        brief: None,
    })
}

fn drain(rx: &mut mpsc::Receiver<Frame>) -> Vec<u32> {
    std::iter::from_fn(|| rx.try_recv().ok())
        .filter_map(|f| match f {
            Frame::Item(i) => Some(i.cursor.log_index),
            Frame::Rewind(_) => None,
        })
        .collect()
}

fn buys() -> Filter {
    Filter {
        side: Some(Side::Buy),
        ..Filter::default()
    }
}

#[test]
fn a_filter_decides_trades_and_retracts_alike_and_follows_newer_indexes() {
    let hub = Hub::new(Position::default());
    let (tx, mut rx) = mpsc::channel(16);
    let buys = buys();
    hub.register(Registration {
        account_id: 7,
        key_id: 70,
        max_sessions: None,
        wallets: vec!["0xa".into(), "0xb".into()],
        filters: [("0xa".to_string(), buys.clone())].into(),
        version: 1,
        events: pmw_core::message::Events::TRADE,
        tx,
        close: Arc::new(AtomicU16::new(1013)),
    })
    .unwrap();
    let round = |k: Kind| {
        vec![
            item_of(k, "0xa", 1, Side::Buy),
            item_of(k, "0xa", 2, Side::Sell),
            item_of(k, "0xb", 3, Side::Sell),
        ]
    };
    hub.dispatch(&round(Kind::Trade), Position::default());
    assert_eq!(drain(&mut rx), vec![1, 3]);
    hub.dispatch(&round(Kind::Retract), Position::default());
    assert_eq!(drain(&mut rx), vec![1, 3]);
    // A newer index moves the filter to 0xb (same wallets: no relinking).
    let mut idx = Index {
        version: 2,
        live_keys: [70].into(),
        ..Index::default()
    };
    idx.wallets_by_account
        .insert(7, vec!["0xa".into(), "0xb".into()]);
    idx.filters_by_account
        .insert(7, [("0xb".to_string(), buys)].into());
    hub.apply(&idx);
    hub.dispatch(&round(Kind::Trade), Position::default());
    assert_eq!(drain(&mut rx), vec![1, 2]);
}

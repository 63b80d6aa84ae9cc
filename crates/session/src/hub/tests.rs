//! The hub's unit tests: index versions, shards, plan limits, filters (trades and retracts decided
//! alike, newer indexes followed), the two streams.

use super::*;
use pmw_core::filter::{Filter, Side};

use crate::subs::tests::buys;
use std::sync::atomic::AtomicU16;

fn item(wallet: &str, log_index: u32) -> Arc<Item> {
    let at = Position {
        cursor: Cursor {
            block: 1,
            log_index,
        },
        hash: None,
    };
    Arc::new(Item::test(Kind::Trade, wallet, at, Side::Buy))
}

fn register(
    hub: &Hub,
    wallets: &[&str],
    version: i64,
    max_sessions: Option<u32>,
) -> Result<(mpsc::Receiver<Frame>, CloseCode), TooMany> {
    let (tx, rx) = mpsc::channel(16);
    let close = Arc::new(AtomicU16::new(1013));
    hub.register(Registration {
        account_id: 7,
        key_id: 70,
        max_sessions,
        wallets: wallets.iter().map(|w| w.to_string()).collect(),
        filters: Filters::new(),
        markets: Default::default(),
        version,
        events: Events::TRADE,
        tx,
        close: close.clone(),
    })?;
    Ok((rx, close))
}

fn session(hub: &Hub, wallets: &[&str], version: i64) -> mpsc::Receiver<Frame> {
    register(hub, wallets, version, None).unwrap().0
}

fn drain(rx: &mut mpsc::Receiver<Frame>) -> Vec<u32> {
    std::iter::from_fn(|| rx.try_recv().ok())
        .map(|f| match f {
            Frame::Item(i) => i.cursor.log_index,
            Frame::Rewind(p) => 1_000_000 + p.cursor.log_index,
        })
        .collect()
}

/// Register a session of `account` (its own key) following `0xa`, at version 1, with `events`;
/// returns its frames and what the hub says of it.
fn join(hub: &Hub, account: i64, events: Events) -> (mpsc::Receiver<Frame>, Registered) {
    let (tx, rx) = mpsc::channel(16);
    let reg = hub
        .register(Registration {
            account_id: account,
            key_id: account,
            max_sessions: None,
            wallets: vec!["0xa".into()],
            filters: Filters::new(),
            markets: Default::default(),
            version: 1,
            events,
            tx,
            close: Arc::new(AtomicU16::new(1013)),
        })
        .unwrap();
    (rx, reg)
}

#[test]
fn an_older_index_never_replaces_a_fresher_session_set() {
    let hub = Hub::new(Position::default());
    let mut rx = session(&hub, &["0xa", "0xb"], 5);
    // An index read before the session subscribed to 0xb.
    let mut old = Index {
        version: 4,
        live_keys: [70].into(),
        ..Index::default()
    };
    old.wallets_by_account.insert(7, vec!["0xa".into()]);
    hub.apply(&old);
    hub.dispatch(
        &[item("0xa", 1), item("0xb", 2), item("0xc", 3)],
        Position::default(),
    );
    assert_eq!(drain(&mut rx), vec![1, 2]);
    // A newer index that removed 0xa: the session stops getting it.
    let mut new = Index {
        version: 6,
        live_keys: [70].into(),
        ..Index::default()
    };
    new.wallets_by_account.insert(7, vec!["0xb".into()]);
    hub.apply(&new);
    hub.dispatch(&[item("0xa", 4), item("0xb", 5)], Position::default());
    assert_eq!(drain(&mut rx), vec![5]);
    // A reorg reaches every session, before the round's items.
    hub.rewind(Position::default(), Stream::Ledger);
    hub.dispatch(&[item("0xb", 6)], Position::default());
    assert_eq!(drain(&mut rx), vec![1_000_000, 6]);
    assert!(!hub.follows("0xa") && hub.follows("0xb"));
}

#[test]
fn every_shard_gets_the_round_and_a_late_session_starts_after_it() {
    let hub = Hub::new(Position::default());
    let mut rxs = Vec::new();
    for account in 0..(3 * SHARDS as i64) {
        rxs.push(join(&hub, account, Events::TRADE).0);
    }
    assert_eq!(hub.sessions(), 3 * SHARDS);
    assert!(hub.follows("0xa") && !hub.follows("0xb"));
    let through = Position {
        cursor: Cursor {
            block: 1,
            log_index: 2,
        },
        hash: None,
    };
    assert_eq!(
        hub.dispatch(&[item("0xa", 2), item("0xb", 3)], through),
        3 * SHARDS
    );
    for rx in &mut rxs {
        assert_eq!(drain(rx), vec![2]);
    }
    assert_eq!(hub.dispatched(), through);
    // A session registering after the round replays up to it, in any shard.
    let at = join(&hub, 5, Events::TRADE).1.dispatched;
    assert_eq!(at, through);
}

#[test]
fn each_stream_reaches_the_sessions_that_asked_and_keeps_its_own_position() {
    let hub = Hub::new(Position::default());
    let mut rx = Vec::new();
    for (account, events) in [(1, Events::TRADE), (2, Events::FINAL), (3, Events::BOTH)] {
        rx.push(join(&hub, account, events).0);
    }
    let at = |log_index| Position {
        cursor: Cursor {
            block: 1,
            log_index,
        },
        hash: None,
    };
    let fin = |log_index| {
        let mut i = Arc::try_unwrap(item("0xa", log_index)).unwrap();
        i.kind = Kind::Final;
        Arc::new(i)
    };
    let retract = |log_index| {
        let mut i = Arc::try_unwrap(item("0xa", log_index)).unwrap();
        i.kind = Kind::Retract;
        Arc::new(i)
    };
    hub.dispatch(&[item("0xa", 1), item("0xa", 2)], at(2));
    hub.dispatch_stream(&[fin(1)], at(1), Stream::Final);
    // An audit's retract in the final stream: for `final`-only sessions alone.
    hub.dispatch_stream(&[retract(1)], at(1), Stream::Final);
    assert_eq!(drain(&mut rx[0]), vec![1, 2], "trade: the ledger only");
    assert_eq!(
        drain(&mut rx[1]),
        vec![1, 1],
        "final: its final and the retract"
    );
    assert_eq!(
        drain(&mut rx[2]),
        vec![1, 2, 1],
        "both: trades, then the final"
    );
    // A rewind of the final stream reaches `final`-only sessions only.
    hub.rewind(Position::default(), Stream::Final);
    assert!(drain(&mut rx[0]).is_empty() && drain(&mut rx[2]).is_empty());
    assert_eq!(drain(&mut rx[1]), vec![1_000_000]);
    // A late session gets each stream's own position.
    hub.dispatch_stream(&[fin(2)], at(2), Stream::Final);
    let (_r, reg) = join(&hub, 4, Events::BOTH);
    assert_eq!((reg.dispatched, reg.final_dispatched), (at(2), at(2)));
}

#[test]
fn the_plan_limit_refuses_one_more_session_and_a_revoked_key_closes_with_1008() {
    let hub = Hub::new(Position::default());
    let (_a, _) = register(&hub, &["0xa"], 1, Some(2)).unwrap();
    let (mut b, close_b) = register(&hub, &["0xa"], 1, Some(2)).unwrap();
    assert_eq!(register(&hub, &["0xa"], 1, Some(2)).err(), Some(TooMany(2)));
    // An index older than the sessions changes nothing, even without their key.
    assert_eq!(
        hub.apply(&Index {
            version: 1,
            ..Index::default()
        }),
        0
    );
    assert_eq!(hub.sessions_of(7), 2);
    // A newer index without the key closes both, with 1008, and frees the slots.
    assert_eq!(
        hub.apply(&Index {
            version: 2,
            ..Index::default()
        }),
        2
    );
    assert_eq!(close_b.load(Ordering::SeqCst), 1008);
    assert!(matches!(
        b.try_recv(),
        Err(mpsc::error::TryRecvError::Disconnected)
    ));
    assert_eq!(hub.sessions_of(7), 0);
    assert!(register(&hub, &["0xa"], 3, Some(2)).is_ok());
}

fn item_of(kind: Kind, wallet: &str, log_index: u32, side: Side) -> Arc<Item> {
    let at = Position {
        cursor: Cursor {
            block: 1,
            log_index,
        },
        hash: None,
    };
    Arc::new(Item::test(kind, wallet, at, side))
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
        markets: Default::default(),
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

/// A session that stops following a wallet still gets the `retract` of a trade of it (a reorg
/// after the unsubscribe orphans what it was sent), filtered as the trade was, and no new
/// trade of it. Retracts used to follow the current subscriptions only: the checker's churn
/// clients kept orphans (seeds 36808, 40389).
#[test]
fn a_wallet_no_longer_followed_still_gets_its_retracts_and_no_trades() {
    let hub = Hub::new(Position::default());
    let (tx, mut rx) = mpsc::channel(16);
    hub.register(Registration {
        account_id: 7,
        key_id: 70,
        max_sessions: None,
        wallets: vec!["0xa".into(), "0xb".into()],
        filters: [("0xa".to_string(), buys())].into(),
        markets: Default::default(),
        version: 1,
        events: pmw_core::message::Events::TRADE,
        tx,
        close: Arc::new(AtomicU16::new(1013)),
    })
    .unwrap();
    let mut idx = Index {
        version: 2,
        live_keys: [70].into(),
        ..Index::default()
    };
    idx.wallets_by_account.insert(7, vec!["0xb".into()]);
    hub.apply(&idx);
    let round = |k: Kind| {
        vec![
            item_of(k, "0xa", 1, Side::Buy),
            item_of(k, "0xa", 2, Side::Sell),
            item_of(k, "0xb", 3, Side::Sell),
        ]
    };
    hub.dispatch(&round(Kind::Trade), Position::default());
    assert_eq!(
        drain(&mut rx),
        vec![3],
        "no trade of 0xa after the unsubscribe"
    );
    hub.dispatch(&round(Kind::Retract), Position::default());
    assert_eq!(
        drain(&mut rx),
        vec![1, 3],
        "the retract of the 0xa buy it may hold (its filter kept), and of 0xb"
    );
    // Following 0xa again: trades again, and no retract twice.
    idx.version = 3;
    idx.wallets_by_account
        .insert(7, vec!["0xa".into(), "0xb".into()]);
    hub.apply(&idx);
    hub.dispatch(&round(Kind::Retract), Position::default());
    assert_eq!(drain(&mut rx), vec![1, 2, 3]);
}

/// A session following a market gets any wallet's fill in it that one of the market's filters
/// lets through, trades and retracts alike; a fill of a followed wallet in a followed market is
/// queued once; a newer index without the market stops its trades.
#[test]
fn market_followers_get_any_wallets_fills_once_and_filtered() {
    let hub = Hub::new(Position::default());
    let sells = Filter {
        side: Some(Side::Sell),
        ..Filter::default()
    };
    let follow = |account: i64, wallets: Vec<String>, market: Filter| {
        let (tx, rx) = mpsc::channel(16);
        hub.register(Registration {
            account_id: account,
            key_id: account * 10,
            max_sessions: None,
            wallets,
            filters: Filters::new(),
            markets: [("1".to_string(), vec![market])].into(),
            version: 1,
            events: Events::TRADE,
            tx,
            close: Arc::new(AtomicU16::new(1013)),
        })
        .unwrap();
        rx
    };
    // Account 7 follows wallet 0xa and the market unfiltered; account 8 the market's sells.
    let mut both = follow(7, vec!["0xa".into()], Filter::default());
    let mut sellers = follow(8, Vec::new(), sells);
    let in_market = |k: Kind, wallet: &str, log_index: u32, side: Side, token: &str| {
        let mut i = Item::test(k, wallet, Position::default(), side);
        i.cursor.log_index = log_index;
        i.position.cursor.log_index = log_index;
        i.facts.token_id = token.into();
        Arc::new(i)
    };
    let round = |k: Kind| {
        vec![
            in_market(k, "0xa", 1, Side::Sell, "1"),
            in_market(k, "0xc", 2, Side::Sell, "1"),
            in_market(k, "0xc", 3, Side::Buy, "1"),
            in_market(k, "0xc", 4, Side::Sell, "2"),
            in_market(k, "0xa", 5, Side::Buy, "2"),
        ]
    };
    for kind in [Kind::Trade, Kind::Retract] {
        hub.dispatch(&round(kind), Position::default());
        assert_eq!(drain(&mut both), vec![1, 2, 3, 5], "{kind:?}");
        assert_eq!(drain(&mut sellers), vec![1, 2], "{kind:?}");
    }
    let mut idx = Index {
        version: 2,
        live_keys: [70, 80].into(),
        ..Index::default()
    };
    idx.wallets_by_account.insert(7, vec!["0xa".into()]);
    hub.apply(&idx);
    hub.dispatch(&round(Kind::Trade), Position::default());
    assert_eq!(drain(&mut both), vec![1, 5], "the wallet only");
    assert_eq!(drain(&mut sellers), Vec::<u32>::new(), "no market left");
}

/// A session that stops following a market still gets the `retract` of a trade it was sent
/// through it (filtered as the trade was), and no new trade of it.
#[test]
fn a_market_no_longer_followed_still_gets_its_retracts_and_no_trades() {
    let hub = Hub::new(Position::default());
    let (tx, mut rx) = mpsc::channel(16);
    hub.register(Registration {
        account_id: 7,
        key_id: 70,
        max_sessions: None,
        wallets: Vec::new(),
        filters: Filters::new(),
        markets: [("1".to_string(), vec![buys()])].into(),
        version: 1,
        events: Events::TRADE,
        tx,
        close: Arc::new(AtomicU16::new(1013)),
    })
    .unwrap();
    let idx = Index {
        version: 2,
        live_keys: [70].into(),
        ..Index::default()
    };
    hub.apply(&idx);
    let round = |k: Kind| {
        vec![
            item_of(k, "0xc", 1, Side::Buy),
            item_of(k, "0xc", 2, Side::Sell),
        ]
    };
    hub.dispatch(&round(Kind::Trade), Position::default());
    assert_eq!(
        drain(&mut rx),
        Vec::<u32>::new(),
        "no trades of it any more"
    );
    hub.dispatch(&round(Kind::Retract), Position::default());
    assert_eq!(
        drain(&mut rx),
        vec![1],
        "the retract its filter let through"
    );
}

#[test]
fn pendings_reach_only_opted_in_followers_and_move_no_position() {
    let hub = Hub::default();
    let opted = Events {
        pending: true,
        ..Events::TRADE
    };
    let (mut with, _) = join(&hub, 1, opted);
    let (mut without, _) = join(&hub, 2, Events::TRADE);
    let before = hub.dispatched();
    let mine = Item::test(Kind::Pending, "0xa", Position::default(), Side::Buy);
    let other = Item::test(Kind::Void, "0xb", Position::default(), Side::Buy);
    let queued = hub.dispatch_pending(&[Arc::new(mine), Arc::new(other)]);
    assert_eq!(queued, 1, "the follower of 0xa that opted in, only");
    assert_eq!(drain(&mut with).len(), 1);
    assert!(drain(&mut without).is_empty());
    assert_eq!(hub.dispatched(), before, "no ledger position moved");
}

impl Item {
    /// A test item: a `kind` message about `wallet`'s fill at `position` (side `side`, one
    /// share, token `1`), body `{}`.
    pub(crate) fn test(
        kind: Kind,
        wallet: &str,
        position: Position,
        side: pmw_core::filter::Side,
    ) -> Item {
        Item {
            kind,
            cursor: position.cursor,
            position,
            wallet: wallet.into(),
            facts: pmw_core::filter::Facts {
                side,
                shares: 1,
                collateral: 1,
                token_id: "1".into(),
                condition_id: None,
            },
            t_detect_ms: 0,
            audit: false,
            body: "{}".into(),
            brief: None,
            pending_id: None,
            stamped: Default::default(),
        }
    }
}

//! Edge mode's bus on real 3-node JetStream clusters (nats-server 2.9.10): the fenced publisher
//! stores in order and de-duplicates a successor's republish, refuses a deposed leader, and the
//! follower reports a gap; on a private cluster, publishing and following go on through the
//! kill -9 of one node and of the stream's leader. Each test has a stream of its own.

use std::time::Duration;

use futures::StreamExt;

use pmw_core::Cursor;
use pmw_session::bus::{
    sign, stream, Bus, BusAccess, BusConfig, BusError, Event, FencedPublisher, Follower, FrameId,
    OutFrame, Stored,
};
use pmw_testkit::{NatsRole, PrivateStack};

/// `role`'s access to the locked broker.
pub fn access(role: &NatsRole) -> BusAccess {
    BusAccess::new(&role.user, &role.password, role.ca.clone())
}

/// The frame signing key pair of this test binary's leaders: (signing key, verify key).
pub fn keys() -> &'static (String, String) {
    static KEYS: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| sign::generate("test").expect("keygen"))
}

/// `config` with this binary's signing and verify keys.
pub fn signed(config: BusConfig) -> BusConfig {
    let (secret, public) = keys();
    config.signed(
        Some(sign::SigningKey::parse(secret).unwrap()),
        sign::VerifyKeys::parse(public).unwrap(),
    )
}

/// A bus on `urls` as `role` with a stream and subject prefix no other test uses.
pub async fn bus(urls: &str, role: &NatsRole) -> Bus {
    bus_giving_up_after(urls, role, Duration::from_secs(45)).await
}

/// The operator on the private stack `stack`.
fn operator(stack: &PrivateStack) -> NatsRole {
    stack.env.nats_role("operator")
}

pub async fn bus_giving_up_after(urls: &str, role: &NatsRole, give_up: Duration) -> Bus {
    let tag = format!("{:08x}", rand::random::<u32>());
    let mut config = signed(BusConfig::new(urls).with_access(access(role)));
    config.stream = format!("PMW_T_{tag}");
    config.prefix = format!("pmwt{tag}");
    config.give_up = give_up;
    let bus = Bus::connect(config, "pmw-test").await.expect("connect");
    stream::ensure(&bus).await.expect("stream");
    bus
}

/// A bus on the shared stack's cluster; first drops test streams older than 10 minutes (left by
/// a failed run: every stream slows a node's restart until it is current).
pub async fn shared_bus() -> Bus {
    let bus = bus(
        pmw_testkit::nats_urls(),
        &pmw_testkit::nats_role("operator"),
    )
    .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let mut streams = bus.js.streams();
    let mut stale = Vec::new();
    while let Some(Ok(info)) = streams.next().await {
        if info.config.name.starts_with("PMW_T_") && now - info.created.unix_timestamp() > 600 {
            stale.push(info.config.name);
        }
    }
    for name in stale {
        let _ = bus.js.delete_stream(&name).await;
    }
    bus
}

pub async fn drop_stream(bus: &Bus) {
    let _ = bus.js.delete_stream(&bus.config.stream).await;
}

pub fn frame(account: &str, block: u64) -> OutFrame {
    OutFrame {
        id: FrameId {
            cursor: Cursor::new(block, 3).unwrap(),
            block_hash: format!("0x{block:064x}"),
            account: account.into(),
            kind: "trade".into(),
        },
        body: format!("{{\"block\":{block}}}").into(),
    }
}

/// The next event within 60 s.
pub async fn next(f: &mut Follower) -> Event {
    tokio::time::timeout(Duration::from_secs(60), f.next())
        .await
        .expect("an event within 60 s")
        .expect("follow")
}

/// The next event, which must be a frame (not a gap): (seq, prev, block).
pub async fn next_frame(f: &mut Follower) -> (u64, u64, u64) {
    match next(f).await {
        Event::Frame(fr) => (fr.seq, fr.prev, fr.id.cursor.block),
        Event::Gap(g) => panic!("unexpected gap after {}: {:?}", g.after, g.frame),
        Event::Refused(r) => panic!("unexpected refusal: {r:?}"),
    }
}

pub fn seqs(stored: &[Stored]) -> Vec<(u64, bool)> {
    stored.iter().map(|s| (s.seq, s.duplicate)).collect()
}

#[tokio::test]
async fn bus_publish_is_acked_in_order_and_followed_per_account() {
    let bus = shared_bus().await;
    let mut p = FencedPublisher::claim(bus.clone(), 7).await.expect("claim");
    assert_eq!(
        p.last(),
        1,
        "the epoch marker is the stream's first message"
    );
    let round = [frame("a", 10), frame("b", 10), frame("a", 11)];
    let stored = p.publish_round(&round).await.expect("publish");
    assert_eq!(seqs(&stored), [(2, false), (3, false), (4, false)]);
    assert_eq!(stream::last_seq(&bus).await.unwrap(), 4);
    assert_eq!(
        stream::last_frame_seq(&bus, "a", &bus.config.keys())
            .await
            .unwrap(),
        4
    );
    assert_eq!(
        stream::last_frame_seq(&bus, "c", &bus.config.keys())
            .await
            .unwrap(),
        0
    );

    let mut a = Follower::start(bus.clone(), "a", 0).unwrap();
    let Event::Frame(first) = next(&mut a).await else {
        panic!("a gap at the start");
    };
    assert_eq!((first.seq, first.prev, first.epoch), (2, 0, 7));
    assert_eq!(first.id, round[0].id);
    assert_eq!(first.body, round[0].body);
    assert_eq!(next_frame(&mut a).await, (4, 2, 11));
    // A later round reaches a follower that is waiting for it.
    let waiting = tokio::spawn(async move { (next_frame(&mut a).await, a) });
    let stored = p.publish_round(&[frame("a", 12)]).await.expect("publish");
    assert_eq!(seqs(&stored), [(5, false)]);
    let (got, _) = waiting.await.unwrap();
    assert_eq!(got, (5, 4, 12));

    let mut b = Follower::live(bus.clone(), "b").await.unwrap();
    assert_eq!(b.last(), 3, "live starts after b's last stored frame");
    p.publish_round(&[frame("b", 13)]).await.expect("publish");
    assert_eq!(next_frame(&mut b).await, (6, 3, 13));
    drop_stream(&bus).await;
}

#[tokio::test]
async fn bus_successor_republish_is_deduplicated() {
    let bus = shared_bus().await;
    let mut old = FencedPublisher::claim(bus.clone(), 1).await.expect("claim");
    let first = old
        .publish_round(&[frame("a", 20), frame("a", 21)])
        .await
        .expect("publish");
    assert_eq!(seqs(&first), [(2, false), (3, false)]);
    // The leader died before its cursor move; its successor redoes the round, and more.
    let mut new = FencedPublisher::claim(bus.clone(), 2).await.expect("claim");
    assert_eq!(new.last(), 4);
    let again = new
        .publish_round(&[frame("a", 20), frame("a", 21), frame("a", 22)])
        .await
        .expect("republish");
    assert_eq!(seqs(&again), [(2, true), (3, true), (5, false)]);
    let info = bus
        .js
        .get_stream(&bus.config.stream)
        .await
        .unwrap()
        .get_info()
        .await
        .unwrap();
    assert_eq!(info.state.messages, 5, "2 markers and 3 frames, each once");

    let mut f = Follower::start(bus.clone(), "a", 0).unwrap();
    assert_eq!(next_frame(&mut f).await, (2, 0, 20));
    assert_eq!(next_frame(&mut f).await, (3, 2, 21));
    assert_eq!(next_frame(&mut f).await, (5, 3, 22));
    drop_stream(&bus).await;
}

#[tokio::test]
async fn bus_deposed_publisher_is_refused() {
    let bus = shared_bus().await;
    let mut old = FencedPublisher::claim(bus.clone(), 1).await.expect("claim");
    old.publish_round(&[frame("a", 30)]).await.expect("publish");
    let mut new = FencedPublisher::claim(bus.clone(), 2).await.expect("claim");
    assert_eq!(new.last(), 3);

    // The deposed leader's next round (a frame nobody else published) must not land.
    match old.publish_round(&[frame("a", 31)]).await {
        Err(BusError::Fenced { expected, actual }) => assert_eq!((expected, actual), (2, 3)),
        other => panic!("a deposed publish was not refused: {other:?}"),
    }
    assert_eq!(stream::last_seq(&bus).await.unwrap(), 3);
    assert_eq!(
        stream::last_frame_seq(&bus, "a", &bus.config.keys())
            .await
            .unwrap(),
        2
    );

    // The rightful leader publishes that position, once.
    let stored = new.publish_round(&[frame("a", 31)]).await.expect("publish");
    assert_eq!(seqs(&stored), [(4, false)]);
    // A claim over a stream that moved since the claimant read it reads again.
    let mut third = FencedPublisher::claim(bus.clone(), 3).await.expect("claim");
    match new.publish_round(&[frame("a", 32)]).await {
        Err(BusError::Fenced { actual, .. }) => assert_eq!(actual, 5),
        other => panic!("a deposed publish was not refused: {other:?}"),
    }
    let stored = third
        .publish_round(&[frame("a", 32)])
        .await
        .expect("publish");
    assert_eq!(seqs(&stored), [(6, false)]);
    drop_stream(&bus).await;
}

#[tokio::test]
async fn bus_deposed_pipelined_round_lands_nothing() {
    let bus = shared_bus().await;
    let mut old = FencedPublisher::claim(bus.clone(), 1).await.expect("claim");
    let _new = FencedPublisher::claim(bus.clone(), 2).await.expect("claim");
    // The old leader's guards predict 1, 2, 3: the first is refused by the new claim, and the
    // second would match the stream's last sequence (the new marker, 2) were it not chained
    // to the first by its message id.
    let round = [frame("a", 50), frame("b", 50), frame("a", 51)];
    match old.publish_round(&round).await {
        Err(BusError::Fenced { expected, actual }) => assert_eq!((expected, actual), (1, 2)),
        other => panic!("a deposed round was not refused: {other:?}"),
    }
    assert_eq!(stream::last_seq(&bus).await.unwrap(), 2);
    assert_eq!(
        stream::last_frame_seq(&bus, "a", &bus.config.keys())
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        stream::last_frame_seq(&bus, "b", &bus.config.keys())
            .await
            .unwrap(),
        0
    );
    drop_stream(&bus).await;
}

#[tokio::test]
async fn bus_republish_in_the_middle_of_a_round_is_deduplicated() {
    let bus = shared_bus().await;
    let mut old = FencedPublisher::claim(bus.clone(), 1).await.expect("claim");
    old.publish_round(&[frame("a", 60), frame("b", 60)])
        .await
        .expect("publish");
    let mut new = FencedPublisher::claim(bus.clone(), 2).await.expect("claim");
    // New frames, then one the old leader stored, then new ones again.
    let round = [
        frame("c", 59),
        frame("a", 60),
        frame("a", 61),
        frame("b", 61),
    ];
    let stored = new.publish_round(&round).await.expect("publish");
    assert_eq!(
        seqs(&stored),
        [(5, false), (2, true), (6, false), (7, false)]
    );
    let mut a = Follower::start(bus.clone(), "a", 0).unwrap();
    assert_eq!(next_frame(&mut a).await, (2, 0, 60));
    assert_eq!(next_frame(&mut a).await, (6, 2, 61));
    let mut b = Follower::start(bus.clone(), "b", 0).unwrap();
    assert_eq!(next_frame(&mut b).await, (3, 0, 60));
    assert_eq!(next_frame(&mut b).await, (7, 3, 61));
    drop_stream(&bus).await;
}

/// `ensure` creates a missing stream, leaves one as configured alone, and brings one that
/// differs back to its configuration (an operator's edit, an older release's stream).
#[tokio::test]
async fn bus_stream_ensure_creates_keeps_and_corrects() {
    let bus = shared_bus().await;
    let info = bus.js.get_stream(&bus.config.stream).await.unwrap();
    let want = stream::config(&bus);
    assert_eq!(info.cached_info().config.max_age, want.max_age);
    assert_eq!(info.cached_info().config.num_replicas, 3);
    let created = info.cached_info().created;
    stream::ensure(&bus)
        .await
        .expect("ensure of a stream as configured");
    let again = bus.js.get_stream(&bus.config.stream).await.unwrap();
    assert_eq!(again.cached_info().created, created, "not recreated");
    let mut edited = again.cached_info().config.clone();
    edited.max_age = want.max_age * 2;
    edited.duplicate_window = want.duplicate_window / 2;
    bus.js
        .update_stream(&edited)
        .await
        .expect("operator's edit");
    stream::ensure(&bus)
        .await
        .expect("ensure of a stream that differs");
    let fixed = bus.js.get_stream(&bus.config.stream).await.unwrap();
    assert_eq!(fixed.cached_info().config.max_age, want.max_age);
    assert_eq!(
        fixed.cached_info().config.duplicate_window,
        want.duplicate_window
    );
    assert_eq!(
        fixed.cached_info().created,
        created,
        "updated, not recreated"
    );
    drop_stream(&bus).await;
    stream::ensure(&bus)
        .await
        .expect("ensure of a missing stream");
    let made = bus.js.get_stream(&bus.config.stream).await.unwrap();
    assert_eq!(made.cached_info().config.subjects, want.subjects);
    drop_stream(&bus).await;
}

#[tokio::test]
async fn bus_follower_reports_a_gap_never_skips() {
    let bus = shared_bus().await;
    let mut p = FencedPublisher::claim(bus.clone(), 1).await.expect("claim");
    let stored = p
        .publish_round(&[
            frame("a", 40),
            frame("b", 40),
            frame("a", 41),
            frame("a", 42),
        ])
        .await
        .expect("publish");
    assert_eq!(
        seqs(&stored),
        [(2, false), (3, false), (4, false), (5, false)]
    );
    // The frame at 4 is lost to the stream (as an expired or deleted one would be).
    let s = bus.js.get_stream(&bus.config.stream).await.unwrap();
    assert!(s.delete_message(4).await.unwrap());

    let mut f = Follower::start(bus.clone(), "a", 0).unwrap();
    assert_eq!(next_frame(&mut f).await, (2, 0, 40));
    match next(&mut f).await {
        Event::Gap(g) => {
            assert_eq!((g.account.as_str(), g.after), ("a", 2));
            assert_eq!((g.frame.seq, g.frame.prev), (5, 4));
            assert_eq!(g.frame.id, frame("a", 42).id);
        }
        other => panic!("no gap: {other:?}"),
    }
    // After the gap the chain goes on from the frame that revealed it.
    p.publish_round(&[frame("a", 43)]).await.expect("publish");
    assert_eq!(next_frame(&mut f).await, (6, 5, 43));

    // A follower that starts after a frame it holds, when the next one is gone, also reports.
    let mut late = Follower::start(bus.clone(), "a", 2).unwrap();
    assert!(matches!(next(&mut late).await, Event::Gap(g) if g.after == 2 && g.frame.seq == 5));
    drop_stream(&bus).await;
}

/// The node (1-3) leading the stream, from its `pmw-n<i>` server name.
async fn stream_leader(bus: &Bus) -> usize {
    let info = bus
        .js
        .get_stream(&bus.config.stream)
        .await
        .unwrap()
        .get_info()
        .await
        .unwrap();
    let leader = info
        .cluster
        .and_then(|c| c.leader)
        .expect("a stream leader");
    node_number(&leader)
}

/// A node's number (1-3) from its `pmw-n<i>` server name.
fn node_number(name: &str) -> usize {
    name.strip_prefix("pmw-n")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("node {name}"))
}

/// Publish rounds 0..40 of accounts `a` and `b`, killing (kill -9) the node
/// `pick(stream leader)` before round 10; every round must be stored, each frame once, and the
/// follower of `a` must see every frame of `a` once, in order, with no gap. Returns (the killed node, the stream's leader afterwards).
async fn publish_and_follow_through(
    stack: &PrivateStack,
    pick: impl Fn(usize) -> usize,
) -> (usize, usize) {
    let bus = bus(stack.nats_urls(), &operator(stack)).await;
    let mut p = FencedPublisher::claim(bus.clone(), 1).await.expect("claim");
    let mut f = Follower::start(bus.clone(), "a", 0).unwrap();
    let follower = tokio::spawn(async move {
        let mut got = Vec::new();
        while got.len() < 40 {
            got.push(next_frame(&mut f).await);
        }
        got
    });
    let (mut stored, mut killed, mut slowest) = (Vec::new(), 0, (Duration::ZERO, 0));
    for round in 0..40u64 {
        if round == 10 {
            killed = pick(stream_leader(&bus).await);
            stack.nats_kill(killed);
        }
        let started = std::time::Instant::now();
        let s = p
            .publish_round(&[frame("a", 100 + round), frame("b", 100 + round)])
            .await;
        stored.push(s.unwrap_or_else(|e| panic!("round {round}: {e}"))[0]);
        slowest = slowest.max((started.elapsed(), round));
    }
    let got = follower.await.unwrap();
    let blocks: Vec<u64> = got.iter().map(|g| g.2).collect();
    assert_eq!(blocks, (100..140).collect::<Vec<_>>());
    let stored_seqs: Vec<u64> = stored.iter().map(|s| s.seq).collect();
    let got_seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
    assert_eq!(got_seqs, stored_seqs);
    // Every frame stored once (a publish retried after a lost ack is a duplicate, not a copy).
    let info = bus
        .js
        .get_stream(&bus.config.stream)
        .await
        .unwrap()
        .get_info()
        .await
        .unwrap();
    assert_eq!(info.state.messages, 1 + 80, "the marker and 80 frames");
    let leader = stream_leader(&bus).await;
    eprintln!(
        "bus: node {killed} killed before round 10; slowest round {} took {:?}; leader now node {leader}",
        slowest.1, slowest.0
    );
    // The killed node comes back and the stream is whole.
    stack.run(&["up", "nats"]);
    assert_eq!(stream::last_seq(&bus).await.unwrap(), 81);
    (killed, leader)
}

#[tokio::test]
async fn bus_survives_the_kill_of_a_follower_node() {
    let stack = PrivateStack::start_nats();
    // A node that does not lead the stream.
    let (killed, leader) = publish_and_follow_through(&stack, |leader| leader % 3 + 1).await;
    assert_ne!(killed, leader);
}

#[tokio::test]
async fn bus_survives_the_kill_of_the_stream_leader() {
    let stack = PrivateStack::start_nats();
    let (killed, leader) = publish_and_follow_through(&stack, |leader| leader).await;
    assert_ne!(
        killed, leader,
        "another node leads the stream after the kill"
    );
}

#[tokio::test]
async fn bus_without_quorum_refuses_then_resumes_where_it_was() {
    let stack = PrivateStack::start_nats();
    let bus =
        bus_giving_up_after(stack.nats_urls(), &operator(&stack), Duration::from_secs(3)).await;
    let mut p = FencedPublisher::claim(bus.clone(), 1).await.expect("claim");
    let stored = p.publish_round(&[frame("a", 70)]).await.expect("publish");
    assert_eq!(seqs(&stored), [(2, false)]);
    let leader = stream_leader(&bus).await;
    stack.nats_kill(leader);
    stack.nats_kill(leader % 3 + 1);
    // Two of three nodes gone: nothing can be stored; the caller's cursor would wait.
    match p.publish_round(&[frame("a", 71), frame("a", 72)]).await {
        Err(BusError::Unavailable(_)) => {}
        other => panic!("a round without quorum: {other:?}"),
    }
    stack.run(&["up", "nats"]);
    // The same publisher, its guard unchanged, retries the round: stored once, in order.
    let stored = p
        .publish_round(&[frame("a", 71), frame("a", 72)])
        .await
        .expect("publish after the nodes came back");
    assert_eq!(stored.iter().map(|s| s.seq).collect::<Vec<_>>(), [3, 4]);
    let mut f = Follower::start(bus.clone(), "a", 0).unwrap();
    assert_eq!(next_frame(&mut f).await, (2, 0, 70));
    assert_eq!(next_frame(&mut f).await, (3, 2, 71));
    assert_eq!(next_frame(&mut f).await, (4, 3, 72));
}

/// A follower's two consumers are on two nodes, so the death of one costs no delivery even when
/// no consumer can be made meanwhile (as while the survivors elect a meta leader: 4–9 s). The
/// stream here takes 2 consumers at most: with one leg's consumer on the dead node (still
/// counted), the cluster refuses every new one, asserted below, and every frame must come
/// through the other leg.
#[tokio::test]
async fn bus_follower_goes_on_through_a_node_death_on_its_other_consumer() {
    let stack = PrivateStack::start_nats();
    let tag = format!("{:08x}", rand::random::<u32>());
    let mut config =
        signed(BusConfig::new(stack.nats_urls()).with_access(access(&operator(&stack))));
    config.stream = format!("PMW_T_{tag}");
    config.prefix = format!("pmwt{tag}");
    let bus = Bus::connect(config, "pmw-test").await.expect("connect");
    let mut two = stream::config(&bus);
    two.max_consumers = 2;
    bus.js.create_stream(two).await.expect("stream");
    let mut p = FencedPublisher::claim(bus.clone(), 1).await.expect("claim");
    p.publish_round(&[frame("a", 1)]).await.expect("publish");
    let mut f = Follower::start(bus.clone(), "a", 0).unwrap();
    assert_eq!(next_frame(&mut f).await, (2, 0, 1));

    // Both legs placed, on two nodes.
    let nodes = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let [Some(x), Some(y)] = f.nodes().as_slice() {
                break (x.clone(), y.clone());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("two legs within 60 s");
    assert_ne!(nodes.0, nodes.1, "the legs share a node");
    // Kill the node of the leg that is not on the stream's leader (the stream keeps taking
    // frames at once).
    let leader = stream_leader(&bus).await;
    let killed = [&nodes.0, &nodes.1]
        .into_iter()
        .map(|n| node_number(n))
        .find(|&n| n != leader)
        .expect("a leg off the leader");
    stack.nats_kill(killed);

    // No consumer can be made now (asked without a stream info first: the test's own
    // connection may have been to the dead node).
    let s = bus.js.get_stream_no_info(&bus.config.stream).await.unwrap();
    let made = tokio::time::timeout(
        Duration::from_secs(5),
        s.create_consumer(async_nats::jetstream::consumer::push::Config {
            deliver_subject: bus.client.new_inbox(),
            filter_subject: bus.config.frames_subject("a").unwrap(),
            inactive_threshold: Duration::from_secs(5),
            ..Default::default()
        }),
    )
    .await;
    match made {
        Ok(Ok(c)) => panic!("a consumer was made: {:?}", c.cached_info().name),
        Ok(Err(e)) => eprintln!("bus: node {killed} killed; a new consumer is refused: {e}"),
        Err(_) => eprintln!("bus: node {killed} killed; a new consumer is not answered"),
    }

    // Every frame published meanwhile comes through, once, in order, with no gap.
    let mut prev = 2;
    for block in 2..12u64 {
        let round = [frame("a", block), frame("b", block)];
        let seq = p.publish_round(&round).await.expect("publish")[0].seq;
        assert_eq!(next_frame(&mut f).await, (seq, prev, block));
        prev = seq;
    }
    // The node comes back; the follower goes on.
    stack.run(&["up", "nats"]);
    let seq = p.publish_round(&[frame("a", 12)]).await.expect("publish")[0].seq;
    assert_eq!(next_frame(&mut f).await, (seq, prev, 12));
}

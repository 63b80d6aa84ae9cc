//! The follower an edge reads the stream's frames with: two legs, each an ephemeral push
//! consumer on the frames subject (no acks, flow control, idle heartbeats) on a node of its
//! own, read together and de-duplicated by stream sequence; a leg is recreated from the chain's
//! next sequence whenever its broker goes quiet (its node died), a delivery went missing (the
//! consumer sequence jumped) or its subscription ended, while the other leg goes on delivering;
//! and the `Pmw-Prev` chain checked on every frame, so a frame that never arrives (lost, expired
//! past the resume window, deleted) comes out as a [`Gap`] for the edge to repair from the
//! ledger, never as a silent skip.
//!
//! Nothing is yielded as a frame unless it is signed ([`super::sign`]) by a verify key, bound
//! to its subject, id, epoch and `Pmw-Prev`, from an epoch no lower than the highest yielded,
//! and chained at or after the last frame yielded. Anything else (junk, a forgery, an unknown
//! key, a replay, a frame chained to a refused message) is [`Event::Refused`]: skipped, never
//! delivered, and it does not move the chain, so the leader's next frame (whose `Pmw-Prev` is
//! its own last frame) follows without a gap, and a forgery chained to look like the next frame
//! cannot displace the real one.
//!
//! A leader may store one frame twice: a duplicate answer it cannot confirm as its own frame
//! (the stored message does not verify, or is not where the answer says) makes it store the frame
//! again under a salted id ([`super::publish`]), and if the first copy was its own after all, the
//! stream holds both. The salted copy is chained where the first was, so it reads as a replay; it
//! is passed over (never yielded, not an alarm), and its sequence is an alias of the chain's end:
//! the leader's next frame, chained to either copy, follows without a gap. Without that, every
//! later frame chains to a refused message and is refused in turn, and the edges deliver nothing
//! more (the edge-mode checker once lost every WebSocket trade after a leader SIGSTOP overlapping
//! the stream leader's kill; the cause was not seen, this is one way to it). And whatever else
//! might break the chain so, a third leader frame in a row chained to a refused message comes out
//! as a [`Gap`] (the edge repairs from the ledger) and the chain goes on from it: a follower
//! never refuses a live leader's frames for good. Only frames chained at or after
//! the chain's end count (a replay of old frames is chained behind it).
//!
//! Why two: a consumer is R1 (on one node, placed at random among the stream's peers by the
//! cluster's meta leader), and making one needs that meta leader. When the node that dies hosts
//! both the consumer and the meta leader, no consumer can be made until the survivors elect a
//! new meta leader: 4–9 s on 2.9.10 (the edge-mode checker: a leader kill's recovery of 5–7 s
//! at the edges whose consumer was on a NATS node killed 3 s before). With a second leg on
//! another node, a node's death costs nothing but a leg to recreate in the background.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::consumer::{push, AckPolicy, DeliverPolicy};
use async_nats::{Message, StatusCode, Subscriber};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::sign::{Refusal, Signed, VerifyKeys};
use super::{stream, Bus, BusError, Frame, FrameId};
use pmw_core::backoff::{Backoff, Policy};

/// The broker's idle heartbeat to a leg; three missed ones and the leg's consumer is recreated.
/// Two heartbeats a second per leg cost nothing.
const HEARTBEAT: Duration = Duration::from_millis(500);
const SILENCE: Duration = Duration::from_millis(1_500);
/// Deliveries a leg may hold for the follower before it stops reading (then flow control
/// holds the broker back).
const QUEUE: usize = 1024;
/// Refused messages a follower remembers since its last frame (a frame chained to one of them
/// is misplaced).
const REFUSED_KEPT: usize = 1024;
/// Frames yielded a follower remembers (id and sequence) to tell a leader's second copy of one.
const YIELDED_KEPT: usize = 256;
/// Leader frames in a row chained to refused messages after which the chain is taken for
/// broken: the last of them comes out as a [`Gap`] (repaired from the ledger) and the chain
/// goes on from it.
const MISPLACED_REPAIR: u32 = 3;

/// What a follower yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The account's next frame: its `prev` is the last frame yielded.
    Frame(Frame),
    /// Frames are missing before `frame`: the account's frames stored after sequence `after`
    /// and before `frame.seq` never arrived (the last of them is `frame.prev`). Repair that
    /// range, then deliver `frame`; the follower goes on after it.
    Gap(Gap),
    /// A message on the subject that is not a leader's next frame: skipped (alarm it).
    Refused(Refused),
}

/// A message the follower refused and skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Its stream sequence (0: a delivery without one).
    pub seq: u64,
    pub reason: Refusal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    pub account: String,
    pub after: u64,
    pub frame: Frame,
}

/// Follows the stream's frames in stream order.
pub struct Follower {
    legs: Arc<Legs>,
    /// The sequence of the last frame yielded (the chain's end).
    last: u64,
    /// Whether `last` is a frame's sequence (a frame chained below it is a replay), not only
    /// where following began.
    anchored: bool,
    /// The sequence of the last message read, refused ones included.
    seen: u64,
    /// The highest epoch yielded.
    epoch: i64,
    /// The messages refused since the last frame yielded (at most [`REFUSED_KEPT`]).
    refused: Vec<u64>,
    /// The ids of the last frames yielded (at most [`YIELDED_KEPT`]).
    yielded: std::collections::VecDeque<String>,
    /// Second copies of yielded frames stored since the last frame yielded: a frame chained to
    /// one of them comes next as if chained to `last`.
    aliases: Vec<u64>,
    /// Leader frames refused in a row as misplaced since the last frame yielded.
    misplaced: u32,
    keys: VerifyKeys,
    rx: Option<mpsc::Receiver<Delivery>>,
    tasks: Vec<JoinHandle<()>>,
}

/// A leg's delivery: a frame's stream sequence, stored time (ns) and message, or a message the
/// follower cannot read.
type Delivery = Result<(u64, u64, Message), BusError>;

/// What the legs share.
struct Legs {
    bus: Bus,
    account: String,
    subject: String,
    /// Where a (re)created consumer starts: the chain's end + 1.
    from: AtomicU64,
    /// The node (server name) each leg's consumer is on, while it has one.
    nodes: Mutex<Vec<Option<String>>>,
}

impl Follower {
    /// Follow `account`'s frames stored after `after`: the sequence of the account's last frame
    /// the caller holds (0: from the stream's first). The legs start on the first [`next`].
    ///
    /// [`next`]: Follower::next
    pub fn start(bus: Bus, account: &str, after: u64) -> Result<Follower, BusError> {
        let mut f = Follower::after_seq(bus, account, after)?;
        f.anchored = true;
        Ok(f)
    }

    /// Follow `account`'s frames stored after the stream sequence `after`, which need not be
    /// one of its frames (the first frame yielded is then a [`Gap`] unless it chains to it).
    pub fn after_seq(bus: Bus, account: &str, after: u64) -> Result<Follower, BusError> {
        let subject = bus.config.frames_subject(account)?;
        let keys = bus.config.keys();
        // One leg per node the stream has, two at most.
        let legs = bus.config.replicas.clamp(1, 2);
        Ok(Follower {
            legs: Arc::new(Legs {
                bus,
                account: account.to_string(),
                subject,
                from: AtomicU64::new(after + 1),
                nodes: Mutex::new(vec![None; legs]),
            }),
            last: after,
            anchored: after == 0,
            seen: after,
            epoch: 0,
            refused: Vec::new(),
            yielded: std::collections::VecDeque::new(),
            aliases: Vec::new(),
            misplaced: 0,
            keys,
            rx: None,
            tasks: Vec::new(),
        })
    }

    /// Follow what is stored from now on: after the account's last stored frame.
    pub async fn live(bus: Bus, account: &str) -> Result<Follower, BusError> {
        let after = stream::last_frame_seq(&bus, account, &bus.config.keys()).await?;
        Follower::start(bus, account, after)
    }

    /// The sequence of the last frame yielded.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The node each leg's consumer is on (`None`: being made).
    pub fn nodes(&self) -> Vec<Option<String>> {
        self.legs.nodes.lock().expect("nodes").clone()
    }

    /// The next frame, or the gap before it. Waits for one; its legs reconnect and recreate
    /// their consumers as long as it takes (wrap it in a timeout to bound that).
    pub async fn next(&mut self) -> Result<Event, BusError> {
        if self.rx.is_none() {
            let (tx, rx) = mpsc::channel(QUEUE);
            let n = self.legs.nodes.lock().expect("nodes").len();
            self.tasks = (0..n)
                .map(|i| tokio::spawn(leg(self.legs.clone(), i, tx.clone())))
                .collect();
            self.rx = Some(rx);
        }
        loop {
            let rx = self.rx.as_mut().expect("started above");
            let Some(delivery) = rx.recv().await else {
                return Err(BusError::Unavailable(format!(
                    "follower of {}: every leg ended",
                    self.legs.account
                )));
            };
            let (sseq, stored_ns, msg) = match delivery {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(account = %self.legs.account, error = %e, "bus message refused");
                    return Ok(self.refused(0, Refusal::Malformed));
                }
            };
            // The other leg's copy of a message read already.
            if sseq <= self.seen {
                continue;
            }
            self.seen = sseq;
            self.legs.from.store(sseq + 1, Ordering::Relaxed);
            let mut frame = match self.check(sseq, &msg) {
                Ok(Checked::Next(frame)) => frame,
                Ok(Checked::Misplaced(frame, epoch)) => {
                    self.misplaced += 1;
                    if self.misplaced < MISPLACED_REPAIR {
                        return Ok(self.refused(sseq, Refusal::Misplaced));
                    }
                    // A leader that keeps chaining to what this follower refused will not come
                    // back to the chain: repair from here (a gap) rather than refuse every frame
                    // from now on.
                    tracing::warn!(account = %self.legs.account, seq = sseq, last = self.last, "bus chain broken: leader frames keep chaining to refused messages; repairing from here");
                    self.epoch = epoch;
                    frame
                }
                Ok(Checked::Copy(id)) => {
                    tracing::info!(account = %self.legs.account, seq = sseq, id, last = self.last, "bus frame stored again by its leader; either copy chains");
                    self.aliases.push(sseq);
                    continue;
                }
                Err(reason) => return Ok(self.refused(sseq, reason)),
            };
            frame.stored_ms = (stored_ns / 1_000_000) as i64;
            let id = frame.id.to_string();
            let event = if frame.prev == self.last || self.aliases.contains(&frame.prev) {
                Event::Frame(frame)
            } else {
                tracing::warn!(account = %self.legs.account, after = self.last, seq = sseq, prev = frame.prev, "bus gap");
                Event::Gap(Gap {
                    account: self.legs.account.clone(),
                    after: self.last,
                    frame,
                })
            };
            self.last = sseq;
            self.anchored = true;
            self.refused.clear();
            self.aliases.clear();
            self.misplaced = 0;
            if self.yielded.len() == YIELDED_KEPT {
                self.yielded.pop_front();
            }
            self.yielded.push_back(id);
            return Ok(event);
        }
    }

    /// The frame `msg` (stored at `seq`) carries, if a leader signed it and it comes next, or
    /// that it is a leader's second copy of a frame yielded already.
    fn check(&mut self, seq: u64, msg: &Message) -> Result<Checked, Refusal> {
        let h = msg.headers.as_ref();
        let signed = self.keys.verify(msg.subject.as_str(), h, &msg.payload)?;
        let frame = frame(seq, &signed, msg.payload.clone()).map_err(|_| Refusal::Malformed)?;
        if signed.epoch < self.epoch {
            return Err(Refusal::StaleEpoch);
        }
        if self.anchored && signed.prev < self.last {
            // A leader stores a frame again only under a salted id (`<id>~…`, see
            // [`frame`]); the same id again is a replay.
            let id = frame.id.to_string();
            if signed.msg_id.contains('~') && self.yielded.contains(&id) {
                return Ok(Checked::Copy(id));
            }
            return Err(Refusal::Replayed);
        }
        if self.refused.contains(&signed.prev) {
            return Ok(Checked::Misplaced(frame, signed.epoch));
        }
        self.epoch = signed.epoch;
        Ok(Checked::Next(frame))
    }

    /// A refusal, remembered and logged (the caller counts and alarms it).
    fn refused(&mut self, seq: u64, reason: Refusal) -> Event {
        if seq > 0 {
            if self.refused.len() == REFUSED_KEPT {
                self.refused.remove(0);
            }
            self.refused.push(seq);
        }
        tracing::warn!(account = %self.legs.account, seq, %reason, last = self.last, "bus message refused");
        Event::Refused(Refused { seq, reason })
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// What [`Follower::check`] finds a signed message to be.
enum Checked {
    /// The next frame (or the one after a gap).
    Next(Frame),
    /// A second copy of the frame with this id, yielded already.
    Copy(String),
    /// A leader's frame (of this epoch) chained to a refused message.
    Misplaced(Frame, i64),
}

/// Leg `i`: a consumer on a node no other leg is on, read until it fails, then another, until
/// the follower is dropped. Every consumer starts at the chain's end + 1 and delivers the
/// account's frames from there in order, each once (it is restarted at the first missing
/// delivery), so each leg's deliveries are a gapless run the follower can merge with the
/// other's by sequence alone.
async fn leg(legs: Arc<Legs>, i: usize, tx: mpsc::Sender<Delivery>) {
    let mut backoff = Backoff::new(Policy::STORE);
    loop {
        let mut consumer = match legs.subscribe(i).await {
            Ok(Some(c)) => c,
            // Placed beside the other leg (chance: one in the stream's replicas): made again.
            Ok(None) => {
                let wait = backoff.next_wait();
                tracing::debug!(account = %legs.account, leg = i, wait_ms = wait.as_millis() as u64, "bus consumer placed beside the other leg; again");
                tokio::time::sleep(wait).await;
                continue;
            }
            Err(e) => {
                let wait = backoff.next_wait();
                tracing::warn!(account = %legs.account, leg = i, error = %e, wait_ms = wait.as_millis() as u64, "bus follow failed");
                tokio::time::sleep(wait).await;
                continue;
            }
        };
        backoff.reset();
        let why = consumer.read(&legs, &tx).await;
        legs.nodes.lock().expect("nodes")[i] = None;
        match why {
            Some(why) => {
                tracing::info!(account = %legs.account, leg = i, node = consumer.node.as_deref().unwrap_or("?"), why, "bus follow restart");
            }
            // The follower is gone.
            None => return,
        }
    }
}

/// One leg's current consumer.
struct Consumer {
    sub: Subscriber,
    node: Option<String>,
    /// The consumer sequence of its last delivery.
    delivered: u64,
}

impl Legs {
    /// A consumer for leg `i` from the chain's end + 1, delivering to a fresh inbox, on a node
    /// no other leg is on (`None`: it was placed beside another leg, and is deleted).
    async fn subscribe(&self, i: usize) -> Result<Option<Consumer>, BusError> {
        let inbox = self.bus.client.new_inbox();
        let sub = self
            .bus
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| BusError::Unavailable(format!("subscribe: {e}")))?;
        let stream = self
            .bus
            .api(
                "stream",
                self.bus.js.get_stream_no_info(&self.bus.config.stream),
            )
            .await?;
        let from = self.from.load(Ordering::Relaxed);
        // Bounded ([`BusConfig::api_timeout`]): a create sent as a node dies can wait the
        // client's whole 10 s request timeout, and one placed on a node that is dead but not
        // yet known to be is never answered. A create that is only slow leaves an ephemeral
        // consumer the broker deletes after `inactive_threshold`; the next try makes another.
        //
        // [`BusConfig::api_timeout`]: super::BusConfig::api_timeout
        let create = stream.create_consumer(push::Config {
            deliver_subject: inbox,
            filter_subject: self.subject.clone(),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: from,
            },
            ack_policy: AckPolicy::None,
            max_deliver: 1,
            flow_control: true,
            idle_heartbeat: HEARTBEAT,
            memory_storage: true,
            num_replicas: 1,
            inactive_threshold: Duration::from_secs(5),
            ..Default::default()
        });
        let made = self.bus.api("consumer", create).await?;
        let info = made.cached_info();
        let node = info.cluster.as_ref().and_then(|c| c.leader.clone());
        {
            let mut nodes = self.nodes.lock().expect("nodes");
            let taken =
                node.is_some() && nodes.iter().enumerate().any(|(j, n)| j != i && *n == node);
            if !taken {
                nodes[i] = node.clone();
                tracing::debug!(account = %self.account, leg = i, from, node = node.as_deref().unwrap_or("?"), "bus following");
                return Ok(Some(Consumer {
                    sub,
                    node,
                    delivered: 0,
                }));
            }
        }
        // Placed beside another leg: no use if that node dies. Gone now rather than after its
        // inactivity (it would count against the stream's consumers meanwhile).
        let name = info.name.clone();
        drop(sub);
        if let Err(e) = self
            .bus
            .api("consumer delete", stream.delete_consumer(&name))
            .await
        {
            tracing::debug!(account = %self.account, leg = i, error = %e, "bus consumer delete");
        }
        Ok(None)
    }
}

impl Consumer {
    /// Forward the consumer's frames to the follower until it fails (why) or the follower is
    /// gone (`None`).
    async fn read(&mut self, legs: &Legs, tx: &mpsc::Sender<Delivery>) -> Option<String> {
        loop {
            let msg = match tokio::time::timeout(SILENCE, self.sub.next()).await {
                Ok(Some(msg)) => msg,
                Ok(None) => return Some("subscription ended".into()),
                Err(_) => return Some("broker silent".into()),
            };
            if let Some(status) = msg.status {
                if status != StatusCode::IDLE_HEARTBEAT {
                    return Some(format!("status {status}"));
                }
                if let Some(why) = self.control(legs, &msg).await {
                    return Some(why);
                }
                continue;
            }
            let delivery = match msg.reply.as_deref().and_then(ack_sequences) {
                Some((sseq, cseq, stored_ns)) => {
                    if cseq != self.delivered + 1 {
                        return Some(format!("delivery {cseq} after {}", self.delivered));
                    }
                    self.delivered = cseq;
                    Ok((sseq, stored_ns, msg))
                }
                None => Err(BusError::Invalid(format!(
                    "delivery on {} without JetStream metadata",
                    msg.subject
                ))),
            };
            if tx.send(delivery).await.is_err() {
                return None;
            }
        }
    }

    /// A status-100 message: flow control (reply to it), or a heartbeat that tells the last
    /// consumer sequence sent (restart if one did not arrive: why) and may name a stalled flow
    /// control to answer.
    async fn control(&mut self, legs: &Legs, msg: &Message) -> Option<String> {
        let mut answer = msg.reply.as_ref().map(|r| r.to_string());
        if let Some(h) = msg.headers.as_ref() {
            if let Some(fc) = h.get("Nats-Consumer-Stalled") {
                answer = Some(fc.as_str().to_string());
            }
            if let Some(sent) = h.get(async_nats::header::NATS_LAST_CONSUMER) {
                if sent.as_str().parse::<u64>().ok() != Some(self.delivered) {
                    return Some(format!("heartbeat says {} sent", sent.as_str()));
                }
            }
        }
        if let Some(subject) = answer {
            if let Err(e) = legs.bus.client.publish(subject, bytes::Bytes::new()).await {
                tracing::warn!(account = %legs.account, error = %e, "bus flow control");
            }
        }
        None
    }
}
/// A received frame from its stream sequence, what its signature vouches for and its body. A
/// salted id (`<frame id>~<salt>`: stored again because another message took the frame's id)
/// names the frame before its `~`.
fn frame(seq: u64, signed: &Signed, body: bytes::Bytes) -> Result<Frame, BusError> {
    let id = signed.msg_id.split('~').next().unwrap_or_default();
    let id: FrameId = id.parse()?;
    Ok(Frame {
        seq,
        stored_ms: 0,
        prev: signed.prev,
        epoch: signed.epoch,
        id,
        body,
    })
}

/// (stream sequence, consumer sequence, stored time in ns since the epoch) from a delivery's ack
/// subject: 2.9's
/// `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>`, or
/// the longer form of later servers with domain and account hash after `ACK` and a token after.
fn ack_sequences(reply: &str) -> Option<(u64, u64, u64)> {
    let t: Vec<&str> = reply.split('.').collect();
    if t.len() < 9 || t[0] != "$JS" || t[1] != "ACK" {
        return None;
    }
    let at = if t.len() == 9 { 5 } else { 7 };
    let n = |i: usize| t.get(at + i)?.parse().ok();
    Some((n(0)?, n(1)?, n(2)?))
}

#[cfg(test)]
mod tests {
    use super::ack_sequences;

    #[test]
    fn sequences_are_read_from_the_ack_subject() {
        assert_eq!(
            ack_sequences("$JS.ACK.PMW_FRAMES.abc.1.42.7.1700000000000000000.0"),
            Some((42, 7, 1_700_000_000_000_000_000))
        );
        assert_eq!(
            ack_sequences("$JS.ACK.dom.acchash.PMW_FRAMES.abc.1.42.7.1700000000000000001.0.tok"),
            Some((42, 7, 1_700_000_000_000_000_001))
        );
        assert_eq!(ack_sequences("_INBOX.x"), None);
        assert_eq!(ack_sequences("$JS.ACK.S.C.1.x.7.1.0"), None);
    }
}

//! The fenced publisher a push leader stores its rounds' frames with. Every publish carries the
//! stream-level expected-last-sequence guard (`Nats-Expected-Last-Sequence`: the sequence this
//! publisher last stored) and a stable message id (`Nats-Msg-Id`: the frame id). So:
//! - a leader claims the stream for its epoch ([`FencedPublisher::claim`]) by storing an epoch
//!   marker on top of the last sequence it read; from then on any other publisher's guard is
//!   stale, and a deposed leader's next publish is refused ([`BusError::Fenced`]);
//! - a successor's republish of frames its predecessor stored is a duplicate (JetStream checks
//!   the message id before the guard, and answers with the original sequence), stored once;
//! - [`FencedPublisher::publish_round`] returns only once the broker stored every frame, in
//!   order: the caller moves its fenced cursor only after that. A round's frames are sent
//!   pipelined, each also guarded by the id of the one before it (`Nats-Expected-Last-Msg-Id`),
//!   so one round costs about one broker round trip, not one per frame.
//!
//! Each frame also carries `Pmw-Prev`, the sequence of the account's previous frame, the chain
//! a follower checks. The per-subject guard (`Nats-Expected-Last-Subject-Sequence`) is not used:
//! it has replica bugs on 2.9.10.
//!
//! Every message is signed ([`super::sign`]: `Pmw-Key-Id`, `Pmw-Sig`), and what others stored
//! counts only when signed:
//! - the claim is ordered by epoch: a claimant whose epoch is below the stream's latest signed
//!   epoch marker is [`BusError::Superseded`] and stores nothing;
//! - a guard refused because the stream moved is [`BusError::Fenced`] only when a newer epoch
//!   signed a marker since; messages nobody newer signed (junk, forgeries: only possible with
//!   an unlocked broker or a leaked publish credential) are alarmed and claimed over;
//! - a duplicate ack at sequence 0 (nats-server 2.9.10's answer while the first try of the id
//!   is still being replicated) is asked again, never taken for where the frame is;
//! - a duplicate ack whose stored message this publisher's keys do not verify (someone stored
//!   junk under the frame's predictable id first) is alarmed and the frame stored again under
//!   a salted id (`<frame id>~<epoch>.<seq>`), so the part is never lost.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use bytes::Bytes;
use tokio::time::Instant;

use super::frame::{EPOCH, PREV};
use super::sign::{Bound, Signed, SigningKey, VerifyKeys, KEY_ID, SIG};
use super::{stream, Bus, BusError, OutFrame};
use pmw_core::backoff::{Backoff, Policy};

/// Where the broker stored one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub seq: u64,
    /// Already stored under this message id (a republish): `seq` is the original's.
    pub duplicate: bool,
}

/// The only publisher that can store frames while its epoch's claim is the stream's latest.
pub struct FencedPublisher {
    bus: Bus,
    epoch: i64,
    /// The stream's last sequence as this publisher stored or found it: the guard of its next
    /// publish.
    last: u64,
    /// Per account: the sequence of its last frame (the next frame's `Pmw-Prev`).
    prev: HashMap<String, u64>,
    signer: SigningKey,
    /// What it accepts as signed by a leader: the verify keys and its own.
    keys: VerifyKeys,
}

/// One message to store: subject, id, headers, body.
struct Outgoing<'a> {
    subject: &'a str,
    id: &'a str,
    prev: Option<u64>,
    body: Bytes,
}

impl FencedPublisher {
    /// Claim the stream for `epoch`: read its last sequence and store the epoch's marker on top
    /// of it with the guard. Call it only while holding the leader lock of that epoch (the
    /// lock is what makes the claimant the rightful one; the marker is what fences the others
    /// out of the stream). A publish that raced in between makes the claim read again.
    pub async fn claim(bus: Bus, epoch: i64) -> Result<FencedPublisher, BusError> {
        let signer = bus.config.signer.clone().ok_or_else(|| {
            BusError::Invalid("no signing key (PMW_BUS_SIGNING_KEY): frames must be signed".into())
        })?;
        let keys = bus.config.keys();
        let deadline = Instant::now() + bus.config.give_up;
        let subject = bus.config.epoch_subject();
        let id = format!("epoch:{epoch}");
        let mut backoff = Backoff::new(Policy::STORE);
        loop {
            let newest = newest_epoch(&bus, &keys).await;
            match newest {
                Ok(Some(theirs)) if theirs > epoch => {
                    tracing::error!(
                        epoch,
                        theirs,
                        "bus claim refused: a newer epoch holds the stream"
                    );
                    return Err(BusError::Superseded {
                        ours: epoch,
                        theirs,
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    wait_or_give_up(&mut backoff, deadline, &e).await?;
                    continue;
                }
            }
            let last = match stream::last_seq(&bus).await {
                Ok(last) => last,
                Err(e) => {
                    wait_or_give_up(&mut backoff, deadline, &e).await?;
                    continue;
                }
            };
            let mut p = FencedPublisher {
                bus: bus.clone(),
                epoch,
                last,
                prev: HashMap::new(),
                signer: signer.clone(),
                keys: keys.clone(),
            };
            let marker = Outgoing {
                subject: &subject,
                id: &id,
                prev: None,
                body: Bytes::from(epoch.to_string()),
            };
            let stored = match p.store(&marker, deadline).await {
                Ok(s) => p.confirm(&marker, s, deadline).await,
                Err(e) => Err(e),
            };
            match stored {
                Ok(s) => {
                    tracing::info!(epoch, seq = s.seq, dup = s.duplicate, "bus claimed");
                    return Ok(p);
                }
                Err(BusError::Fenced { actual, .. }) => {
                    tracing::info!(epoch, last, actual, "bus claim raced, reading again");
                    wait_or_give_up(&mut backoff, deadline, &"claim raced").await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// The stream's last sequence as this publisher knows it.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Store a round's frames in order; returns once the broker stored each (or had it already:
    /// a duplicate). [`BusError::Fenced`] when another leader published since this one's claim
    /// or last publish (this publisher is done), [`BusError::Unavailable`] when the broker did
    /// not store a frame within `give_up` (retry the round: what was stored is de-duplicated).
    pub async fn publish_round(&mut self, frames: &[OutFrame]) -> Result<Vec<Stored>, BusError> {
        let deadline = Instant::now() + self.bus.config.give_up;
        for f in frames {
            f.id.validate()?;
            self.prev_of(&f.id.account, deadline).await?;
        }
        let mut stored = if frames.len() > 1 {
            self.pipelined(frames).await?
        } else {
            Vec::with_capacity(1)
        };
        // What the pipeline did not store (a duplicate broke its chain, a broker hiccup), one
        // by one; a frame it did store after all comes back as a duplicate.
        for f in &frames[stored.len()..] {
            let subject = self.bus.config.frames_subject(&f.id.account)?;
            let id = f.id.to_string();
            let out = Outgoing {
                subject: &subject,
                id: &id,
                prev: Some(self.prev[&f.id.account]),
                body: f.body.clone(),
            };
            let s = self.store(&out, deadline).await?;
            let s = self.confirm(&out, s, deadline).await?;
            self.stored(&f.id.account, s.seq);
            stored.push(s);
        }
        Ok(stored)
    }

    /// Send every frame of the round without waiting, frame k guarded by the sequence it
    /// should follow (`last + k`) and, past the first, by the id of the frame before it
    /// (`Nats-Expected-Last-Msg-Id`): it lands only right after this publisher's frame k-1, so
    /// the fence is the sequential one's (a deposed leader's chain breaks at its first refused
    /// frame). Returns the prefix stored as predicted; the caller stores the rest one by one.
    async fn pipelined(&mut self, frames: &[OutFrame]) -> Result<Vec<Stored>, BusError> {
        let base = self.last;
        let mut prev: HashMap<&str, u64> = HashMap::new();
        let mut acks = Vec::with_capacity(frames.len());
        let mut before: Option<String> = None;
        for (k, f) in frames.iter().enumerate() {
            let account = f.id.account.as_str();
            let p = *prev.entry(account).or_insert(self.prev[account]);
            let id = f.id.to_string();
            let subject = self.bus.config.frames_subject(account)?;
            let out = Outgoing {
                subject: &subject,
                id: &id,
                prev: Some(p),
                body: f.body.clone(),
            };
            let mut msg = self.message(&out).expected_last_sequence(base + k as u64);
            if let Some(b) = &before {
                msg = msg.expected_last_message_id(b);
            }
            match self.bus.js.send_publish(subject, msg).await {
                Ok(ack) => acks.push(ack),
                Err(_) => break,
            }
            prev.insert(account, base + k as u64 + 1);
            before = Some(id);
        }
        let mut stored = Vec::with_capacity(frames.len());
        for (k, ack) in acks.into_iter().enumerate() {
            let Ok(ack) = ack.await else { break };
            let s = Stored {
                seq: ack.sequence,
                duplicate: ack.duplicate,
            };
            self.last = self.last.max(s.seq);
            if s.duplicate {
                // Stored one by one, where a duplicate is confirmed to be a leader's.
                break;
            }
            self.stored(&frames[k].id.account, s.seq);
            stored.push(s);
            if s.seq != base + k as u64 + 1 {
                // The frames after it were chained to a frame not stored now.
                break;
            }
        }
        Ok(stored)
    }

    /// Remember the sequence of the account's latest frame.
    fn stored(&mut self, account: &str, seq: u64) {
        let p = self.prev.entry(account.to_string()).or_default();
        *p = (*p).max(seq);
    }

    /// The sequence of the account's last frame: remembered, or read once per claim (nobody
    /// else can store frames while this publisher's guard holds, so it stays right).
    async fn prev_of(&mut self, account: &str, deadline: Instant) -> Result<u64, BusError> {
        if let Some(p) = self.prev.get(account) {
            return Ok(*p);
        }
        let mut backoff = Backoff::new(Policy::STORE);
        let p = loop {
            match stream::last_frame_seq(&self.bus, account, &self.keys).await {
                Ok(p) => break p,
                Err(e @ BusError::Invalid(_)) => return Err(e),
                Err(e) => wait_or_give_up(&mut backoff, deadline, &e).await?,
            }
        };
        self.prev.insert(account.to_string(), p);
        Ok(p)
    }

    /// Store one message with the guard, retrying what may not have landed (a retry of one
    /// that did is a duplicate) until `deadline`.
    async fn store(&mut self, out: &Outgoing<'_>, deadline: Instant) -> Result<Stored, BusError> {
        let mut backoff = Backoff::new(Policy::STORE);
        loop {
            let msg = self.message(out).expected_last_sequence(self.last);
            let sent = self.bus.js.send_publish(out.subject.to_string(), msg).await;
            let acked = match sent {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            match acked {
                // nats-server 2.9.10 answers a message id whose first try is still being
                // replicated with "duplicate" at sequence 0 (later servers with an error): not
                // where it is stored, so ask again until the first try lands (then it is a
                // duplicate with its sequence) or is lost (then this one is stored).
                Ok(ack) if ack.duplicate && ack.sequence == 0 => {
                    wait_or_give_up(
                        &mut backoff,
                        deadline,
                        &"a duplicate of a try still in flight",
                    )
                    .await?;
                }
                Ok(ack) => {
                    // A duplicate of this publisher's own earlier try moved the stream too.
                    self.last = self.last.max(ack.sequence);
                    return Ok(Stored {
                        seq: ack.sequence,
                        duplicate: ack.duplicate,
                    });
                }
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                    let actual = wrong_last_seq(&e.to_string());
                    self.moved(actual).await?;
                    if Instant::now() > deadline {
                        return Err(BusError::Unavailable("the stream keeps moving".into()));
                    }
                }
                Err(e) => wait_or_give_up(&mut backoff, deadline, &e).await?,
            }
        }
    }
}

impl FencedPublisher {
    /// One message as stored: id, epoch, `Pmw-Prev` (frames) and signature headers.
    fn message(&self, out: &Outgoing<'_>) -> PublishMessage {
        let prev = out.prev.unwrap_or(0);
        let bound = Bound {
            epoch: self.epoch,
            subject: out.subject,
            msg_id: out.id,
            prev,
        };
        let sig = self.signer.sign(&bound, &out.body);
        let mut msg = PublishMessage::build()
            .payload(out.body.clone())
            .message_id(out.id)
            .header(EPOCH, self.epoch.to_string().as_str())
            .header(KEY_ID, self.signer.id())
            .header(SIG, sig.as_str());
        if out.prev.is_some() {
            msg = msg.header(PREV, prev.to_string().as_str());
        }
        msg
    }

    /// The stream moved past this publisher's guard (to `actual`, 0: unknown): deposed
    /// ([`BusError::Fenced`]) when a newer epoch signed a marker since; otherwise what moved it
    /// is no leader's (junk or forgeries), alarmed, and the guard moves on to claim over it.
    async fn moved(&mut self, actual: u64) -> Result<(), BusError> {
        let newest = newest_epoch(&self.bus, &self.keys).await?;
        if newest.is_some_and(|theirs| theirs > self.epoch) {
            tracing::warn!(
                epoch = self.epoch,
                expected = self.last,
                actual,
                newest,
                "bus fenced"
            );
            return Err(BusError::Fenced {
                expected: self.last,
                actual,
            });
        }
        let actual = match actual {
            0 => stream::last_seq(&self.bus).await?,
            n => n,
        };
        metrics::counter!(stream::REFUSED_TOTAL, "reason" => "fence").increment(1);
        tracing::warn!(
            epoch = self.epoch,
            expected = self.last,
            actual,
            "bus moved by messages no newer leader signed; claiming over them"
        );
        self.last = self.last.max(actual);
        Ok(())
    }

    /// A duplicate ack is a leader's frame stored before (this publisher's earlier try, or a
    /// predecessor's) only if the stored message verifies under the same id and is chained to a
    /// leader's frame (or none); otherwise someone took the frame's predictable id first (or
    /// the frame was pipelined behind such a message, its `Pmw-Prev` the impostor's: followers
    /// refuse it as misplaced): alarmed, and stored again under a salted id.
    async fn confirm(
        &mut self,
        out: &Outgoing<'_>,
        s: Stored,
        deadline: Instant,
    ) -> Result<Stored, BusError> {
        if !s.duplicate {
            return Ok(s);
        }
        let prev = match self.leaders(out.subject, s.seq).await? {
            Some(v) if v.msg_id == out.id => Some(v.prev),
            _ => None,
        };
        let ours = match prev {
            Some(0) => true,
            Some(prev) => self.leaders(out.subject, prev).await?.is_some(),
            None => false,
        };
        if ours {
            return Ok(s);
        }
        metrics::counter!(stream::REFUSED_TOTAL, "reason" => "prepublished").increment(1);
        let salted = format!("{}~{}.{}", out.id, self.epoch, s.seq);
        tracing::warn!(epoch = self.epoch, id = out.id, seq = s.seq, %salted, "bus frame id taken by a message no leader signed; storing it again under a salted id");
        let again = Outgoing {
            id: &salted,
            body: out.body.clone(),
            ..*out
        };
        self.store(&again, deadline).await
    }
}

impl FencedPublisher {
    /// What the message at `seq` says of itself if it is on `subject` and a leader signed it.
    async fn leaders(&self, subject: &str, seq: u64) -> Result<Option<Signed>, BusError> {
        let m = stream::message(&self.bus, seq).await?;
        Ok(m.filter(|m| m.subject.as_str() == subject)
            .and_then(|m| self.keys.verify(subject, Some(&m.headers), &m.payload).ok()))
    }
}

/// The epoch of the stream's latest signed epoch marker (`None`: none).
async fn newest_epoch(bus: &Bus, keys: &VerifyKeys) -> Result<Option<i64>, BusError> {
    let marker = stream::last_signed(bus, &bus.config.epoch_subject(), keys).await?;
    Ok(marker.map(|(_, signed)| signed.epoch))
}

/// Sleep the policy's next wait, or report the broker unavailable if that passes `deadline`.
async fn wait_or_give_up(
    backoff: &mut Backoff,
    deadline: Instant,
    error: &(dyn std::fmt::Display + Sync),
) -> Result<(), BusError> {
    let wait: Duration = backoff.next_wait();
    if Instant::now() + wait > deadline {
        tracing::warn!(error = %error, tries = backoff.failures(), "bus gave up");
        return Err(BusError::Unavailable(error.to_string()));
    }
    tracing::debug!(error = %error, wait_ms = wait.as_millis() as u64, "bus retry");
    tokio::time::sleep(wait).await;
    Ok(())
}

/// The stream's actual last sequence from the broker's error, displayed by the client as
/// "wrong last sequence: wrong last sequence: N (code 400, error code 10071)" (0 if absent).
fn wrong_last_seq(error: &str) -> u64 {
    let Some(i) = error.rfind("sequence: ") else {
        return 0;
    };
    let digits: String = error[i + "sequence: ".len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::wrong_last_seq;

    #[test]
    fn the_actual_sequence_is_read_from_the_broker_error() {
        assert_eq!(
            wrong_last_seq(
                "wrong last sequence: wrong last sequence: 42 (code 400, error code 10071)"
            ),
            42
        );
        assert_eq!(wrong_last_seq("wrong last sequence: 42"), 42);
        assert_eq!(wrong_last_seq("wrong last sequence"), 0);
    }
}

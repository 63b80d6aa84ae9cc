//! The follower an edge reads one account's frames with: an ephemeral push consumer on the
//! account's subject from a stream sequence (no acks, flow control, idle heartbeats), recreated
//! from the next sequence whenever the broker goes quiet (a node died), a delivery went missing
//! (the consumer sequence jumped) or the subscription ended; and the `Pmw-Prev` chain checked on
//! every frame, so a frame that never arrives (lost, expired past the resume window, deleted)
//! comes out as a [`Gap`] for the edge to repair from the ledger, never as a silent skip.

use std::time::Duration;

use async_nats::jetstream::consumer::{push, AckPolicy, DeliverPolicy};
use async_nats::{HeaderMap, Message, StatusCode, Subscriber};
use futures::StreamExt;

use super::frame::{header_u64, msg_id, EPOCH, PREV};
use super::{stream, Bus, BusError, Frame, FrameId};
use crate::backoff::{Backoff, Policy};

/// The broker's idle heartbeat to a follower; three missed ones and the consumer is recreated.
/// The consumer is R1 (on one node): when that node dies, this silence is what the edge's feed
/// waits before it follows again from a consumer on a live node (the checker's NATS node kill:
/// 3–6 s of recovery with 1 s heartbeats, over its 3 s budget). Two heartbeats a second per
/// follower cost nothing.
const HEARTBEAT: Duration = Duration::from_millis(500);
const SILENCE: Duration = Duration::from_millis(1_500);

/// What a follower yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The account's next frame: its `prev` is the last frame yielded.
    Frame(Frame),
    /// Frames are missing before `frame`: the account's frames stored after sequence `after`
    /// and before `frame.seq` never arrived (the last of them is `frame.prev`). Repair that
    /// range, then deliver `frame`; the follower goes on after it.
    Gap(Gap),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    pub account: String,
    pub after: u64,
    pub frame: Frame,
}

/// Follows one account's frames in stream order.
pub struct Follower {
    bus: Bus,
    account: String,
    subject: String,
    /// The sequence of the last frame yielded (the chain's end).
    last: u64,
    /// The stream sequence a recreated consumer starts at.
    resume: u64,
    /// The consumer sequence of the last delivery of the current consumer.
    delivered: u64,
    sub: Option<Subscriber>,
    backoff: Backoff,
}

impl Follower {
    /// Follow `account`'s frames stored after `after`: the sequence of the account's last frame
    /// the caller holds (0: from the stream's first).
    pub fn start(bus: Bus, account: &str, after: u64) -> Result<Follower, BusError> {
        let subject = bus.config.frames_subject(account)?;
        Ok(Follower {
            bus,
            account: account.to_string(),
            subject,
            last: after,
            resume: after + 1,
            delivered: 0,
            sub: None,
            backoff: Backoff::new(Policy::STORE),
        })
    }

    /// Follow what is stored from now on: after the account's last stored frame.
    pub async fn live(bus: Bus, account: &str) -> Result<Follower, BusError> {
        let after = stream::last_frame_seq(&bus, account).await?;
        Follower::start(bus, account, after)
    }

    /// The sequence of the last frame yielded.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The next frame, or the gap before it. Waits for one; reconnects and recreates its
    /// consumer as long as it takes (wrap it in a timeout to bound that).
    pub async fn next(&mut self) -> Result<Event, BusError> {
        loop {
            if self.sub.is_none() {
                if let Err(e) = self.subscribe().await {
                    let wait = self.backoff.next_wait();
                    tracing::warn!(account = %self.account, error = %e, wait_ms = wait.as_millis() as u64, "bus follow failed");
                    tokio::time::sleep(wait).await;
                    continue;
                }
            }
            let sub = self.sub.as_mut().expect("subscribed above");
            let msg = match tokio::time::timeout(SILENCE, sub.next()).await {
                Ok(Some(msg)) => msg,
                Ok(None) => {
                    self.restart("subscription ended");
                    continue;
                }
                Err(_) => {
                    self.restart("broker silent");
                    continue;
                }
            };
            if let Some(event) = self.handle(msg).await? {
                self.backoff.reset();
                return Ok(event);
            }
        }
    }

    /// A consumer from `resume` on the account's subject, delivering to a fresh inbox.
    async fn subscribe(&mut self) -> Result<(), BusError> {
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
        // Bounded ([`BusConfig::api_timeout`]): a create sent as a node dies can wait the
        // client's whole 10 s request timeout (the edge-mode checker: 10 s of a dark feed after
        // a NATS node kill). A create that is only slow leaves an ephemeral consumer the broker
        // deletes after `inactive_threshold`; the next try makes another.
        let create = stream.create_consumer(push::Config {
            deliver_subject: inbox,
            filter_subject: self.subject.clone(),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: self.resume,
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
        self.bus.api("consumer", create).await?;
        tracing::debug!(account = %self.account, from = self.resume, "bus following");
        self.sub = Some(sub);
        self.delivered = 0;
        Ok(())
    }

    /// Drop the consumer; the next call makes a new one from `resume`.
    fn restart(&mut self, why: &str) {
        tracing::info!(account = %self.account, from = self.resume, why, "bus follow restart");
        self.sub = None;
    }

    /// One delivery: a heartbeat or flow control (answered, checked), or a frame (checked
    /// against the consumer sequence and the chain).
    async fn handle(&mut self, msg: Message) -> Result<Option<Event>, BusError> {
        if let Some(status) = msg.status {
            if status == StatusCode::IDLE_HEARTBEAT {
                self.control(&msg).await;
            } else {
                self.restart(&format!("status {status}"));
            }
            return Ok(None);
        }
        let Some((sseq, cseq)) = msg.reply.as_deref().and_then(ack_sequences) else {
            return Err(BusError::Invalid(format!(
                "delivery on {} without JetStream metadata",
                msg.subject
            )));
        };
        if cseq != self.delivered + 1 {
            self.restart(&format!("delivery {cseq} after {}", self.delivered));
            return Ok(None);
        }
        self.delivered = cseq;
        self.resume = sseq + 1;
        if sseq <= self.last {
            return Ok(None);
        }
        let frame = frame(sseq, msg.headers.as_ref(), msg.payload)?;
        let event = if frame.prev == self.last {
            Event::Frame(frame)
        } else {
            tracing::warn!(account = %self.account, after = self.last, seq = sseq, prev = frame.prev, "bus gap");
            Event::Gap(Gap {
                account: self.account.clone(),
                after: self.last,
                frame,
            })
        };
        self.last = sseq;
        Ok(Some(event))
    }

    /// A status-100 message: flow control (reply to it), or a heartbeat that tells the last
    /// consumer sequence sent (restart if one did not arrive) and may name a stalled flow
    /// control to answer.
    async fn control(&mut self, msg: &Message) {
        let mut answer = msg.reply.as_ref().map(|r| r.to_string());
        if let Some(h) = msg.headers.as_ref() {
            if let Some(fc) = h.get("Nats-Consumer-Stalled") {
                answer = Some(fc.as_str().to_string());
            }
            if let Some(sent) = h.get(async_nats::header::NATS_LAST_CONSUMER) {
                if sent.as_str().parse::<u64>().ok() != Some(self.delivered) {
                    self.restart(&format!("heartbeat says {} sent", sent.as_str()));
                    return;
                }
            }
        }
        if let Some(subject) = answer {
            if let Err(e) = self.bus.client.publish(subject, bytes::Bytes::new()).await {
                tracing::warn!(account = %self.account, error = %e, "bus flow control");
            }
        }
    }
}

/// A received frame from its stream sequence, headers and body.
fn frame(seq: u64, h: Option<&HeaderMap>, body: bytes::Bytes) -> Result<Frame, BusError> {
    let id: FrameId = msg_id(h)
        .ok_or_else(|| BusError::Invalid(format!("frame {seq} has no message id")))?
        .parse()?;
    Ok(Frame {
        seq,
        prev: header_u64(h, PREV)?,
        epoch: header_u64(h, EPOCH)? as i64,
        id,
        body,
    })
}

/// (stream sequence, consumer sequence) from a delivery's ack subject: 2.9's
/// `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>`, or
/// the longer form of later servers with domain and account hash after `ACK` and a token after.
fn ack_sequences(reply: &str) -> Option<(u64, u64)> {
    let t: Vec<&str> = reply.split('.').collect();
    if t.len() < 9 || t[0] != "$JS" || t[1] != "ACK" {
        return None;
    }
    let (s, c) = if t.len() == 9 { (5, 6) } else { (7, 8) };
    Some((t.get(s)?.parse().ok()?, t.get(c)?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::ack_sequences;

    #[test]
    fn sequences_are_read_from_the_ack_subject() {
        assert_eq!(
            ack_sequences("$JS.ACK.PMW_FRAMES.abc.1.42.7.1700000000000000000.0"),
            Some((42, 7))
        );
        assert_eq!(
            ack_sequences("$JS.ACK.dom.acchash.PMW_FRAMES.abc.1.42.7.1700000000000000000.0.tok"),
            Some((42, 7))
        );
        assert_eq!(ack_sequences("_INBOX.x"), None);
        assert_eq!(ack_sequences("$JS.ACK.S.C.1.x.7.1.0"), None);
    }
}

//! The stream definition: one stream holding every account's frames (`<prefix>.frames.*`) and the
//! leaders' epoch claims (`<prefix>.epoch`), on file storage with 3 replicas, limits retention
//! by age (the resume window) and a duplicate window; and the two reads the publisher and the
//! follower need (the stream's last sequence, a subject's last signed message).

use async_nats::jetstream::context::{GetStreamError, GetStreamErrorKind};
use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::{
    Config, DiscardPolicy, LastRawMessageErrorKind, RetentionPolicy, StorageType,
};
use async_nats::jetstream::ErrorCode;
use bytes::Bytes;

use super::sign::{Signed, VerifyKeys};
use super::{Bus, BusError};
use pmw_core::backoff::{Backoff, Policy};

/// `pmw_bus_refused_total{reason}`: messages on the stream a reader refused (unsigned, forged,
/// unknown key, …; [`super::sign::Refusal`]) or a publisher alarmed on (`fence`: the stream
/// moved under messages no newer leader signed; `prepublished`: a frame's id was taken by a
/// message it did not sign).
pub const REFUSED_TOTAL: &str = "pmw_bus_refused_total";

/// The stream's configuration from the bus configuration.
pub fn config(bus: &Bus) -> Config {
    let c = &bus.config;
    Config {
        name: c.stream.clone(),
        subjects: vec![format!("{}.frames.*", c.prefix), bus.config.epoch_subject()],
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        num_replicas: c.replicas,
        max_age: c.max_age,
        duplicate_window: c.duplicate_window,
        discard: DiscardPolicy::Old,
        max_bytes: c.max_bytes,
        max_message_size: c.max_msg_size,
        ..Default::default()
    }
}

/// Create the stream, or bring an existing one to [`config`] (idempotent; a leader and every
/// edge call it at start). The stream is usually there as configured: one stream info request,
/// bounded like every API request, answers that, and no update goes through the cluster's meta
/// leader (a new push leader's claim waited the client's whole 10 s request timeout for an
/// update while a NATS node was down, in the edge-mode checker). Only a missing or differing
/// stream is created or updated, with the client's own timeout (a creation under load can
/// take seconds).
pub async fn ensure(bus: &Bus) -> Result<(), BusError> {
    let want = config(bus);
    let name = &bus.config.stream;
    let what = format!("stream {name}");
    match bus.answered(&what, bus.js.get_stream(name)).await? {
        Ok(s) if as_configured(&s.cached_info().config, &want) => return Ok(()),
        Ok(_) => {
            tracing::info!(stream = %name, "bus stream differs from its configuration: updating")
        }
        Err(e) if not_found(&e) => tracing::info!(stream = %name, "bus stream missing: creating"),
        Err(e) => return Err(BusError::Unavailable(format!("{what}: {e}"))),
    }
    bus.js
        .create_or_update_stream(want)
        .await
        .map_err(|e| BusError::Unavailable(format!("stream {name}: {e}")))?;
    Ok(())
}

/// Wait until the stream exists and has a leader (an edge: its identity may read the stream but not create or
/// change it; push creates it at its first claim). A stream that differs from [`config`] is
/// followed as it is, with a warning (push brings it to its configuration).
pub async fn expect(bus: &Bus) -> Result<(), BusError> {
    let want = config(bus);
    let name = &bus.config.stream;
    let what = format!("stream {name}");
    let mut backoff = Backoff::new(Policy::STORE);
    loop {
        let why = match bus.answered(&what, bus.js.get_stream(name)).await {
            Ok(Ok(s)) if led(s.cached_info()) => {
                if !as_configured(&s.cached_info().config, &want) {
                    tracing::warn!(stream = %name, "bus stream differs from its configuration (push corrects it)");
                }
                return Ok(());
            }
            // Just made: its replicas elect a leader, which answers the reads that follow.
            Ok(Ok(_)) => "without a leader yet".to_string(),
            Ok(Err(e)) if not_found(&e) => "missing (push creates it)".to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        let wait = backoff.next_wait();
        tracing::info!(stream = %name, why, wait_ms = wait.as_millis() as u64, "bus waiting for the stream");
        tokio::time::sleep(wait).await;
    }
}

/// Whether a stream's configuration has everything [`config`] sets (the server fills in the
/// rest).
fn as_configured(have: &Config, want: &Config) -> bool {
    have.subjects == want.subjects
        && have.retention == want.retention
        && have.storage == want.storage
        && have.num_replicas == want.num_replicas
        && have.max_age == want.max_age
        && have.duplicate_window == want.duplicate_window
        && have.discard == want.discard
        && have.max_bytes == want.max_bytes
        && have.max_message_size == want.max_message_size
}

/// Whether the stream's replicas have a leader (a stream without cluster information: one node).
fn led(info: &async_nats::jetstream::stream::Info) -> bool {
    info.cluster.as_ref().is_none_or(|c| c.leader.is_some())
}

fn not_found(e: &GetStreamError) -> bool {
    matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND)
}

/// The sequence of the last message stored in the stream (0: empty), as its leader reports it.
pub async fn last_seq(bus: &Bus) -> Result<u64, BusError> {
    let name = &bus.config.stream;
    let stream = bus
        .api(&format!("stream {name}"), bus.js.get_stream_no_info(name))
        .await?;
    let info = bus
        .api(&format!("stream {name} info"), stream.get_info())
        .await?;
    Ok(info.state.last_sequence)
}

/// The stream sequence of the account's last stored frame signed by one of `keys` (0: none
/// stored, or all expired; see [`last_signed`]).
pub async fn last_frame_seq(bus: &Bus, account: &str, keys: &VerifyKeys) -> Result<u64, BusError> {
    Ok(last_frame(bus, account, keys)
        .await?
        .map_or(0, |(seq, _)| seq))
}

/// The account's last stored frame signed by one of `keys`: its stream sequence and body
/// (`None`: none stored, or all expired; see [`last_signed`]).
pub async fn last_frame(
    bus: &Bus,
    account: &str,
    keys: &VerifyKeys,
) -> Result<Option<(u64, Bytes)>, BusError> {
    let subject = bus.config.frames_subject(account)?;
    Ok(last_signed(bus, &subject, keys)
        .await?
        .map(|(m, _)| (m.sequence, m.payload)))
}

/// How many messages [`last_signed`] looks at below the subject's last before it gives up.
pub const WALK_BACK: u64 = 256;

/// The last message on `subject` that `keys` verify, and what it says: the subject's last,
/// or (when that one is refused: junk or a forgery, alarmed) the nearest signed one below it,
/// looked for through at most [`WALK_BACK`] stream sequences (`None`: none within them).
pub async fn last_signed(
    bus: &Bus,
    subject: &str,
    keys: &VerifyKeys,
) -> Result<Option<(StreamMessage, Signed)>, BusError> {
    let name = &bus.config.stream;
    let stream = bus
        .api(&format!("stream {name}"), bus.js.get_stream_no_info(name))
        .await?;
    let what = format!("last message of {subject}");
    let last = match bus
        .answered(&what, stream.get_last_raw_message_by_subject(subject))
        .await?
    {
        Ok(m) => m,
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(None),
        Err(e) => return Err(BusError::Unavailable(format!("{what}: {e}"))),
    };
    let mut at = last.sequence;
    let mut next = Some(last);
    let floor = at.saturating_sub(WALK_BACK);
    loop {
        if let Some(m) = next.take().filter(|m| m.subject.as_str() == subject) {
            match keys.verify(subject, Some(&m.headers), &m.payload) {
                Ok(signed) => return Ok(Some((m, signed))),
                Err(why) => {
                    metrics::counter!(REFUSED_TOTAL, "reason" => why.reason()).increment(1);
                    tracing::warn!(seq = m.sequence, %subject, reason = %why, "bus message refused; looking below it");
                }
            }
        }
        if at <= floor.max(1) {
            tracing::warn!(%subject, below = at, "bus: no signed message found");
            return Ok(None);
        }
        at -= 1;
        let what = format!("message {at}");
        next = match bus.answered(&what, stream.get_raw_message(at)).await? {
            Ok(m) => Some(m),
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => None,
            Err(e) => return Err(BusError::Unavailable(format!("{what}: {e}"))),
        };
    }
}

/// The stored message at `seq` (`None`: none, deleted or expired).
pub async fn message(bus: &Bus, seq: u64) -> Result<Option<StreamMessage>, BusError> {
    let name = &bus.config.stream;
    let stream = bus
        .api(&format!("stream {name}"), bus.js.get_stream_no_info(name))
        .await?;
    let what = format!("message {seq}");
    match bus.answered(&what, stream.get_raw_message(seq)).await? {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(BusError::Unavailable(format!("{what}: {e}"))),
    }
}

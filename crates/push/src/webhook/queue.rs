//! One endpoint's queue: attempt the deliveries the dispatcher claimed or was handed for it,
//! claim more in cursor order while more may be due (a few ahead of the free slots), keep at
//! most `max_in_flight_per_endpoint` attempts in flight, write each result back (successes in
//! shared batches, see [`super::results`]). Endpoints run in separate tasks, so a slow or
//! failing endpoint never delays another.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmw_core::ch::latency::PushLatencyRow;
use pmw_core::pg::PgPool;
use pmw_core::UnixMs;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::client::{GuardedClient, SendError};
use super::retry::{self, Next, Outcome};
use super::sign::{sign_headers, Secret};
use super::stats::WebhookStats;
use super::store::{self, Claim, Claimed, Disable, Finish, Finished, Health};
use super::{WebhookConfig, WebhookError};
use crate::recorder::{
    DeliveryLogRow, Fact, Recorder, WEBHOOK_CHANNEL as CHANNEL,
    WEBHOOK_FINAL_CHANNEL as FINAL_CHANNEL,
};

/// What every queue of one dispatcher shares.
pub(crate) struct Ctx {
    pub pool: PgPool,
    /// Where delivered attempts' results go (batched).
    pub results: super::results::Results,
    pub client: GuardedClient,
    pub facts: Recorder,
    pub stats: Arc<WebhookStats>,
    pub cfg: WebhookConfig,
    pub epoch: i64,
    /// How often the dispatcher was woken (new deliveries queued): a running queue whose last
    /// claim was short claims again when this moved.
    pub wakes: AtomicU64,
}

impl Ctx {
    pub fn stale_before(&self, now: i64) -> i64 {
        now - self.cfg.claim_ttl().as_millis() as i64
    }
}

/// Run one endpoint's queue, starting from the deliveries claimed for it (and the wake count
/// read before they were claimed), taking what the dispatcher hands over while it runs, until
/// nothing of it is left to attempt (or `stop`). It claims more itself only when its last
/// claim was full (more may be due) or new deliveries were queued since (the dispatcher's wake
/// count moved); otherwise the dispatcher's next scan takes what becomes due. Returns whether
/// the dispatcher should scan after it ([`Ran`]). A fenced claim or update aborts the attempts
/// in flight.
pub(crate) async fn run_endpoint(
    ctx: Arc<Ctx>,
    endpoint_id: i64,
    (first, mut seen): (Vec<Claimed>, u64),
    mut feed: Feed,
    stop: CancellationToken,
) -> Result<Ran, WebhookError> {
    let max = ctx.cfg.max_in_flight_per_endpoint.max(1);
    // Each attempt says whether it disabled the endpoint and whether it settled its delivery.
    let mut inflight: JoinSet<Result<Attempted, WebhookError>> = JoinSet::new();
    // Whether this queue left work in Postgres whose due time the dispatcher has not seen.
    let mut left = false;
    // Anything queued during this queue's life may wait behind a delivery it made (a retract or
    // a final waits for its trade), even when its own claims came too early to take it.
    let started = seen;
    // Claimed in cursor order ahead of the free slots: one claim statement per few attempts.
    let mut more = first.len() >= claim_limit(&ctx.cfg);
    let mut ahead: VecDeque<Claimed> = first.into();
    let mut stopping = false;
    let mut result = Ok(());
    loop {
        while let Ok(rows) = feed.rx.try_recv() {
            ahead.extend(rows);
        }
        if !stopping && inflight.len() < max && ahead.is_empty() {
            let wakes = ctx.wakes.load(Relaxed);
            if more || wakes != seen {
                seen = wakes;
                let now = UnixMs::now().as_i64();
                let limit = (max * CLAIM_AHEAD - inflight.len()) as i64;
                let claimed = match ctx.pool.get().await {
                    Ok(c) => {
                        store::claim(
                            &**c,
                            (ctx.cfg.slot, ctx.epoch),
                            Claim::One(endpoint_id),
                            (now, ctx.stale_before(now)),
                            limit,
                        )
                        .await
                    }
                    Err(e) => Err(e.into()),
                };
                match claimed {
                    Ok(c) => {
                        more = c.rows.len() as i64 >= limit;
                        ahead.extend(c.rows);
                    }
                    Err(e @ WebhookError::Fenced { .. }) => return Err(e),
                    Err(e) => {
                        stopping = true;
                        result = Err(e);
                    }
                }
            }
        }
        while !stopping && inflight.len() < max {
            let Some(row) = ahead.pop_front() else { break };
            inflight.spawn(attempt(ctx.clone(), row));
        }
        if inflight.is_empty() {
            if !stopping {
                // Take nothing more by hand-off (the dispatcher keeps what it could not send
                // for this endpoint's next queue), but attempt what already arrived.
                feed.rx.close();
                while let Ok(rows) = feed.rx.try_recv() {
                    ahead.extend(rows);
                }
                if !ahead.is_empty() {
                    continue;
                }
            }
            left |= !ahead.is_empty();
            release(&ctx, ahead).await;
            let rescan = left || ctx.wakes.load(Relaxed) != started;
            return result.map(|()| Ran { rescan });
        }
        feed.held.store(ahead.len() + inflight.len(), Relaxed);
        tokio::select! {
            Some(rows) = feed.rx.recv(), if !stopping => ahead.extend(rows),
            Some(done) = inflight.join_next() => match done {
                Ok(Ok(a)) => {
                    left |= !a.settled;
                    // Its pending deliveries expired with it: nothing claimed ahead goes out.
                    stopping |= a.disabled;
                }
                Ok(Err(e @ WebhookError::Fenced { .. })) => return Err(e),
                Ok(Err(e)) => {
                    left = true;
                    tracing::warn!(endpoint = endpoint_id, error = %e, "webhook result not recorded");
                    ctx.stats.set_error(&e);
                }
                Err(e) => {
                    ctx.stats.set_error(format!("webhook attempt task: {e}"));
                    result = Err(WebhookError::Task(e.to_string()));
                    stopping = true;
                }
            },
            _ = stop.cancelled(), if !stopping => stopping = true,
        }
    }
}

/// What a queue did, for the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ran {
    /// Whether it may have left due work the dispatcher has not seen: a retry scheduled, a
    /// result not recorded, claims released, or anything queued while it ran (a retract or a
    /// final becomes claimable once its trade is delivered). A queue that delivered everything
    /// it took, with nothing queued meanwhile, costs no scan after it.
    pub rescan: bool,
}

/// What one attempt did, for its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Attempted {
    /// It disabled the endpoint.
    disabled: bool,
    /// Its delivery is done (delivered and recorded): nothing of it is left to schedule.
    settled: bool,
}

/// Deliveries one claim takes per endpoint at most: a few per attempt slot.
pub(crate) fn claim_limit(cfg: &WebhookConfig) -> usize {
    cfg.max_in_flight_per_endpoint.max(1) * CLAIM_AHEAD
}

/// Claims taken per attempt slot at most (see `run_endpoint`): a busy endpoint (hundreds of
/// deliveries a second) costs one claim statement per few dozen deliveries. What a stopping
/// queue did not attempt is released at once.
const CLAIM_AHEAD: usize = 16;

/// What the dispatcher hands a running queue: the webhook lane's claimed trade deliveries for
/// its endpoint, and how many deliveries the queue holds (ahead plus in flight), which the
/// dispatcher reads to stop handing over past [`super::handoff::MAX_AHEAD`].
pub(crate) struct Feed {
    pub rx: tokio::sync::mpsc::UnboundedReceiver<Vec<Claimed>>,
    pub held: Arc<std::sync::atomic::AtomicUsize>,
}

/// Give back claims not attempted (the queue is stopping): due again at once for any dispatcher
/// of this epoch, instead of after the claim TTL. Best effort: a claim left is taken again after
/// the TTL, or at once by a successor's epoch.
pub(crate) async fn release(ctx: &Ctx, ahead: VecDeque<Claimed>) {
    if ahead.is_empty() {
        return;
    }
    let ids: Vec<String> = ahead.into_iter().map(|c| c.id).collect();
    let released = match ctx.pool.get().await {
        Ok(c) => c
            .execute(include_str!("sql/release_claims.sql"), &[&ids, &ctx.epoch])
            .await
            .map_err(|e| pmw_core::pg::describe(&e)),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = released {
        tracing::warn!(claims = ids.len(), error = %e, "claims not released; taken again after the claim ttl");
    }
}

/// The secrets that sign now: the current one, plus the previous one while its overlap lasts.
fn secrets(c: &Claimed, now: i64) -> Result<Vec<Secret>, String> {
    let mut out = vec![Secret::parse(&c.secret).map_err(|e| format!("endpoint secret: {e}"))?];
    if let (Some(prev), Some(until)) = (&c.previous_secret, c.previous_expires_ms) {
        if until > now {
            out.push(Secret::parse(prev).map_err(|e| format!("endpoint previous secret: {e}"))?);
        }
    }
    Ok(out)
}

/// Where the value of top-level `key` lies in a stored payload: after `"key": ` (as Postgres
/// renders jsonb) or `"key":` (as the webhook lane rendered it, handed over), up to the next
/// `,` or `}`. Inside a JSON string the quotes would be escaped, so only a key matches.
fn value_of(payload: &str, key: &str) -> Option<std::ops::Range<usize>> {
    let quoted = format!("\"{key}\":");
    let at = payload.find(&quoted)? + quoted.len();
    let start = at + usize::from(payload[at..].starts_with(' '));
    let end = payload[start..]
        .find([',', '}'])
        .map_or(payload.len(), |n| start + n);
    Some(start..end)
}

/// The body of this attempt: the payload with its top-level `t_push_ms` set to now, spliced
/// into the text ([`value_of`]): no parse, no re-serialisation. A payload without that key
/// (not queued by pmw) goes through serde_json, which adds it to an object.
fn body(payload: &str, now: i64) -> Result<Vec<u8>, String> {
    if let Some(v) = value_of(payload, "t_push_ms") {
        let digits = &payload[v.clone()];
        if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit() || c == '-') {
            let mut out = Vec::with_capacity(payload.len() + 8);
            out.extend_from_slice(&payload.as_bytes()[..v.start]);
            out.extend_from_slice(now.to_string().as_bytes());
            out.extend_from_slice(&payload.as_bytes()[v.end..]);
            return Ok(out);
        }
    }
    let mut p: serde_json::Value =
        serde_json::from_str(payload).map_err(|e| format!("payload: {e}"))?;
    if let Some(obj) = p.as_object_mut() {
        obj.insert("t_push_ms".into(), now.into());
    }
    serde_json::to_vec(&p).map_err(|e| format!("payload: {e}"))
}

/// One attempt of one claimed delivery, its row update and its facts.
/// Returns whether this attempt disabled the endpoint and settled its delivery.
async fn attempt(ctx: Arc<Ctx>, c: Claimed) -> Result<Attempted, WebhookError> {
    let number = c.attempts + 1;
    let started = Instant::now();
    let t_attempt = UnixMs::now().as_i64();
    let prepared = secrets(&c, t_attempt).and_then(|s| Ok((s, body(&c.payload, t_attempt)?)));
    let (outcome, status, retry_after, received_ms, error) = match prepared {
        Err(e) => (Outcome::Invalid, None, None, None, e),
        Ok((secrets, body)) => {
            let refs: Vec<&Secret> = secrets.iter().collect();
            let headers = sign_headers(&refs, &c.id, t_attempt / 1000, &body);
            match ctx.client.post(&c.url, &headers, body).await {
                Ok(r) => {
                    let outcome = Outcome::from_status(r.status);
                    let error = match outcome {
                        Outcome::Delivered => String::new(),
                        _ => format!("http {}: {}", r.status, r.body_snippet.trim())
                            .trim_end_matches(": ")
                            .to_string(),
                    };
                    let ra = r
                        .retry_after
                        .as_deref()
                        .and_then(|v| retry::parse_retry_after(v, r.received_ms));
                    (outcome, Some(r.status), ra, Some(r.received_ms), error)
                }
                Err(e) => {
                    let outcome = match e {
                        SendError::Url(_) | SendError::Resolve(_) => Outcome::Refused,
                        SendError::Timeout(_) => Outcome::Timeout,
                        SendError::Network(_) => Outcome::Network,
                    };
                    (outcome, None, None, None, e.to_string())
                }
            }
        }
    };
    let duration_ms = started.elapsed().as_millis() as i64;
    let now = UnixMs::now().as_i64();
    let next = retry::plan(number as u32, outcome, retry_after, &mut rand::thread_rng());
    let (state, next_attempt_ms, done_ms) = match next {
        Next::Delivered => ("delivered", now, Some(now)),
        Next::RetryIn(d) => ("pending", now + d.as_millis() as i64, None),
        Next::Failed | Next::Disable => ("failed", now, Some(now)),
    };
    let finish = Finish {
        state,
        attempts: number,
        next_attempt_ms,
        last_status: status.map(i32::from),
        last_error: (!error.is_empty()).then(|| error.clone()),
        done_ms,
        health: health(next, c.failing_since_ms),
        disable: disable(&ctx.cfg, next, &c, now),
    };
    // The common case goes in the shared batch; anything else is one row's transaction.
    let written =
        if next == Next::Delivered && finish.health == Health::Keep && finish.disable.is_none() {
            ctx.results
                .delivered(&c.id, number, status.map_or(0, i32::from), now)
                .await
                .map(|landed| Finished {
                    landed,
                    ..Finished::default()
                })
        } else {
            match ctx.pool.get().await {
                Ok(mut client) => {
                    store::finish(
                        &mut client,
                        ctx.cfg.slot,
                        ctx.epoch,
                        c.endpoint_id,
                        &c.id,
                        &finish,
                        now,
                    )
                    .await
                }
                Err(e) => Err(e.into()),
            }
        };
    let mut log_error = error.clone();
    if let Ok(Finished {
        disabled: Some(reason),
        ..
    }) = &written
    {
        log_error = format!("{error}; endpoint disabled: {reason}")
            .trim_start_matches("; ")
            .to_string();
    }
    ctx.facts.record(Fact::Attempt(DeliveryLogRow {
        delivery_id: c.id.clone(),
        endpoint_id: c.endpoint_id as u64,
        account_id: c.account_id as u64,
        attempt: number as u32,
        kind: c.kind.clone(),
        block_number: c.block_number as u64,
        log_index: c.log_index as u32,
        t_attempt_ms: t_attempt,
        duration_ms,
        status_code: status.unwrap_or(0),
        outcome: outcome.as_str().to_string(),
        error: log_error,
    }));
    let written = written?;
    let s = &ctx.stats;
    match next {
        Next::Delivered => WebhookStats::add(&s.delivered, 1),
        _ => WebhookStats::add(&s.failed_attempts, 1),
    }
    match next {
        Next::Delivered if written.landed => ctx.facts.record(Fact::Latency(PushLatencyRow {
            block_number: c.block_number as u64,
            log_index: c.log_index as u32,
            channel: if c.kind == "final" {
                FINAL_CHANNEL
            } else {
                CHANNEL
            }
            .to_string(),
            target_id: c.endpoint_id as u64,
            t_detect_ms: c.t_detect_ms,
            t_push_ms: received_ms.unwrap_or(now),
            epoch: ctx.epoch as u64,
            // A fill found by the completeness audit was not seen live: no live latency.
            backfilled: u8::from(
                value_of(&c.payload, "audit").is_some_and(|v| &c.payload[v] == "true"),
            ),
        })),
        Next::Failed | Next::Disable => {
            WebhookStats::add(&s.failed_final, 1);
            tracing::warn!(id = %c.id, endpoint = c.endpoint_id, attempts = number, error = %error, "webhook failed for good");
        }
        _ => {}
    }
    if let Some(reason) = &written.disabled {
        WebhookStats::add(&s.endpoints_disabled, 1);
        WebhookStats::add(&s.deliveries_expired, written.expired);
        tracing::warn!(endpoint = c.endpoint_id, url = %c.url, expired = written.expired, reason = %reason, "webhook endpoint disabled");
    }
    if !written.landed {
        tracing::debug!(id = %c.id, "webhook result not ours any more");
    }
    tracing::debug!(id = %c.id, endpoint = c.endpoint_id, attempt = number, status = status.unwrap_or(0),
        outcome = outcome.as_str(), ms = duration_ms, "webhook attempt");
    Ok(Attempted {
        disabled: written.disabled.is_some(),
        settled: next == Next::Delivered,
    })
}

/// The failure-run transition of this attempt, judged from what the claim saw (`failing_since`):
/// only a change writes.
fn health(next: Next, failing_since: Option<i64>) -> Health {
    match (next, failing_since) {
        (Next::Delivered, Some(_)) => Health::Recovered,
        (Next::Delivered, None) | (_, Some(_)) => Health::Keep,
        (_, None) => Health::StartFailing,
    }
}

/// Whether this attempt disables its endpoint: a 410 always; another failure when the endpoint
/// has failed every attempt for the configured period (re-checked in the write's transaction).
fn disable(cfg: &WebhookConfig, next: Next, c: &Claimed, now: i64) -> Option<Disable> {
    match next {
        Next::Delivered => None,
        Next::Disable => Some(Disable::Gone(format!(
            "410 Gone from {} at {}",
            c.url,
            UnixMs(now).to_rfc3339()
        ))),
        Next::RetryIn(_) | Next::Failed => {
            let period = cfg.disable_failing_after?;
            let cutoff_ms = now - period.as_millis() as i64;
            c.failing_since_ms
                .filter(|since| *since <= cutoff_ms)
                .map(|_| Disable::FailingSince {
                    cutoff_ms,
                    period: human(period),
                })
        }
    }
}

/// A period as operators write it: `5 d`, `36 h`, `90 min`, `2 s`, `1500 ms`.
fn human(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("min", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{} {unit}", ms / size);
        }
    }
    format!("{ms} ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attempt_body_sets_t_push_ms_in_the_stored_text() {
        let stored = r#"{"type": "trade", "t_push_ms": 5, "note": "x\"t_push_ms\": 7", "n": 1}"#;
        let out: serde_json::Value = serde_json::from_slice(&body(stored, 1234).unwrap()).unwrap();
        assert_eq!(out["t_push_ms"], 1234);
        assert_eq!(out["note"], "x\"t_push_ms\": 7");
        assert_eq!(out["n"], 1);
        // Without the key: added through serde_json.
        let out: serde_json::Value =
            serde_json::from_slice(&body(r#"{"type": "retract"}"#, 9).unwrap()).unwrap();
        assert_eq!(out["t_push_ms"], 9);
        assert!(body("not json", 1).is_err());
        // As the webhook lane renders it (handed over without a trip through Postgres).
        let lane = pmw_core::message::stamp(
            pmw_core::message::Kind::Trade,
            r#"{"note":"\"t_push_ms\":7","n":2}"#,
            5,
        );
        let out: serde_json::Value = serde_json::from_slice(&body(&lane, 4321).unwrap()).unwrap();
        assert_eq!(out["t_push_ms"], 4321);
        assert_eq!(out["type"], "trade");
        assert_eq!(out["note"], "\"t_push_ms\":7");
        assert_eq!(out["n"], 2);
        // The audit flag, in either rendering; a key inside a string is not a key.
        for (payload, want) in [
            (r#"{"type": "trade", "audit": true, "n": 1}"#, Some("true")),
            (r#"{"type":"trade","audit":false}"#, Some("false")),
            (r#"{"note":"\"audit\":true"}"#, None),
        ] {
            assert_eq!(
                value_of(payload, "audit").map(|v| &payload[v]),
                want,
                "{payload}"
            );
        }
    }

    #[test]
    fn webhook_health_writes_only_transitions() {
        let retry = Next::RetryIn(Duration::from_secs(5));
        assert_eq!(health(Next::Delivered, None), Health::Keep);
        assert_eq!(health(Next::Delivered, Some(1)), Health::Recovered);
        assert_eq!(health(retry, None), Health::StartFailing);
        assert_eq!(health(retry, Some(1)), Health::Keep);
        assert_eq!(health(Next::Failed, None), Health::StartFailing);
        assert_eq!(human(Duration::from_secs(5 * 86_400)), "5 d");
        assert_eq!(human(Duration::from_secs(2)), "2 s");
        assert_eq!(human(Duration::from_millis(2_500)), "2500 ms");
    }
}

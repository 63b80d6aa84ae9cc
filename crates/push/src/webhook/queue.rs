//! One endpoint's queue: claim its due deliveries in cursor order, keep at most
//! `max_in_flight_per_endpoint` attempts in flight, write each result back. Endpoints run in
//! separate tasks, so a slow or failing endpoint never delays another.

use std::sync::Arc;
use std::time::Instant;

use pmw_core::pg::PgPool;
use pmw_core::store::latency::PushLatencyRow;
use pmw_core::UnixMs;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::client::{GuardedClient, SendError};
use super::record::{self, DeliveryLogRow, Fact, CHANNEL};
use super::retry::{self, Next, Outcome};
use super::sign::{sign_headers, Secret};
use super::stats::WebhookStats;
use super::store::{self, Claimed, Finish};
use super::{WebhookConfig, WebhookError};

/// What every queue of one dispatcher shares.
pub(crate) struct Ctx {
    pub pool: PgPool,
    pub client: GuardedClient,
    pub facts: mpsc::Sender<Fact>,
    pub stats: Arc<WebhookStats>,
    pub cfg: WebhookConfig,
    pub epoch: i64,
}

impl Ctx {
    pub fn stale_before(&self, now: i64) -> i64 {
        now - self.cfg.claim_ttl().as_millis() as i64
    }
}

/// Run one endpoint's queue until nothing of it is due (or `stop`). Returns how many
/// deliveries it attempted. A fenced claim or update aborts the attempts in flight.
pub(crate) async fn run_endpoint(
    ctx: Arc<Ctx>,
    endpoint_id: i64,
    stop: CancellationToken,
) -> Result<u64, WebhookError> {
    let max = ctx.cfg.max_in_flight_per_endpoint.max(1);
    let mut inflight: JoinSet<Result<(), WebhookError>> = JoinSet::new();
    let mut stopping = false;
    let mut result = Ok(());
    let mut handled = 0u64;
    loop {
        if !stopping && inflight.len() < max {
            let now = UnixMs::now().as_i64();
            let claimed = match ctx.pool.get().await {
                Ok(c) => {
                    let limit = (max - inflight.len()) as i64;
                    store::claim(
                        &**c,
                        ctx.cfg.slot,
                        ctx.epoch,
                        endpoint_id,
                        now,
                        ctx.stale_before(now),
                        limit,
                    )
                    .await
                }
                Err(e) => Err(e.into()),
            };
            match claimed {
                Ok(rows) => {
                    for row in rows {
                        handled += 1;
                        inflight.spawn(attempt(ctx.clone(), row));
                    }
                }
                Err(e @ WebhookError::Fenced { .. }) => return Err(e),
                Err(e) => {
                    stopping = true;
                    result = Err(e);
                }
            }
        }
        if inflight.is_empty() {
            return result.map(|()| handled);
        }
        tokio::select! {
            Some(done) = inflight.join_next() => match done {
                Ok(Ok(())) => {}
                Ok(Err(e @ WebhookError::Fenced { .. })) => return Err(e),
                Ok(Err(e)) => {
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

/// The body of this attempt: the stored payload with `t_push_ms` set to now (objects only).
fn body(payload: &serde_json::Value, now: i64) -> Result<Vec<u8>, String> {
    let mut p = payload.clone();
    if let Some(obj) = p.as_object_mut() {
        obj.insert("t_push_ms".into(), now.into());
    }
    serde_json::to_vec(&p).map_err(|e| format!("payload: {e}"))
}

/// One attempt of one claimed delivery, its row update and its facts.
async fn attempt(ctx: Arc<Ctx>, c: Claimed) -> Result<(), WebhookError> {
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
    let (state, next_attempt_ms, done_ms, disable) = match next {
        Next::Delivered => ("delivered", now, Some(now), None),
        Next::RetryIn(d) => ("pending", now + d.as_millis() as i64, None, None),
        Next::Failed => ("failed", now, Some(now), None),
        Next::Disable => (
            "failed",
            now,
            Some(now),
            Some(format!(
                "410 Gone from {} at {}",
                c.url,
                UnixMs(now).to_rfc3339()
            )),
        ),
    };
    let finish = Finish {
        state,
        attempts: number,
        next_attempt_ms,
        last_status: status.map(i32::from),
        last_error: (!error.is_empty()).then(|| error.clone()),
        done_ms,
        disable,
    };
    record::send(
        &ctx.facts,
        &ctx.stats,
        Fact::Attempt(DeliveryLogRow {
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
            error: error.clone(),
        }),
    );
    let client = ctx.pool.get().await?;
    let landed = store::finish(&**client, ctx.cfg.slot, ctx.epoch, &c.id, &finish, now).await?;
    drop(client);
    let s = &ctx.stats;
    match next {
        Next::Delivered => WebhookStats::add(&s.delivered, 1),
        _ => WebhookStats::add(&s.failed_attempts, 1),
    }
    match next {
        Next::Delivered if landed => record::send(
            &ctx.facts,
            s,
            Fact::Latency(PushLatencyRow {
                block_number: c.block_number as u64,
                log_index: c.log_index as u32,
                channel: CHANNEL.to_string(),
                target_id: c.endpoint_id as u64,
                t_detect_ms: c.t_detect_ms,
                t_push_ms: received_ms.unwrap_or(now),
                epoch: ctx.epoch as u64,
                backfilled: 0,
            }),
        ),
        Next::Failed => {
            WebhookStats::add(&s.failed_final, 1);
            tracing::warn!(id = %c.id, endpoint = c.endpoint_id, attempts = number, error = %error, "webhook failed for good");
        }
        Next::Disable => {
            WebhookStats::add(&s.failed_final, 1);
            WebhookStats::add(&s.endpoints_disabled, 1);
            tracing::warn!(endpoint = c.endpoint_id, url = %c.url, "webhook endpoint disabled (410)");
        }
        _ => {}
    }
    if !landed {
        tracing::debug!(id = %c.id, "webhook result not ours any more");
    }
    tracing::debug!(id = %c.id, endpoint = c.endpoint_id, attempt = number, status = status.unwrap_or(0),
        outcome = outcome.as_str(), ms = duration_ms, "webhook attempt");
    Ok(())
}

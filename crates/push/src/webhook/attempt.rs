//! One attempt of one claimed delivery, in named steps: sign and send it ([`send`]), classify
//! what came back ([`Sent`], pure), decide what becomes of the delivery ([`Done::finish`],
//! pure, after [`retry::plan`]), write that back (batched when delivered), and record its
//! facts (`delivery_log`, and `push_latency` when delivered) and counters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pmw_core::ch::latency::PushLatencyRow;
use pmw_core::message::Kind;
use pmw_core::pg::deliveries::EndpointTarget;
use pmw_core::redact;
use pmw_core::UnixMs;

use super::body::{body, is_audit, pending_id};
use super::client::{GuardedClient, HttpResponse, SendError};
use super::config::WebhookConfig;
use super::context::Ctx;
use super::error::WebhookError;
use super::retry::{self, Next, Outcome};
use super::sign::sign_headers;
use super::stats::WebhookStats;
use super::store::{self, Claimed, Disable, Finish, Finished, Health};
use pmw_session::recorder::{
    DeliveryLogRow, Fact, WEBHOOK_CHANNEL as CHANNEL, WEBHOOK_FINAL_CHANNEL as FINAL_CHANNEL,
    WEBHOOK_PENDING_CHANNEL as PENDING_CHANNEL,
};

/// What one attempt did, for its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attempted {
    /// It disabled the endpoint.
    pub disabled: bool,
    /// Its delivery is done (delivered and recorded): nothing of it is left to schedule.
    pub settled: bool,
}

/// One attempt of one claimed delivery, its row update and its facts.
pub(crate) async fn attempt(ctx: Arc<Ctx>, c: Claimed) -> Result<Attempted, WebhookError> {
    let number = c.attempts + 1;
    let started = Instant::now();
    let t_attempt = UnixMs::now().as_i64();
    let sent = send(&ctx.client, &c, t_attempt).await;
    let duration_ms = started.elapsed().as_millis() as i64;
    let now = UnixMs::now().as_i64();
    let next = retry::plan(
        number as u32,
        sent.outcome,
        sent.retry_after,
        &mut rand::thread_rng(),
    );
    let done = Done {
        number,
        t_attempt,
        duration_ms,
        now,
        sent,
        next,
    };
    let finish = done.finish(&ctx.cfg, &c.endpoint);
    let written = write(&ctx, &c, &done, &finish).await;
    let disabled = written.as_ref().ok().and_then(|w| w.disabled.as_deref());
    ctx.facts.record(Fact::Attempt(done.log_row(&c, disabled)));
    let written = written?;
    account(&ctx, &c, &done, &written, true);
    Ok(Attempted {
        disabled: written.disabled.is_some(),
        settled: next == Next::Delivered,
    })
}

/// Sign the delivery with its endpoint's secrets and post it; what came back, classified.
async fn send(client: &GuardedClient, c: &Claimed, t_attempt: i64) -> Sent {
    let d = &c.delivery;
    let prepared = c
        .endpoint
        .signing
        .at(t_attempt)
        .map_err(|e| e.to_string())
        .and_then(|s| Ok((s, body(&d.payload, t_attempt)?)));
    let (secrets, body) = match prepared {
        Ok(v) => v,
        Err(e) => return Sent::invalid(e),
    };
    let headers = sign_headers(&secrets, &d.id, t_attempt / 1000, &body);
    match client.post(&c.endpoint.url, &headers, body).await {
        Ok(r) => Sent::response(&r),
        Err(e) => Sent::failed(&e),
    }
}

/// What one attempt came to on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sent {
    pub outcome: Outcome,
    /// The response status, when one arrived.
    pub status: Option<u16>,
    /// The `Retry-After` it asked for, if any (parsed).
    pub retry_after: Option<Duration>,
    /// When the response head arrived.
    pub received_ms: Option<i64>,
    /// Empty when delivered.
    pub error: String,
}

impl Sent {
    /// Nothing was sent: the delivery could not be signed or its body built.
    pub(super) fn invalid(error: String) -> Sent {
        Sent {
            outcome: Outcome::Invalid,
            status: None,
            retry_after: None,
            received_ms: None,
            error,
        }
    }

    /// A response arrived: its outcome, and for anything but a 2xx `http <status>: <snippet>`.
    pub(super) fn response(r: &HttpResponse) -> Sent {
        let outcome = Outcome::from_status(r.status);
        let error = match outcome {
            Outcome::Delivered => String::new(),
            _ => format!("http {}: {}", r.status, r.body_snippet.trim())
                .trim_end_matches(": ")
                .to_string(),
        };
        Sent {
            outcome,
            status: Some(r.status),
            retry_after: r
                .retry_after
                .as_deref()
                .and_then(|v| retry::parse_retry_after(v, r.received_ms)),
            received_ms: Some(r.received_ms),
            error,
        }
    }

    /// No response: refused by the SSRF guard, timed out, or a network failure.
    pub(super) fn failed(e: &SendError) -> Sent {
        let outcome = match e {
            SendError::Url(_) | SendError::Resolve(_) => Outcome::Refused,
            SendError::Timeout(_) => Outcome::Timeout,
            SendError::Network(_) => Outcome::Network,
        };
        Sent {
            outcome,
            status: None,
            retry_after: None,
            received_ms: None,
            // Transport errors can name the URL: only its host is kept (logs, `delivery_log`).
            error: redact::text(&e.to_string()),
        }
    }
}

/// An attempt made (`number`, sent at `t_attempt`, over at `now`) and the plan for its
/// delivery.
#[derive(Debug, Clone)]
pub(super) struct Done {
    pub number: i32,
    pub t_attempt: i64,
    pub duration_ms: i64,
    pub now: i64,
    pub sent: Sent,
    pub next: Next,
}

impl Done {
    /// The result written back to the row: the delivery's state, when it is next due, what
    /// the endpoint's run of failures does and whether the endpoint is disabled.
    pub(super) fn finish(&self, cfg: &WebhookConfig, endpoint: &EndpointTarget) -> Finish {
        let now = self.now;
        let (state, next_attempt_ms, done_ms) = match self.next {
            Next::Delivered => ("delivered", now, Some(now)),
            Next::RetryIn(d) => ("pending", now + d.as_millis() as i64, None),
            Next::Failed | Next::Disable => ("failed", now, Some(now)),
        };
        let error = &self.sent.error;
        Finish {
            state,
            attempts: self.number,
            next_attempt_ms,
            last_status: self.sent.status.map(i32::from),
            last_error: (!error.is_empty()).then(|| error.clone()),
            done_ms,
            health: health(self.next, endpoint.failing_since_ms),
            disable: disable(cfg, self.next, endpoint, now),
        }
    }

    /// The attempt's `delivery_log` row; `disabled`: the reason, when it disabled the endpoint.
    pub(super) fn log_row(&self, c: &Claimed, disabled: Option<&str>) -> DeliveryLogRow {
        let d = &c.delivery;
        DeliveryLogRow {
            delivery_id: d.id.clone(),
            endpoint_id: d.endpoint_id as u64,
            account_id: c.endpoint.account_id as u64,
            attempt: self.number as u32,
            kind: d.kind.as_str().to_string(),
            block_number: d.cursor.block,
            log_index: d.cursor.log_index,
            t_attempt_ms: self.t_attempt,
            duration_ms: self.duration_ms,
            status_code: self.sent.status.unwrap_or(0),
            outcome: self.sent.outcome.as_str().to_string(),
            error: log_error(&self.sent.error, disabled),
        }
    }

    /// The delivered message's `push_latency` row; none for a `void` (no latency stage: it
    /// ends a pending, and its `t_detect_ms` is the pending's sighting). A `pending` is its own
    /// channel (`webhook_pending`: sighting in a pool → delivered), never a trade's stage.
    fn latency_row(&self, c: &Claimed, epoch: i64) -> Option<PushLatencyRow> {
        let d = &c.delivery;
        let channel = match d.kind {
            Kind::Final => FINAL_CHANNEL,
            Kind::Trade | Kind::Retract => CHANNEL,
            Kind::Pending => PENDING_CHANNEL,
            Kind::Void => return None,
        };
        Some(PushLatencyRow {
            block_number: d.cursor.block,
            log_index: d.cursor.log_index,
            channel: channel.into(),
            target_id: d.endpoint_id as u64,
            t_detect_ms: d.t_detect_ms,
            t_push_ms: self.sent.received_ms.unwrap_or(self.now),
            epoch: epoch as u64,
            // A fill found by the completeness audit was not seen live: no live latency.
            backfilled: u8::from(is_audit(&d.payload)),
            // Which attempt delivered it: the dashboard's first-attempt figure counts only 1.
            attempt: self.number as u32,
            // The pending announced, or the one a trade confirmed: the dashboard pairs them.
            pending_id: pending_id(&d.payload),
        })
    }
}

/// Write the result: a plain delivery into the shared batch, anything else (a retry, a failure,
/// a health transition, a disabling) in the row's own statement or transaction.
pub(super) async fn write(
    ctx: &Ctx,
    c: &Claimed,
    done: &Done,
    finish: &Finish,
) -> Result<Finished, WebhookError> {
    let d = &c.delivery;
    if done.next == Next::Delivered && finish.health == Health::Keep && finish.disable.is_none() {
        let status = finish.last_status.unwrap_or(0);
        let landed = ctx
            .results
            .delivered(&d.id, finish.attempts, status, done.now)
            .await?;
        return Ok(Finished {
            landed,
            ..Finished::default()
        });
    }
    let mut client = ctx.pool.get().await?;
    store::finish(
        &mut client,
        ctx.fence(),
        d.endpoint_id,
        &d.id,
        finish,
        done.now,
    )
    .await
}

/// The attempt's counters, latency fact and logs, once its result is written. A chat message is
/// no `push_latency` sample (`latency: false`): a digest waits for the service's rate limit.
pub(super) fn account(ctx: &Ctx, c: &Claimed, done: &Done, written: &Finished, latency: bool) {
    let (s, d) = (&ctx.stats, &c.delivery);
    match done.next {
        Next::Delivered => WebhookStats::add(&s.delivered, 1),
        _ => WebhookStats::add(&s.failed_attempts, 1),
    }
    match done.next {
        Next::Delivered if written.landed && latency => {
            if let Some(row) = done.latency_row(c, ctx.epoch) {
                ctx.facts.record(Fact::Latency(row));
            }
        }
        Next::Failed | Next::Disable => {
            WebhookStats::add(&s.failed_final, 1);
            tracing::warn!(id = %d.id, endpoint = d.endpoint_id, attempts = done.number, error = %done.sent.error, "webhook failed for good");
        }
        _ => {}
    }
    if let Some(reason) = &written.disabled {
        WebhookStats::add(&s.endpoints_disabled, 1);
        WebhookStats::add(&s.deliveries_expired, written.expired);
        tracing::warn!(endpoint = d.endpoint_id, url = %redact::Url(&c.endpoint.url), expired = written.expired, reason = %reason, "webhook endpoint disabled");
    }
    if !written.landed {
        tracing::debug!(id = %d.id, "webhook result not ours any more");
    }
    tracing::debug!(id = %d.id, endpoint = d.endpoint_id, attempt = done.number, status = done.sent.status.unwrap_or(0),
        outcome = done.sent.outcome.as_str(), ms = done.duration_ms, "webhook attempt");
}

/// The `delivery_log` error: the attempt's, and the disabling it caused.
fn log_error(error: &str, disabled: Option<&str>) -> String {
    match disabled {
        Some(reason) => format!("{error}; endpoint disabled: {reason}")
            .trim_start_matches("; ")
            .to_string(),
        None => error.to_string(),
    }
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
fn disable(cfg: &WebhookConfig, next: Next, e: &EndpointTarget, now: i64) -> Option<Disable> {
    match next {
        Next::Delivered => None,
        Next::Disable => Some(Disable::Gone(format!(
            "410 Gone from {} at {}",
            redact::url(&e.url),
            UnixMs(now).to_rfc3339()
        ))),
        Next::RetryIn(_) | Next::Failed => {
            let period = cfg.disable_failing_after?;
            let cutoff_ms = now - period.as_millis() as i64;
            e.failing_since_ms
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
    use pmw_core::pg::deliveries::NewDelivery;
    use pmw_core::webhook::Signing;
    use pmw_core::Cursor;

    const NOW: i64 = 1_000_000;

    fn endpoint(failing_since_ms: Option<i64>) -> EndpointTarget {
        EndpointTarget {
            id: 3,
            account_id: 9,
            url: "https://hooks.example/in".into(),
            signing: Signing::parse(1, "whsec_x", None, None),
            failing_since_ms,
            chat: None,
        }
    }

    fn response(status: u16, snippet: &str, retry_after: Option<&str>) -> Sent {
        Sent::response(&HttpResponse {
            status,
            retry_after: retry_after.map(str::to_string),
            received_ms: NOW - 4,
            body_snippet: snippet.into(),
        })
    }

    fn done(next: Next, sent: Sent) -> Done {
        Done {
            number: 3,
            t_attempt: NOW - 10,
            duration_ms: 10,
            now: NOW,
            sent,
            next,
        }
    }

    fn network() -> Sent {
        Sent::failed(&SendError::Network("reset".into()))
    }

    #[test]
    fn webhook_attempt_response_is_classified_with_its_error_text() {
        let ok = response(204, "ignored", None);
        assert_eq!(
            (ok.outcome, ok.status, ok.error.as_str(), ok.received_ms),
            (Outcome::Delivered, Some(204), "", Some(NOW - 4))
        );
        let e = response(500, "  oops \n", None);
        assert_eq!(
            (e.outcome, e.error.as_str()),
            (Outcome::HttpError, "http 500: oops")
        );
        let t = response(503, "", Some("120"));
        assert_eq!(
            (t.outcome, t.error.as_str(), t.retry_after),
            (
                Outcome::Throttled,
                "http 503",
                Some(Duration::from_secs(120))
            )
        );
        assert_eq!(response(410, "gone", None).outcome, Outcome::Gone);
        let n = Sent::failed(&SendError::Timeout("after 10 s".into()));
        assert_eq!(
            (n.outcome, n.status, n.error.as_str()),
            (Outcome::Timeout, None, "timed out: after 10 s")
        );
        let r = Sent::failed(&SendError::Resolve("10.0.0.1".into()));
        assert_eq!(r.outcome, Outcome::Refused);
        assert_eq!(network().outcome, Outcome::Network);
        assert_eq!(Sent::invalid("bad".into()).outcome, Outcome::Invalid);
    }

    #[test]
    fn webhook_attempt_finish_decides_state_due_time_and_disabling() {
        let cfg = WebhookConfig {
            disable_failing_after: Some(Duration::from_secs(60)),
            ..WebhookConfig::default()
        };
        // Delivered by a recovering endpoint: done now, the run of failures ends.
        let f = done(Next::Delivered, response(200, "", None)).finish(&cfg, &endpoint(Some(1)));
        assert_eq!(
            (
                f.state,
                f.attempts,
                f.next_attempt_ms,
                f.done_ms,
                f.last_status
            ),
            ("delivered", 3, NOW, Some(NOW), Some(200))
        );
        assert_eq!(
            (f.last_error, f.health, f.disable),
            (None, Health::Recovered, None)
        );
        // A retry: pending, due after the delay; the run of failures starts.
        let retry = Next::RetryIn(Duration::from_secs(5));
        let f = done(retry, response(500, "x", None)).finish(&cfg, &endpoint(None));
        assert_eq!(
            (f.state, f.next_attempt_ms, f.done_ms),
            ("pending", NOW + 5_000, None)
        );
        assert_eq!(f.last_error.as_deref(), Some("http 500: x"));
        assert_eq!((f.health, f.disable), (Health::StartFailing, None));
        // Failing for the whole period: disabled (if still so when written).
        let f = done(Next::Failed, network()).finish(&cfg, &endpoint(Some(NOW - 60_000)));
        assert_eq!(
            (f.state, f.done_ms, f.health),
            ("failed", Some(NOW), Health::Keep)
        );
        let want = Disable::FailingSince {
            cutoff_ms: NOW - 60_000,
            period: "1 min".into(),
        };
        assert_eq!(f.disable, Some(want));
        // A millisecond short of the period: not yet.
        let f = done(retry, network()).finish(&cfg, &endpoint(Some(NOW - 59_999)));
        assert_eq!(f.disable, None);
        // Never, when the rule is off.
        let never = WebhookConfig {
            disable_failing_after: None,
            ..cfg.clone()
        };
        let f = done(Next::Failed, network()).finish(&never, &endpoint(Some(0)));
        assert_eq!(f.disable, None);
        // A 410 disables at once, naming the url's host (its path may be a credential).
        let f = done(Next::Disable, response(410, "", None)).finish(&never, &endpoint(None));
        match f.disable {
            Some(Disable::Gone(r)) => {
                assert!(
                    r.starts_with("410 Gone from https://hooks.example at "),
                    "{r}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn webhook_attempt_facts_name_the_channel_audit_and_disabling() {
        let claimed = |kind, payload: &str| Claimed {
            delivery: NewDelivery {
                id: "msg_1".into(),
                endpoint_id: 3,
                kind,
                cursor: Cursor {
                    block: 7,
                    log_index: 2,
                },
                payload: payload.into(),
                t_detect_ms: 5,
            },
            attempts: 2,
            endpoint: Arc::new(endpoint(None)),
        };
        let d = done(Next::Delivered, response(200, "", None));
        let trade = d
            .latency_row(&claimed(Kind::Trade, r#"{"audit": false}"#), 4)
            .unwrap();
        assert_eq!((&*trade.channel, trade.backfilled), ("webhook", 0));
        assert_eq!(trade.pending_id, 0, "no pending first");
        assert_eq!((trade.block_number, trade.log_index), (7, 2));
        assert_eq!(
            (trade.t_push_ms, trade.epoch, trade.target_id),
            (NOW - 4, 4, 3)
        );
        assert_eq!(trade.attempt, 3, "the attempt that delivered it");
        let confirmed = r#"{"audit": false, "trade": {"side": 0}, "pending_id": 17}"#;
        let confirmed = d.latency_row(&claimed(Kind::Trade, confirmed), 4).unwrap();
        assert_eq!((&*confirmed.channel, confirmed.pending_id), ("webhook", 17));
        let p = r#"{"type":"pending","t_push_ms":0,"pending_id":18,"t_seen_ms":5}"#;
        let p = d.latency_row(&claimed(Kind::Pending, p), 4).unwrap();
        assert_eq!((&*p.channel, p.pending_id), (PENDING_CHANNEL, 18));
        let void = r#"{"type":"void","t_push_ms":0,"pending_id":18,"reason":"dropped"}"#;
        assert_eq!(d.latency_row(&claimed(Kind::Void, void), 4), None);
        let fin = d
            .latency_row(&claimed(Kind::Final, r#"{"audit":true}"#), 4)
            .unwrap();
        assert_eq!((&*fin.channel, fin.backfilled), (FINAL_CHANNEL, 1));
        assert_ne!(FINAL_CHANNEL, CHANNEL);
        // No response head: the latency ends when the attempt did.
        let late = done(Next::Delivered, network())
            .latency_row(&claimed(Kind::Trade, "{}"), 4)
            .unwrap();
        assert_eq!(late.t_push_ms, NOW);

        let row =
            done(Next::Failed, network()).log_row(&claimed(Kind::Retract, "{}"), Some("gone"));
        assert_eq!(
            (row.attempt, row.account_id, row.kind.as_str()),
            (3, 9, "retract")
        );
        assert_eq!((row.status_code, row.outcome.as_str()), (0, "network"));
        assert_eq!(row.error, "reset; endpoint disabled: gone");
        assert_eq!(log_error("", Some("gone")), "endpoint disabled: gone");
        assert_eq!(log_error("http 500", None), "http 500");
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
        assert_eq!(human(Duration::from_secs(36 * 3_600)), "36 h");
        assert_eq!(human(Duration::from_secs(2)), "2 s");
        assert_eq!(human(Duration::from_millis(2_500)), "2500 ms");
    }
}

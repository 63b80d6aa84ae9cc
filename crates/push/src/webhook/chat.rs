//! A chat endpoint's attempt (Discord, Slack, Telegram: [`pmw_core::chat`]): the alerts its
//! queue holds, one or several folded into a digest, posted as one readable message in the
//! service's format, without signature headers, through the same guarded client. A rate-limit
//! answer (each service's own: Discord `retry_after`, Slack `Retry-After`, Telegram
//! `parameters.retry_after`) holds the endpoint until then (in memory, per dispatcher): every
//! alert claimed meanwhile waits with it, unsent and not counted as a failed attempt, and they
//! all go out as one digest when it may send again. Each delivery a message carries records
//! the message's id (`webhook_deliveries.message_id`) and gets its own result and
//! `delivery_log` row, as a signed attempt does: retries, the failure run and auto-disable are
//! the same; a destination the service says is gone disables the endpoint like a 410. Chat
//! messages add no `push_latency` row (a digest's wait is the service's, not pmw's latency).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use pmw_core::chat::render::{self, Alert, DIGEST_MAX};
use pmw_core::chat::{limits, ChatTarget};
use pmw_core::message::{Kind, PushedMessage};
use pmw_core::{redact, UnixMs};

use super::attempt::{account, write, Attempted, Done, Sent};
use super::context::Ctx;
use super::error::WebhookError;
use super::retry::{self, Next, Outcome};
use super::store::{Claimed, Disable};
use pmw_session::recorder::Fact;

/// The next message's deliveries: `first` and what follows it ahead, up to [`DIGEST_MAX`].
pub(crate) fn batch(
    first: Claimed,
    ahead: &mut std::collections::VecDeque<Claimed>,
) -> Vec<Claimed> {
    let mut out = vec![first];
    while out.len() < DIGEST_MAX {
        match ahead.pop_front() {
            Some(c) => out.push(c),
            None => break,
        }
    }
    out
}

/// Post `rows` (claimed, one chat endpoint's, in ledger order) as one message, or hold them
/// while the endpoint is rate-limited; write each one's result.
pub(crate) async fn attempt(ctx: Arc<Ctx>, rows: Vec<Claimed>) -> Result<Attempted, WebhookError> {
    let Some(target) = rows.first().and_then(|c| c.endpoint.chat.clone()) else {
        return Ok(Attempted {
            disabled: false,
            settled: true,
        });
    };
    let endpoint = rows[0].delivery.endpoint_id;
    let now = UnixMs::now().as_i64();
    // A `final` gets no chat message (the API refuses `final` for chat endpoints; one queued
    // before is settled silently).
    let (finals, rows): (Vec<Claimed>, Vec<Claimed>) = rows
        .into_iter()
        .partition(|c| c.delivery.kind == Kind::Final);
    for c in &finals {
        ctx.results
            .delivered(&c.delivery.id, c.attempts, 0, now)
            .await?;
    }
    if rows.is_empty() {
        return Ok(Attempted {
            disabled: false,
            settled: true,
        });
    }
    if let Some(until) = held_until(&ctx, endpoint, now) {
        let why = format!(
            "rate limited by {} until {}: held for one digest",
            target.kind.as_str(),
            UnixMs(until).to_rfc3339()
        );
        hold(&ctx, &rows, until, None, &why).await?;
        return Ok(Attempted {
            disabled: false,
            settled: false,
        });
    }
    let t_attempt = UnixMs::now().as_i64();
    let started = Instant::now();
    let message_id = format!("chat_{endpoint}_{t_attempt}_{}", rows[0].delivery.cursor);
    let sent = send(&ctx, &target, &rows, &message_id).await;
    let duration_ms = started.elapsed().as_millis() as i64;
    if let Some(wait) = sent.1 {
        let until = UnixMs::now().as_i64() + wait.as_millis() as i64;
        ctx.held.lock().expect("held map").insert(endpoint, until);
        let why = format!(
            "{}; rate limited by {} for {} ms: held for one digest",
            sent.0.error,
            target.kind.as_str(),
            wait.as_millis()
        );
        hold(&ctx, &rows, until, sent.0.status, &why).await?;
        tracing::info!(
            endpoint,
            alerts = rows.len(),
            wait_ms = wait.as_millis() as u64,
            "chat endpoint rate limited"
        );
        return Ok(Attempted {
            disabled: false,
            settled: false,
        });
    }
    settle(&ctx, &target, rows, sent.0, (t_attempt, duration_ms)).await
}

/// Write each carried delivery's result of one sent message, as a signed attempt does.
async fn settle(
    ctx: &Arc<Ctx>,
    target: &ChatTarget,
    rows: Vec<Claimed>,
    sent: Sent,
    (t_attempt, duration_ms): (i64, i64),
) -> Result<Attempted, WebhookError> {
    let now = UnixMs::now().as_i64();
    let number = rows.iter().map(|c| c.attempts).max().unwrap_or(0) + 1;
    let next = retry::plan(
        number as u32,
        sent.outcome,
        sent.retry_after,
        &mut rand::thread_rng(),
    );
    let mut out = Attempted {
        disabled: false,
        settled: next == Next::Delivered,
    };
    for c in &rows {
        let done = Done {
            number: c.attempts + 1,
            t_attempt,
            duration_ms,
            now,
            sent: sent.clone(),
            next,
        };
        let mut finish = done.finish(&ctx.cfg, &c.endpoint);
        if next == Next::Disable {
            finish.disable = Some(Disable::Gone(format!(
                "{} answered {} (the destination is gone) from {} at {}",
                target.kind.as_str(),
                sent.status.unwrap_or(0),
                redact::url(&c.endpoint.url),
                UnixMs(now).to_rfc3339()
            )));
        }
        let written = write(ctx, c, &done, &finish).await;
        let disabled = written.as_ref().ok().and_then(|w| w.disabled.as_deref());
        ctx.facts.record(Fact::Attempt(done.log_row(c, disabled)));
        let written = written?;
        account(ctx, c, &done, &written, false);
        out.disabled |= written.disabled.is_some();
    }
    Ok(out)
}

/// Render and post the message; what came back, and how long the service asked to wait when
/// it answered with its rate limit.
async fn send(
    ctx: &Ctx,
    target: &ChatTarget,
    rows: &[Claimed],
    message_id: &str,
) -> (Sent, Option<std::time::Duration>) {
    let alerts = match alerts(ctx, rows).await {
        Ok(a) => a,
        Err(e) => return (Sent::invalid(e), None),
    };
    let ids: Vec<&str> = rows.iter().map(|c| c.delivery.id.as_str()).collect();
    if let Err(e) = mark(ctx, &ids, message_id).await {
        return (Sent::invalid(format!("message id not recorded: {e}")), None);
    }
    let body = render::body(target, &alerts).to_string().into_bytes();
    let url = target.post_url(&ctx.cfg.telegram_api);
    match ctx.client.post_unsigned(&url, body).await {
        Ok(r) => {
            let mut sent = Sent::response(&r);
            if limits::is_gone(target.kind, r.status) {
                sent.outcome = Outcome::Gone;
            }
            let wait = limits::retry_after(
                target.kind,
                r.status,
                r.retry_after.as_deref(),
                &r.body_snippet,
            );
            (sent, wait)
        }
        Err(e) => (Sent::failed(&e), None),
    }
}

/// The alerts of `rows`: each stored body read back, with the account's label of its wallet.
async fn alerts(ctx: &Ctx, rows: &[Claimed]) -> Result<Vec<Alert>, String> {
    let mut out = Vec::with_capacity(rows.len());
    for c in rows {
        let m: PushedMessage = serde_json::from_str(&c.delivery.payload)
            .map_err(|e| format!("payload {}: {e}", c.delivery.id))?;
        out.push(Alert {
            kind: m.kind,
            msg: m.body,
            label: None,
        });
    }
    // Labels are a nicety: a failed lookup sends short addresses.
    if let Ok(labels) = labels(ctx, rows[0].endpoint.account_id, &out).await {
        for a in &mut out {
            a.label = labels.get(&a.msg.trade.wallet.to_lowercase()).cloned();
        }
    }
    Ok(out)
}

async fn labels(
    ctx: &Ctx,
    account: i64,
    alerts: &[Alert],
) -> Result<HashMap<String, String>, WebhookError> {
    let wallets: Vec<&str> = alerts.iter().map(|a| a.msg.trade.wallet.as_str()).collect();
    let c = ctx.pool.get().await?;
    let rows = c
        .query(include_str!("sql/chat_labels.sql"), &[&account, &wallets])
        .await
        .map_err(WebhookError::from)?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

async fn mark(ctx: &Ctx, ids: &[&str], message_id: &str) -> Result<(), WebhookError> {
    let c = ctx.pool.get().await?;
    c.execute(
        include_str!("sql/chat_mark.sql"),
        &[&ids, &message_id, &ctx.epoch],
    )
    .await
    .map_err(WebhookError::from)?;
    Ok(())
}

/// Until when `endpoint` is rate-limited, if it still is at `now`.
fn held_until(ctx: &Ctx, endpoint: i64, now: i64) -> Option<i64> {
    let mut held = ctx.held.lock().expect("held map");
    match held.get(&endpoint) {
        Some(until) if *until > now => Some(*until),
        Some(_) => {
            held.remove(&endpoint);
            None
        }
        None => None,
    }
}

/// Hold `rows` unsent until `until` (claims released, attempts unchanged).
async fn hold(
    ctx: &Ctx,
    rows: &[Claimed],
    until: i64,
    status: Option<u16>,
    why: &str,
) -> Result<(), WebhookError> {
    let ids: Vec<&str> = rows.iter().map(|c| c.delivery.id.as_str()).collect();
    let status = status.map(i32::from);
    let c = ctx.pool.get().await?;
    c.execute(
        include_str!("sql/chat_hold.sql"),
        &[&ids, &until, &status, &why, &ctx.epoch],
    )
    .await
    .map_err(WebhookError::from)?;
    Ok(())
}

//! pmw-push's Prometheus metrics (served on `PMW_PUSH_METRICS_ADDR` by the leader and the
//! standby alike, see [`crate::config`]). A leaf: it takes plain values. Most are mirrored once
//! a second from the counters the leader already keeps ([`LeaderCounts`], filled by the round
//! loop's heartbeat) by [`leader_state`]; rounds and deliveries are recorded where they happen.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `pmw_push_leader` | gauge | 1 on the instance leading the slot, 0 on the standby |
//! | `pmw_push_epoch` | gauge | the leader's PushEpoch |
//! | `pmw_push_rounds_total{outcome}` | counter | rounds `completed` or `failed` |
//! | `pmw_push_round_duration_seconds{outcome}` | histogram | how long a round took |
//! | `pmw_push_ws_round_stage_seconds{stage}` | histogram | a WebSocket round's parts: `state` (Postgres), `read` (the Postgres hot ledger; ClickHouse only below its floor), `publish` (edge mode: storing the round on the bus), `claim` (the fenced cursor move), `dispatch` (queueing frames to sessions) |
//! | `pmw_push_frames_queued_total` | counter | frames queued to WebSocket sessions |
//! | `pmw_push_frames_sent_total` | counter | frames written to a WebSocket |
//! | `pmw_push_slow_consumer_closes_total` | counter | sessions closed 1013 (queue full) |
//! | `pmw_push_sessions` | gauge | WebSocket sessions open |
//! | `pmw_push_webhook_attempts_total{outcome}` | counter | `delivered`, `failed` (retried), `gave_up` |
//! | `pmw_push_webhook_backlog` / `pmw_push_webhook_due` | gauge | pending deliveries of enabled endpoints, and those due now |
//! | `pmw_push_detect_to_push_seconds{channel}` | histogram | block detected → frame written (`ws`) or webhook delivered (`webhook`) |
//! | `pmw_push_clickhouse_insert_errors_total{table}` | counter | failed ClickHouse inserts of the recorder |
//! | `pmw_push_facts_dropped_total` | counter | latency/delivery rows the recorder gave up on |
//! | `pmw_push_pending_events_total{kind}` | counter | pending-tier events (`pending`, `void`) the pending lane queued to sessions, the broker and webhooks |
//! | `pmw_push_pending_seen_to_queued_seconds` | histogram | a pending fill first seen in a provider's pool → its `pending` queued to the sessions (the lane's part of seen-pending → pushed) |
//! | `pmw_push_pending_lane_failures_total` | counter | pending-lane restarts (a lost LISTEN session or a failed read: it reads the same events again) |
//! | `pmw_push_pending_bus_failures_total` | counter | edge mode: `pending` parts the broker did not store (not retried: a resuming session gets the fills still open) |

use std::time::Duration;

pub use pmw_session::telemetry::{
    recorder_failed, CH_INSERT_ERRORS, DETECT_TO_PUSH, FACTS_DROPPED, FRAMES_SENT,
};

use std::time::Instant;

pub const LEADER: &str = "pmw_push_leader";
pub const PENDING_EVENTS: &str = "pmw_push_pending_events_total";
pub const PENDING_SEEN_TO_QUEUED: &str = "pmw_push_pending_seen_to_queued_seconds";
pub const PENDING_LANE_FAILURES: &str = "pmw_push_pending_lane_failures_total";
pub const PENDING_BUS_FAILURES: &str = "pmw_push_pending_bus_failures_total";
pub const EPOCH: &str = "pmw_push_epoch";
pub const ROUNDS: &str = "pmw_push_rounds_total";
pub const ROUND_SECONDS: &str = "pmw_push_round_duration_seconds";
pub const WS_STAGE_SECONDS: &str = "pmw_push_ws_round_stage_seconds";
pub const FRAMES_QUEUED: &str = "pmw_push_frames_queued_total";
pub const SLOW_CLOSES: &str = "pmw_push_slow_consumer_closes_total";
pub const SESSIONS: &str = "pmw_push_sessions";
pub const WEBHOOK_ATTEMPTS: &str = "pmw_push_webhook_attempts_total";
pub const WEBHOOK_BACKLOG: &str = "pmw_push_webhook_backlog";
pub const WEBHOOK_DUE: &str = "pmw_push_webhook_due";

/// At start (standby or leader): every series exists at 0, `pmw_push_leader` 0.
pub fn init() {
    metrics::gauge!(LEADER).set(0.0);
    for outcome in ["completed", "failed"] {
        metrics::counter!(ROUNDS, "outcome" => outcome).increment(0);
    }
    for c in [FRAMES_QUEUED, FRAMES_SENT, SLOW_CLOSES, FACTS_DROPPED] {
        metrics::counter!(c).increment(0);
    }
    for table in ["push_latency", "delivery_log"] {
        metrics::counter!(CH_INSERT_ERRORS, "table" => table).increment(0);
    }
}

/// One round ended (`ok`: completed) after `took`.
pub fn round(ok: bool, took: Duration) {
    let outcome = if ok { "completed" } else { "failed" };
    metrics::counter!(ROUNDS, "outcome" => outcome).increment(1);
    metrics::histogram!(ROUND_SECONDS, "outcome" => outcome).record(took.as_secs_f64());
}

/// A WebSocket round that delivered something: how long each of its parts took, and (debug log)
/// how long after the newest trade's block was detected each part ended. `published`: when the
/// round was stored on the bus (edge mode), between the read and the claim.
pub fn ws_round_stages(
    stages: &Stages,
    published: Option<Instant>,
    dispatched: Instant,
    newest_detect_ms: Option<i64>,
) {
    let stored = published.unwrap_or(stages.read);
    let parts = [
        ("state", stages.started, stages.state),
        ("read", stages.state, stages.read),
        ("publish", stages.read, stored),
        ("claim", stored, stages.claimed),
        ("dispatch", stages.claimed, dispatched),
    ];
    for (stage, from, to) in parts {
        if stage == "publish" && published.is_none() {
            continue;
        }
        metrics::histogram!(WS_STAGE_SECONDS, "stage" => stage).record((to - from).as_secs_f64());
    }
    if let Some(detect) = newest_detect_ms {
        let ago = after_detect(detect, dispatched);
        tracing::debug!(
            started = ago(stages.started),
            state = ago(stages.state),
            read = ago(stages.read),
            published = ago(stored),
            claimed = ago(stages.claimed),
            dispatched = ago(dispatched),
            "ws round after detect (ms)"
        );
    }
}

/// A webhook round that queued trades (debug log): how long after the newest trade's block was
/// detected each part ended; the dispatcher stamps `t_push_ms` on each send after `handed`.
pub fn hook_round_stages(
    stages: &Stages,
    enqueued: Instant,
    handed: Instant,
    newest_detect_ms: Option<i64>,
) {
    let Some(detect) = newest_detect_ms else {
        return;
    };
    let ago = after_detect(detect, handed);
    tracing::debug!(
        started = ago(stages.started),
        state = ago(stages.state),
        read = ago(stages.read),
        enqueued = ago(enqueued),
        handed = ago(handed),
        "webhook round after detect (ms)"
    );
}

/// Milliseconds from `detect` (wall clock) to an instant at or before `last`, which is taken as
/// now: the stage lines' clock.
fn after_detect(detect: i64, last: Instant) -> impl Fn(Instant) -> i64 {
    let now = pmw_core::UnixMs::now().0;
    move |t: Instant| now - detect - last.duration_since(t).as_millis() as i64
}

/// When a WebSocket round's parts ended.
#[derive(Debug, Clone, Copy)]
pub struct Stages {
    pub started: Instant,
    /// The state statement answered.
    pub state: Instant,
    /// The trades were read.
    pub read: Instant,
    /// The fenced claim and cursor move committed.
    pub claimed: Instant,
}

/// The leader's counters as the heartbeat reads them.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeaderCounts {
    pub epoch: i64,
    pub frames_queued: u64,
    pub slow_closed: u64,
    pub sessions: usize,
    pub webhooks_delivered: u64,
    pub webhooks_failed: u64,
    pub webhooks_gave_up: u64,
    pub webhook_backlog: u64,
    pub webhooks_due: u64,
}

/// The leader's counters, mirrored (called with every leader heartbeat).
pub fn leader_state(c: &LeaderCounts) {
    metrics::gauge!(LEADER).set(1.0);
    metrics::gauge!(EPOCH).set(c.epoch as f64);
    metrics::counter!(FRAMES_QUEUED).absolute(c.frames_queued);
    metrics::counter!(SLOW_CLOSES).absolute(c.slow_closed);
    metrics::gauge!(SESSIONS).set(c.sessions as f64);
    for (outcome, n) in [
        ("delivered", c.webhooks_delivered),
        ("failed", c.webhooks_failed),
        ("gave_up", c.webhooks_gave_up),
    ] {
        metrics::counter!(WEBHOOK_ATTEMPTS, "outcome" => outcome).absolute(n);
    }
    metrics::gauge!(WEBHOOK_BACKLOG).set(c.webhook_backlog as f64);
    metrics::gauge!(WEBHOOK_DUE).set(c.webhooks_due as f64);
}

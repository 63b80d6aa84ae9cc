//! The availability sampler: once a second (while this instance holds the stats lock) it reads
//! from Postgres how far push and ingest trail and writes one `availability_samples` row to
//! ClickHouse ([`pmw_core::ch::availability`]). A second with no row (the sampler down) is
//! unknown on the dashboard, never available.
//!
//! - **Push** is available when the oldest trade it owes (past the push cursor, at or below the
//!   ingest watermark) has been readable for at most [`PUSH_WITHIN_MS`]; nothing owed is lag 0.
//!   "Readable since" is when the watermark reached that trade's block, as the sampler saw the
//!   watermark move (`ingest_cursor.updated_ms`); before the sampler saw it (just started), the
//!   block's detect time, which can only overstate the lag.
//! - **Ingest** is available when pmw-live's writer heartbeat is at most [`LIVE_BEAT_FRESH_MS`]
//!   old and the newest head it received is at most [`INGEST_WITHIN_BLOCKS`] above the
//!   watermark.
//! - Postgres not answering within [`READ_TIMEOUT`] is a sample with both unavailable: every push
//!   round and every ingest commit needs it.
//!
//! Samples wait in a bounded buffer while ClickHouse is away and are written when it is back.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pmw_core::backoff::{Backoff, Policy};
use pmw_core::ch::availability::{insert_samples, AvailabilitySample};
use pmw_core::ch::ChClient;
use pmw_core::pg::PgPool;
use pmw_core::UnixMs;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

/// One sample per this period.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Push is available while the oldest trade it owes has been readable for at most this long.
pub const PUSH_WITHIN_MS: i64 = 5_000;
/// Ingest is available while the newest head pmw-live received is at most this many blocks above
/// the watermark (about 4 s of Polygon blocks)…
pub const INGEST_WITHIN_BLOCKS: i64 = 2;
/// …and its writer heartbeat (every 2 s) is at most this old.
pub const LIVE_BEAT_FRESH_MS: i64 = 6_000;
/// The Postgres read of one sample gives up after this long.
pub const READ_TIMEOUT: Duration = Duration::from_millis(900);
/// Samples further apart than this do not continue a run of failures (unknown in between).
const RUN_BREAK_MS: i64 = 2_500;
/// Samples kept while ClickHouse does not take them (6 hours); beyond, the oldest are dropped.
const MAX_BUFFERED: usize = 6 * 3_600;
/// Watermark moves remembered to date when a block became readable.
const WATERMARK_MEMORY: usize = 4_096;
/// `pmw_stats_availability_samples_total{outcome}`: `written`, `dropped`, `read_failed`.
pub const SAMPLES: &str = "pmw_stats_availability_samples_total";

/// What one read of Postgres shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// The ingest watermark and when it moved there.
    pub watermark: Option<(u64, i64)>,
    /// The push cursor's block.
    pub push_block: Option<u64>,
    /// The first block push owes (holding trades, past its cursor, at or below the watermark)
    /// and its detect time.
    pub owed: Option<(u64, i64)>,
    /// pmw-live's writer heartbeat: when it beat and the newest head it had received.
    pub live: Option<(i64, Option<u64>)>,
    /// The webhook lane's cursor block and the first block it owes (as `owed` for push).
    pub webhook_block: Option<u64>,
    pub webhook_owed: Option<(u64, i64)>,
    /// Cause facts: the push epoch, the live writer's instance, the RPC providers it does not
    /// count as healthy, the latest start of a pmw service instance (ms, service).
    pub push_epoch: Option<i64>,
    pub live_instance: Option<String>,
    pub providers_demoted: u32,
    pub newest_start: Option<(i64, String)>,
}

/// A run of failing samples: where it started and the last sample seen.
#[derive(Debug, Default)]
struct Run {
    since: Option<i64>,
    last_ms: Option<i64>,
}

impl Run {
    /// Step with a sample at `t_ms`; the run's start when failing (0 when ok).
    fn step(&mut self, t_ms: i64, ok: bool) -> i64 {
        let continues = self.last_ms.is_some_and(|l| t_ms - l <= RUN_BREAK_MS);
        self.last_ms = Some(t_ms);
        if ok {
            self.since = None;
            return 0;
        }
        let since = match self.since {
            Some(s) if continues => s,
            _ => t_ms,
        };
        self.since = Some(since);
        since
    }
}

/// Turns observations into samples; remembers the watermark's moves and the runs of failures.
#[derive(Debug, Default)]
pub struct Sampler {
    /// (watermark, when it moved there), in the order seen.
    moves: VecDeque<(u64, i64)>,
    push: Run,
    ingest: Run,
    webhook: Run,
    /// The last write to ClickHouse failed (set by the writer; recorded as `ch_ok = 0`).
    pub ch_failing: bool,
}

impl Sampler {
    pub fn new() -> Sampler {
        Sampler::default()
    }

    /// The sample of `o`, read at `t_ms` (`None`: Postgres did not answer).
    pub fn sample(&mut self, t_ms: i64, o: Option<&Observation>) -> AvailabilitySample {
        let push_lag = o.and_then(|o| self.push_lag(t_ms, o));
        let ingest_lag = o.and_then(|o| ingest_lag(t_ms, o));
        let webhook_lag = o.and_then(|o| {
            o.webhook_block?;
            lane_lag(&*self, t_ms, o.webhook_owed)
        });
        let push_ok = push_lag.is_some_and(|l| l <= PUSH_WITHIN_MS);
        let ingest_ok = ingest_lag.is_some_and(|l| l <= INGEST_WITHIN_BLOCKS);
        // No webhook cursor is not measured (never late); Postgres not answering is late.
        let webhook_ok = o.is_some() && webhook_lag.is_none_or(|l| l <= PUSH_WITHIN_MS);
        AvailabilitySample {
            t_ms,
            push_lag_ms: push_lag.unwrap_or(-1),
            push_ok: u8::from(push_ok),
            push_down_since_ms: self.push.step(t_ms, push_ok),
            ingest_lag_blocks: ingest_lag.unwrap_or(-1),
            ingest_ok: u8::from(ingest_ok),
            ingest_down_since_ms: self.ingest.step(t_ms, ingest_ok),
            watermark: o.and_then(|o| o.watermark).map_or(0, |w| w.0),
            head: o.and_then(|o| o.live).and_then(|l| l.1).unwrap_or(0),
            push_block: o.and_then(|o| o.push_block).unwrap_or(0),
            webhook_lag_ms: webhook_lag.unwrap_or(-1),
            webhook_ok: u8::from(webhook_ok),
            webhook_down_since_ms: self.webhook.step(t_ms, webhook_ok),
            pg_ok: u8::from(o.is_some()),
            ch_ok: u8::from(!self.ch_failing),
            push_epoch: o.and_then(|o| o.push_epoch).unwrap_or(0),
            live_instance: o.and_then(|o| o.live_instance.clone()).unwrap_or_default(),
            providers_demoted: o.map_or(0, |o| o.providers_demoted),
            newest_start_ms: o.and_then(|o| o.newest_start.as_ref()).map_or(0, |n| n.0),
            newest_start_service: o
                .and_then(|o| o.newest_start.as_ref())
                .map_or(String::new(), |n| n.1.clone()),
        }
    }

    /// How long the oldest trade push owes has been readable; `None` without a watermark or a
    /// push cursor (nothing is pushed then).
    fn push_lag(&mut self, t_ms: i64, o: &Observation) -> Option<i64> {
        let (wm, moved_ms) = o.watermark?;
        self.remember(wm, moved_ms);
        o.push_block?;
        lane_lag(self, t_ms, o.owed)
    }

    fn remember(&mut self, wm: u64, moved_ms: i64) {
        match self.moves.back() {
            Some((last, _)) if *last == wm => return,
            // The watermark went back (a reorg): what was remembered above it is void.
            Some((last, _)) if *last > wm => self.moves.clear(),
            _ => {}
        }
        self.moves.push_back((wm, moved_ms));
        if self.moves.len() > WATERMARK_MEMORY {
            self.moves.pop_front();
        }
    }

    /// When the watermark reached `block`, if the sampler saw it happen: the first remembered
    /// move at or above it, unless that is the oldest one remembered and above it (the watermark
    /// may have passed the block earlier).
    fn readable_since(&self, block: u64) -> Option<i64> {
        let i = self.moves.iter().position(|(wm, _)| *wm >= block)?;
        let (wm, moved_ms) = self.moves[i];
        (i > 0 || wm == block).then_some(moved_ms)
    }
}

/// How long the oldest trade a lane owes (`owed`: block, detect time) has been readable (0: none
/// owed), by the watermark moves `s` remembered.
fn lane_lag(s: &Sampler, t_ms: i64, owed: Option<(u64, i64)>) -> Option<i64> {
    let Some((block, t_detect_ms)) = owed else {
        return Some(0);
    };
    let since = s.readable_since(block).unwrap_or(t_detect_ms);
    Some((t_ms - since).max(0))
}

/// Newest head received − watermark (0 when the heartbeat's head is older than the watermark);
/// `None` without a fresh pmw-live writer heartbeat, a head or a watermark.
fn ingest_lag(t_ms: i64, o: &Observation) -> Option<i64> {
    let (beat_ms, head) = o.live?;
    if t_ms - beat_ms > LIVE_BEAT_FRESH_MS {
        return None;
    }
    let (wm, _) = o.watermark?;
    Some((head? as i64 - wm as i64).max(0))
}

/// Read one observation.
pub async fn observe(pg: &PgPool) -> Result<Observation, String> {
    let c = pg.get().await.map_err(|e| e.to_string())?;
    let r = c
        .query_one(include_str!("sql/availability_probe.sql"), &[])
        .await
        .map_err(|e| e.to_string())?;
    let block = |i: usize| r.get::<_, Option<i64>>(i).map(|b| b as u64);
    let ms = |i: usize| r.get::<_, Option<i64>>(i);
    let text = |i: usize| r.get::<_, Option<String>>(i);
    Ok(Observation {
        watermark: block(0).zip(ms(1)),
        push_block: block(2),
        owed: block(3).zip(ms(4)),
        live: ms(5).map(|beat| (beat, block(6))),
        webhook_block: block(7),
        webhook_owed: block(8).zip(ms(9)),
        push_epoch: ms(10),
        live_instance: text(11),
        providers_demoted: ms(12).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        newest_start: ms(13).zip(text(14)),
    })
}

/// Samples waiting for ClickHouse.
type Buffer = Arc<Mutex<VecDeque<AvailabilitySample>>>;

/// The sampler's two tasks: one samples every second, one writes what is buffered.
pub struct Running {
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Start sampling `pg` into `ch` until `stop`.
    pub fn spawn(pg: PgPool, ch: ChClient, stop: CancellationToken) -> Running {
        let buffer: Buffer = Arc::default();
        let ch_failing = Arc::new(AtomicBool::new(false));
        for outcome in ["written", "dropped", "read_failed"] {
            metrics::counter!(SAMPLES, "outcome" => outcome).increment(0);
        }
        let tasks = vec![
            tokio::spawn(sample_loop(
                pg,
                buffer.clone(),
                ch_failing.clone(),
                stop.clone(),
            )),
            tokio::spawn(write_loop(ch, buffer, ch_failing, stop)),
        ];
        Running { tasks }
    }

    /// Wait for both tasks (after `stop` was cancelled; the writer makes one last attempt),
    /// aborting what is still running after `within`.
    pub async fn join(self, within: Duration) {
        for mut t in self.tasks {
            if tokio::time::timeout(within, &mut t).await.is_err() {
                tracing::warn!("availability sampler did not stop in time");
                t.abort();
            }
        }
    }
}

async fn sample_loop(
    pg: PgPool,
    buffer: Buffer,
    ch_failing: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut sampler = Sampler::new();
    let mut failing = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let t_ms = UnixMs::now().0;
        let read = match tokio::time::timeout(READ_TIMEOUT, observe(&pg)).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {} ms", READ_TIMEOUT.as_millis())),
        };
        let o = match read {
            Ok(o) => {
                if failing {
                    tracing::info!("availability sampler reads postgres again");
                }
                failing = false;
                Some(o)
            }
            Err(e) => {
                metrics::counter!(SAMPLES, "outcome" => "read_failed").increment(1);
                if !failing {
                    tracing::warn!(error = %e, "availability sample: postgres did not answer; push and ingest count as unavailable");
                }
                failing = true;
                None
            }
        };
        sampler.ch_failing = ch_failing.load(Ordering::Relaxed);
        let row = sampler.sample(t_ms, o.as_ref());
        let mut b = lock(&buffer);
        b.push_back(row);
        trim(&mut b);
    }
}

async fn write_loop(
    ch: ChClient,
    buffer: Buffer,
    ch_failing: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    let mut backoff = Backoff::new(Policy::STORE);
    let mut wait = SAMPLE_EVERY;
    loop {
        let stopping = tokio::select! {
            _ = stop.cancelled() => true,
            _ = tokio::time::sleep(wait) => false,
        };
        let rows: Vec<AvailabilitySample> = lock(&buffer).drain(..).collect();
        if !rows.is_empty() {
            match insert_samples(&ch, &rows).await {
                Ok(()) => {
                    ch_failing.store(false, Ordering::Relaxed);
                    metrics::counter!(SAMPLES, "outcome" => "written").increment(rows.len() as u64);
                    if backoff.failures() > 0 {
                        tracing::info!(rows = rows.len(), "availability samples written again");
                    }
                    backoff.reset();
                    wait = SAMPLE_EVERY;
                }
                Err(e) => {
                    ch_failing.store(true, Ordering::Relaxed);
                    if backoff.failures() == 0 {
                        tracing::warn!(error = %e, buffered = rows.len(), "availability samples not written yet");
                    }
                    // Back in front of what was sampled meanwhile, in order; then the bound.
                    let mut b = lock(&buffer);
                    for r in rows.into_iter().rev() {
                        b.push_front(r);
                    }
                    trim(&mut b);
                    wait = backoff.next_wait().max(SAMPLE_EVERY);
                }
            }
        }
        if stopping {
            return;
        }
    }
}

fn lock(b: &Buffer) -> std::sync::MutexGuard<'_, VecDeque<AvailabilitySample>> {
    b.lock().unwrap_or_else(|p| p.into_inner())
}

/// Drop the oldest samples beyond [`MAX_BUFFERED`] (counted).
fn trim(b: &mut VecDeque<AvailabilitySample>) {
    let excess = b.len().saturating_sub(MAX_BUFFERED);
    b.drain(..excess);
    metrics::counter!(SAMPLES, "outcome" => "dropped").increment(excess as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(wm: u64, moved: i64, push: u64, owed: Option<(u64, i64)>) -> Observation {
        Observation {
            watermark: Some((wm, moved)),
            push_block: Some(push),
            owed,
            live: Some((moved, Some(wm))),
            ..Observation::default()
        }
    }

    #[test]
    fn push_lag_counts_from_when_the_watermark_reached_the_owed_block() {
        let mut s = Sampler::new();
        // Nothing owed: lag 0.
        let a = s.sample(10_000, Some(&seen(100, 9_500, 100, None)));
        assert_eq!((a.push_lag_ms, a.push_ok, a.push_down_since_ms), (0, 1, 0));
        // Block 101 became readable at 10_400; push still owes it at 11_000 and at 16_000.
        let b = s.sample(11_000, Some(&seen(101, 10_400, 100, Some((101, 10_100)))));
        assert_eq!((b.push_lag_ms, b.push_ok), (600, 1));
        let c = s.sample(15_400, Some(&seen(103, 15_000, 100, Some((101, 10_100)))));
        assert_eq!(
            (c.push_lag_ms, c.push_ok),
            (5_000, 1),
            "the bound is inclusive"
        );
        let d = s.sample(16_000, Some(&seen(103, 15_000, 100, Some((101, 10_100)))));
        assert_eq!(
            (d.push_lag_ms, d.push_ok, d.push_down_since_ms),
            (5_600, 0, 16_000)
        );
        let e = s.sample(17_000, Some(&seen(103, 15_000, 100, Some((101, 10_100)))));
        assert_eq!(
            (e.push_ok, e.push_down_since_ms),
            (0, 16_000),
            "the run goes on"
        );
        // Delivered: available again, the run ends.
        let f = s.sample(18_000, Some(&seen(103, 15_000, 103, None)));
        assert_eq!((f.push_ok, f.push_down_since_ms, f.push_block), (1, 0, 103));
    }

    #[test]
    fn a_block_passed_before_the_sampler_saw_it_counts_from_its_detect_time() {
        let mut s = Sampler::new();
        // First sample: the watermark is already at 105; owed block 101 (detected at 1_000).
        let a = s.sample(9_000, Some(&seen(105, 8_000, 100, Some((101, 1_000)))));
        assert_eq!((a.push_lag_ms, a.push_ok), (8_000, 0));
        // The owed block is the watermark itself: exact.
        let mut s = Sampler::new();
        let b = s.sample(9_000, Some(&seen(105, 8_000, 104, Some((105, 7_900)))));
        assert_eq!(b.push_lag_ms, 1_000);
    }

    #[test]
    fn a_gap_in_sampling_breaks_a_run_and_no_answer_is_unavailable() {
        let mut s = Sampler::new();
        let down = seen(101, 0, 100, Some((101, 0)));
        assert_eq!(s.sample(10_000, Some(&down)).push_down_since_ms, 10_000);
        assert_eq!(s.sample(11_000, Some(&down)).push_down_since_ms, 10_000);
        // Three seconds without a sample: a new run.
        assert_eq!(s.sample(14_000, Some(&down)).push_down_since_ms, 14_000);
        let none = s.sample(15_000, None);
        assert_eq!(
            (
                none.push_ok,
                none.push_lag_ms,
                none.ingest_ok,
                none.ingest_lag_blocks
            ),
            (0, -1, 0, -1)
        );
        assert_eq!(none.push_down_since_ms, 14_000);
    }

    #[test]
    fn ingest_needs_a_fresh_heartbeat_and_a_head_near_the_watermark() {
        let mut s = Sampler::new();
        let mut o = seen(100, 10_000, 100, None);
        o.live = Some((10_000, Some(102)));
        let a = s.sample(12_000, Some(&o));
        assert_eq!((a.ingest_lag_blocks, a.ingest_ok, a.head), (2, 1, 102));
        o.live = Some((10_000, Some(103)));
        let b = s.sample(13_000, Some(&o));
        assert_eq!(
            (b.ingest_lag_blocks, b.ingest_ok, b.ingest_down_since_ms),
            (3, 0, 13_000)
        );
        // A stale heartbeat: unknown lag, unavailable.
        o.live = Some((10_000, Some(100)));
        let c = s.sample(16_001, Some(&o));
        assert_eq!((c.ingest_lag_blocks, c.ingest_ok), (-1, 0));
        // A head older than the watermark is no lag.
        o.live = Some((16_500, Some(99)));
        let d = s.sample(17_000, Some(&o));
        assert_eq!((d.ingest_lag_blocks, d.ingest_ok), (0, 1));
        // No push cursor yet: push unavailable, ingest unaffected.
        o.push_block = None;
        let e = s.sample(18_000, Some(&o));
        assert_eq!((e.push_ok, e.push_lag_ms, e.ingest_ok), (0, -1, 1));
    }

    #[test]
    fn the_webhook_lane_and_the_cause_facts_are_recorded() {
        let mut s = Sampler::new();
        let mut o = seen(103, 10_400, 103, None);
        // The webhook lane owes block 101, passed before the sampler ran: from its detect time.
        o.webhook_block = Some(100);
        o.webhook_owed = Some((101, 10_100));
        o.push_epoch = Some(4);
        o.live_instance = Some("live-a".into());
        o.providers_demoted = 1;
        o.newest_start = Some((9_000, "pmw-push".into()));
        let a = s.sample(16_000, Some(&o));
        assert_eq!((a.push_ok, a.webhook_lag_ms, a.webhook_ok), (1, 5_900, 0));
        assert_eq!(a.webhook_down_since_ms, 16_000);
        assert_eq!((a.pg_ok, a.ch_ok, a.push_epoch), (1, 1, 4));
        assert_eq!(
            (a.live_instance.as_str(), a.providers_demoted),
            ("live-a", 1)
        );
        assert_eq!(
            (a.newest_start_ms, a.newest_start_service.as_str()),
            (9_000, "pmw-push")
        );
        // No webhook cursor: not measured, never late.
        o.webhook_block = None;
        let b = s.sample(17_000, Some(&o));
        assert_eq!(
            (b.webhook_lag_ms, b.webhook_ok, b.webhook_down_since_ms),
            (-1, 1, 0)
        );
        // Postgres not answering, ClickHouse failing: both recorded; the webhook lane is late.
        s.ch_failing = true;
        let c = s.sample(18_000, None);
        assert_eq!((c.pg_ok, c.ch_ok, c.webhook_ok, c.push_epoch), (0, 0, 0, 0));
        assert_eq!(c.live_instance, "");
    }

    #[test]
    fn a_watermark_that_goes_back_forgets_what_was_above() {
        let mut s = Sampler::new();
        s.sample(1_000, Some(&seen(100, 900, 100, None)));
        s.sample(2_000, Some(&seen(110, 1_900, 100, None)));
        s.sample(3_000, Some(&seen(105, 2_900, 100, None)));
        assert_eq!(s.readable_since(105), Some(2_900));
        assert_eq!(s.readable_since(104), None);
    }
}

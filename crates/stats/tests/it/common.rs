//! Shared test support: latency rows written through the production write path, the service
//! run in-process on port 0, HTTP helpers and an independent percentile.

use std::net::SocketAddr;
use std::time::Duration;

use pmw_core::ch::latency::{self, IngestLatencyRow, PushLatencyRow};
use pmw_core::CoreConfig;
use pmw_stats::StatsConfig;
use pmw_testkit::{eventually_every, ServiceHandle, TestDb};

pub const HOUR: i64 = 3_600_000;
pub const DAY: i64 = 86_400_000;
/// 9999-12-31T00:00:00Z in milliseconds.
pub const FAR_FUTURE_MS: i64 = 253_402_128_000_000;

/// Settings for an in-process instance: port 0, fast refresh.
pub fn stats_config(interval_ms: u64) -> StatsConfig {
    StatsConfig {
        stats_listen: "127.0.0.1:0".parse().unwrap(),
        stats_interval_ms: interval_ms,
        stats_lock_segment_ms: 200,
        ..StatsConfig::default()
    }
}

/// Start the service in-process; returns once it holds the lock and listens.
pub async fn start(cfg: CoreConfig, stats: StatsConfig) -> (ServiceHandle, SocketAddr) {
    ServiceHandle::start_bound(Duration::from_secs(60), move |shutdown, bound| {
        pmw_stats::run_with(cfg, stats, shutdown, Some(bound))
    })
    .await
}

/// An ingest row whose stages take `logs_d` and `stored_d` ms.
pub fn ingest(block: u64, t_detect_ms: i64, logs_d: i64, stored_d: i64) -> IngestLatencyRow {
    IngestLatencyRow {
        block_number: block,
        block_hash: format!("0x{block:064x}"),
        t_detect_ms,
        t_logs_ms: t_detect_ms + logs_d,
        t_stored_ms: t_detect_ms + stored_d,
        head_lead_ms: -700 + (block % 50) as i64,
        trade_count: 1,
        backfilled: 0,
    }
}

/// A push row detected at `t_detect_ms`, pushed at `t_push_ms`.
pub fn push(block: u64, channel: &str, t_detect_ms: i64, t_push_ms: i64) -> PushLatencyRow {
    PushLatencyRow {
        block_number: block,
        log_index: 0,
        channel: channel.to_string().into(),
        target_id: block,
        t_detect_ms,
        t_push_ms,
        epoch: 1,
        backfilled: 0,
        attempt: u32::from(channel == "webhook"),
        pending_id: 0,
    }
}

/// Write through the production write path.
pub async fn write(db: &TestDb, ingest_rows: &[IngestLatencyRow], push_rows: &[PushLatencyRow]) {
    latency::insert_ingest(&db.ch, ingest_rows).await.unwrap();
    latency::insert_push(&db.ch, push_rows).await.unwrap();
}

/// The value at 0-based rank floor(q · n) of the sorted values (the documented definition); for
/// an odd count and q = 0.5 this is the textbook median.
pub fn rank(values: &[i64], q: f64) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let i = ((q * v.len() as f64).floor() as usize).min(v.len() - 1);
    Some(v[i])
}

/// The textbook median of an odd number of values.
pub fn median(values: &[i64]) -> i64 {
    assert!(
        values.len() % 2 == 1,
        "use an odd count for an unambiguous median"
    );
    let mut v = values.to_vec();
    v.sort_unstable();
    v[v.len() / 2]
}

/// GET a URL, returning status and body.
pub async fn get(url: &str) -> (u16, String) {
    let r = reqwest::get(url).await.expect("GET");
    let status = r.status().as_u16();
    (status, r.text().await.expect("body"))
}

/// Wait until `/latency.json` answers 200 with a snapshot generated at or after `not_before_ms`.
pub async fn json_after(addr: SocketAddr, not_before_ms: i64) -> serde_json::Value {
    let snapshot = eventually_every(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async {
            let (status, body) = get(&format!("http://{addr}/latency.json")).await;
            if status != 200 {
                assert_eq!(status, 503, "before the first snapshot: 503; got {body}");
                return None;
            }
            let v: serde_json::Value = serde_json::from_str(&body).expect("json");
            (v["generated_at_ms"].as_i64().unwrap() >= not_before_ms).then_some(v)
        },
    )
    .await;
    snapshot.unwrap_or_else(|| panic!("no snapshot after {not_before_ms}"))
}

/// The window object named `name` in a JSON snapshot.
pub fn window<'a>(json: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    json["windows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["window"] == name)
        .unwrap_or_else(|| panic!("window {name} in {json}"))
}

/// Samples planted by [`plant_samples`], as the test plans them (never read back from the
/// code): one per second over 2 400 s ending 10 minutes before `now`, except a 300 s hole (the
/// sampler down); push owes a block for 45 s (over the 5 s bound from its 6th second: 39 s
/// unavailable, one run: an incident, with a push leader change 20 s in); ingest trails by 3
/// blocks for 20 s (20 s unavailable: below the incident threshold).
pub struct PlantedSamples {
    pub sampled_s: u64,
    pub push_unavailable_s: u64,
    pub push_gap_ms: i64,
    pub push_gap_from_ms: i64,
    pub ingest_unavailable_s: u64,
    pub ingest_gap_ms: i64,
    /// The oldest owed trade's longest wait (its 45th sample: 44 s) and ingest's most blocks behind.
    pub push_max_lag_ms: i64,
    pub ingest_max_lag_blocks: i64,
}

/// Plant [`PlantedSamples`] through the production path: the sampler's own state machine on
/// planned observations, then its insert.
pub async fn plant_samples(db: &TestDb, now: pmw_core::UnixMs) -> PlantedSamples {
    use pmw_core::ch::availability::insert_samples;
    use pmw_stats::sampler::{Observation, Sampler};
    let base = (now.0 - 50 * 60_000).div_euclid(1_000) * 1_000;
    let (push_from, push_to) = (600, 645);
    let (ingest_from, ingest_to) = (1_000, 1_020);
    let (hole_from, hole_to) = (1_500, 1_800);
    let mut sampler = Sampler::new();
    let mut rows = Vec::new();
    for i in 0..2_400i64 {
        if (hole_from..hole_to).contains(&i) {
            continue;
        }
        let t = base + i * 1_000;
        let t_owed = base + push_from * 1_000;
        let (watermark, push_block, owed) = if i < push_from {
            ((100, base - 1_000), 100, None)
        } else if i < push_to {
            ((101, t_owed), 100, Some((101, t_owed - 200)))
        } else {
            ((101, t_owed), 101, None)
        };
        let lead = if (ingest_from..ingest_to).contains(&i) {
            3
        } else {
            0
        };
        let o = Observation {
            watermark: Some(watermark),
            push_block: Some(push_block),
            owed,
            live: Some((t - 500, Some(watermark.0 + lead))),
            // A new push leader 20 s into push's outage: the incident's recorded cause.
            push_epoch: Some(if i < push_from + 20 { 1 } else { 2 }),
            ..Observation::default()
        };
        rows.push(sampler.sample(t, Some(&o)));
    }
    insert_samples(&db.ch, &rows).await.unwrap();
    PlantedSamples {
        sampled_s: 2_100,
        push_unavailable_s: 39,
        push_gap_ms: 39_000,
        push_gap_from_ms: base + (push_from + 6) * 1_000,
        ingest_unavailable_s: 20,
        ingest_gap_ms: 20_000,
        push_max_lag_ms: 44_000,
        ingest_max_lag_blocks: 3,
    }
}

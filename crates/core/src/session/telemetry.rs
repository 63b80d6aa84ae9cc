//! The session layer's metrics (names kept from push, which documents them in its telemetry
//! table): frames written, detect→push latency, the recorder's insert errors and drops.

pub const FRAMES_SENT: &str = "pmw_push_frames_sent_total";
pub const DETECT_TO_PUSH: &str = "pmw_push_detect_to_push_seconds";
pub const CH_INSERT_ERRORS: &str = "pmw_push_clickhouse_insert_errors_total";
pub const FACTS_DROPPED: &str = "pmw_push_facts_dropped_total";

/// A frame written or a webhook delivered on `channel`: its detect→push latency.
pub fn delivered(channel: &str, t_detect_ms: i64, t_push_ms: i64) {
    let secs = (t_push_ms - t_detect_ms).max(0) as f64 / 1000.0;
    if channel == "ws" {
        metrics::counter!(FRAMES_SENT).increment(1);
    }
    metrics::histogram!(DETECT_TO_PUSH, "channel" => channel.to_string()).record(secs);
}

/// The recorder could not insert into `table`.
pub fn recorder_failed(table: &str) {
    metrics::counter!(CH_INSERT_ERRORS, "table" => table.to_string()).increment(1);
}

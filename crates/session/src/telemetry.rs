//! The session layer's metrics (names kept from push, which documents them in its telemetry
//! table): frames written, detect→push latency, the recorder's insert errors and drops.

pub const FRAMES_SENT: &str = "pmw_push_frames_sent_total";
pub const DETECT_TO_PUSH: &str = "pmw_push_detect_to_push_seconds";
pub const CH_INSERT_ERRORS: &str = "pmw_push_clickhouse_insert_errors_total";
pub const FACTS_DROPPED: &str = "pmw_push_facts_dropped_total";

/// The handles of the per-frame metrics, registered once (a lookup by name and labels per
/// frame was about 5% of an edge's CPU under the bench's 25,000-session step). Make it after
/// the process installed its metrics recorder (handles taken before are no-ops).
pub struct Delivered {
    frames_sent: metrics::Counter,
    ws: metrics::Histogram,
    /// `ws_final`, `webhook`, `webhook_final`: the other channels with samples.
    others: [(&'static str, metrics::Histogram); 3],
}

impl Delivered {
    pub fn register() -> Delivered {
        let other = |c: &'static str| (c, metrics::histogram!(DETECT_TO_PUSH, "channel" => c));
        Delivered {
            frames_sent: metrics::counter!(FRAMES_SENT),
            ws: metrics::histogram!(DETECT_TO_PUSH, "channel" => "ws"),
            others: [other("ws_final"), other("webhook"), other("webhook_final")],
        }
    }

    /// A frame written or a webhook delivered on `channel`: its detect→push latency. A
    /// `pending` (`ws_pending`, `webhook_pending`) starts at its sighting in a pool, not at a
    /// block header: not a detect→push sample (push's pending lane has its own histogram).
    pub fn record(&self, channel: &str, t_detect_ms: i64, t_push_ms: i64) {
        if channel.ends_with("_pending") {
            return;
        }
        let secs = (t_push_ms - t_detect_ms).max(0) as f64 / 1000.0;
        if channel == "ws" {
            self.frames_sent.increment(1);
            self.ws.record(secs);
        } else if let Some((_, h)) = self.others.iter().find(|(c, _)| *c == channel) {
            h.record(secs);
        } else {
            metrics::histogram!(DETECT_TO_PUSH, "channel" => channel.to_string()).record(secs);
        }
    }
}

/// The recorder could not insert into `table`.
pub fn recorder_failed(table: &str) {
    metrics::counter!(CH_INSERT_ERRORS, "table" => table.to_string()).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_handles_record_into_the_installed_recorder() {
        pmw_core::metrics::install().expect("recorder installed");
        let d = Delivered::register();
        d.record("ws", 1_000, 1_030);
        d.record("ws", 1_000, 1_040);
        d.record("webhook", 1_000, 3_000);
        d.record("webhook_final", 1_000, 3_000);
        d.record("some_new_channel", 1_000, 3_000);
        // A pending starts at its sighting in a pool: no detect→push sample.
        d.record("ws_pending", 1_000, 1_005);
        d.record("webhook_pending", 1_000, 1_300);
        let text = pmw_core::metrics::render();
        assert!(!text.contains("_pending\""), "{text}");
        assert!(text.contains(&format!("{FRAMES_SENT} 2")), "{text}");
        assert!(
            text.contains(&format!("{DETECT_TO_PUSH}_count{{channel=\"ws\"}} 2")),
            "{text}"
        );
        assert!(
            text.contains(&format!("{DETECT_TO_PUSH}_count{{channel=\"webhook\"}} 1")),
            "{text}"
        );
        for c in ["webhook_final", "some_new_channel"] {
            assert!(
                text.contains(&format!("{DETECT_TO_PUSH}_count{{channel=\"{c}\"}} 1")),
                "{c}: {text}"
            );
        }
    }
}

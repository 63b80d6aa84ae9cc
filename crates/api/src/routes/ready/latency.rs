//! The ClickHouse probe: reachable, and the recent detect→push median within its bound (unknown,
//! not failed, while ClickHouse is down: push's own check still gates on its rounds).

use std::time::Duration;

use pmw_core::ch::Window;
use pmw_core::UnixMs;
use serde_json::Value;

use super::probe::bounded;
use super::Check;
use crate::AppState;

/// ClickHouse reachable, and the median detect→push of live WebSocket deliveries over the
/// window, or of webhook deliveries when there is no WebSocket sample (per-row differences;
/// both window bounds applied).
pub async fn clickhouse_and_latency(st: &AppState, now: i64) -> (Check, Check) {
    let w = Window::ending_at(
        UnixMs(now),
        Duration::from_millis(st.cfg.api_ready_latency_window_ms),
    );
    let max = st.cfg.api_ready_latency_max_ms as i64;
    let median = |channel: &'static str| bounded(pmw_core::ch::latency::recent(&st.ch, channel, w));
    let mut channel = "ws";
    let mut r = median(channel).await;
    if matches!(r, Ok((0, _))) {
        channel = "webhook";
        r = median(channel).await;
    }
    match r {
        Err(e) => (
            Check::fail(format!("clickhouse unreachable: {e}"), Value::Null),
            Check::pass(serde_json::json!({
                "median_ms": null, "unknown": "clickhouse unreachable",
                "max_ms": max, "window_ms": st.cfg.api_ready_latency_window_ms,
            })),
        ),
        Ok((samples, median)) => {
            let detail = serde_json::json!({
                "channel": channel, "samples": samples, "median_ms": (samples > 0).then_some(median),
                "max_ms": max, "window_ms": st.cfg.api_ready_latency_window_ms,
            });
            let lat = if samples > 0 && median > max {
                Check::fail(
                    format!("detect→push median ({channel}) {median} ms over the window exceeds {max} ms"),
                    detail,
                )
            } else {
                Check::pass(detail)
            };
            (Check::pass(Value::Null), lat)
        }
    }
}

//! Prometheus metrics, one convention for every service: a `metrics-exporter-prometheus`
//! recorder installed once per process ([`install`]), a handle to render the text exposition
//! ([`render`], served at `/metrics`), and metric names of the form `pmw_<service>_<what>`
//! ([`name`]; `pmw-api` → `pmw_api_…`).
//!
//! HTTP services record each request with [`http_request`]:
//! `pmw_<service>_http_requests_total{method,route,status}` (counter) and
//! `pmw_<service>_http_request_duration_seconds{method,route}` (histogram). `route` is the
//! matched route template (`/v1/webhooks/{id}`), never the raw path, so labels stay bounded.
//!
//! Every service sets `pmw_build_info{service,version,revision} 1` ([`build_info`]); the
//! services without an HTTP server of their own serve `/metrics` on a private port ([`start`],
//! [`serve`]; pmw-api serves it on its listen address).
//!
//! Everything here works whether or not a recorder is installed (tests that never call
//! [`install`] record into the no-op recorder).

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

/// The build info gauge, the same name on every service (alerts compare revisions across them).
pub const BUILD_INFO: &str = "pmw_build_info";

/// Histogram buckets for durations in seconds: 1 ms … 10 s.
pub const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How often histogram samples are folded into their buckets when nobody scrapes.
const UPKEEP: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Install the process-wide recorder (idempotent: later calls return the same handle). `None`
/// when another recorder was installed first by something else; metrics then go there.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| match build_and_install() {
            Ok(h) => {
                let upkeep = h.clone();
                let spawned = std::thread::Builder::new()
                    .name("pmw-metrics-upkeep".into())
                    .spawn(move || loop {
                        std::thread::sleep(UPKEEP);
                        upkeep.run_upkeep();
                    });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "metrics upkeep thread not started");
                }
                Some(h)
            }
            Err(e) => {
                tracing::warn!(error = %e, "prometheus recorder not installed");
                None
            }
        })
        .clone()
}

fn build_and_install() -> Result<PrometheusHandle, BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), DURATION_BUCKETS)?
        .install_recorder()
}

/// The Prometheus text exposition of every metric recorded so far (empty if not installed).
pub fn render() -> String {
    HANDLE
        .get()
        .and_then(Option::as_ref)
        .map(PrometheusHandle::render)
        .unwrap_or_default()
}

/// `pmw_<service>_<what>`: the service name without its `pmw-` prefix, `-` → `_`.
pub fn name(service: &str, what: &str) -> String {
    let s = service.strip_prefix("pmw-").unwrap_or(service);
    format!("pmw_{}_{}", s.replace('-', "_"), what)
}

/// `pmw_build_info{service,version,revision} 1`: this process's build ([`crate::build_info`]).
pub fn build_info(service: &str) {
    let labels = [
        ("service", service.to_string()),
        ("version", crate::build_info::VERSION.to_string()),
        ("revision", crate::build_info::REVISION.to_string()),
    ];
    metrics::gauge!(BUILD_INFO, &labels).set(1.0);
}

/// Record one HTTP request: a counter by method, route and status, a duration histogram by
/// method and route.
pub fn http_request(service: &str, method: &str, route: &str, status: u16, elapsed: Duration) {
    let labels = [
        ("method", method.to_string()),
        ("route", route.to_string()),
        ("status", status.to_string()),
    ];
    metrics::counter!(name(service, "http_requests_total"), &labels).increment(1);
    metrics::histogram!(name(service, "http_request_duration_seconds"), &labels[..2])
        .record(elapsed.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_convention() {
        assert_eq!(
            name("pmw-api", "http_requests_total"),
            "pmw_api_http_requests_total"
        );
        assert_eq!(name("pmw-push", "rounds_total"), "pmw_push_rounds_total");
        assert_eq!(name("stats", "x"), "pmw_stats_x");
    }

    #[test]
    fn installed_recorder_renders_requests_as_counter_and_histogram() {
        let h = install().expect("first install in this test process");
        assert!(install().is_some(), "install is idempotent");
        http_request(
            "pmw-unit",
            "GET",
            "/v1/x/{id}",
            200,
            Duration::from_millis(3),
        );
        http_request(
            "pmw-unit",
            "GET",
            "/v1/x/{id}",
            200,
            Duration::from_millis(4),
        );
        let text = render();
        assert_eq!(text, h.render());
        assert!(
            text.contains(
                r#"pmw_unit_http_requests_total{method="GET",route="/v1/x/{id}",status="200"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains("pmw_unit_http_request_duration_seconds_bucket"),
            "durations are a histogram: {text}"
        );
    }
}

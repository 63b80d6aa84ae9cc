//! Logging setup: terse lowercase messages with structured fields, text or JSON.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Install the global subscriber once; later calls (tests running several services) are no-ops.
pub fn init(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Every line through the redactor: no URL path, query or user info reaches a log.
        .with_writer(|| crate::redact::Writer(std::io::stderr()))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// For tests: log to the test harness's captured output, honouring `RUST_LOG`.
pub fn init_for_tests() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

//! The benchmark's polling baseline: the seed's design before its 09-26 change (no LISTEN
//! wake-up, a round every N ms). Compiled in only with the `polling-baseline` feature, which
//! `scripts/bench` builds; a production build has no such setting.

/// The baseline's round period (`PMW_BENCH_POLL_MS`), when this build has the feature and the
/// variable is set.
#[cfg(feature = "polling-baseline")]
pub fn poll_ms() -> Option<u64> {
    static MS: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *MS.get_or_init(read)
}

#[cfg(feature = "polling-baseline")]
fn read() -> Option<u64> {
    let v = std::env::var("PMW_BENCH_POLL_MS").ok()?;
    match v.parse() {
        Ok(ms) => Some(ms),
        Err(_) => {
            tracing::error!(value = %v, "PMW_BENCH_POLL_MS is not a whole number of ms; ignored");
            None
        }
    }
}

#[cfg(not(feature = "polling-baseline"))]
pub fn poll_ms() -> Option<u64> {
    None
}

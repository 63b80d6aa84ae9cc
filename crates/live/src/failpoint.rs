//! A crash seam for the drills and tests: `PMW_LIVE_FAILPOINT=<name>:<block>` aborts the process
//! (as a crash would: no cleanup, no lock release) the first time the named point is reached for
//! a block at or above `<block>`. Unset (as in production), a hit is one relaxed load.
//!
//! Points: `before_commit` (a block's logs are fetched and decoded, nothing of it is stored yet:
//! its trades and watermark commit in one statement, so no point lies between them).

use std::sync::OnceLock;

static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();

fn armed() -> &'static Option<(String, u64)> {
    ARMED.get_or_init(|| {
        let v = std::env::var("PMW_LIVE_FAILPOINT").ok()?;
        let (name, block) = v.split_once(':')?;
        Some((name.to_string(), block.parse().ok()?))
    })
}

/// Abort here if `PMW_LIVE_FAILPOINT` names this point and `block` has reached its block.
pub fn hit(point: &str, block: u64) {
    if let Some((name, from)) = armed() {
        if name == point && block >= *from {
            tracing::error!(point, block, "failpoint reached: aborting");
            std::process::abort();
        }
    }
}

//! What build this process runs: the crate version and the git revision it was built from.
//! `PMW_REVISION` is set at build time by `scripts/deploy/*` and `scripts/dev`
//! (`git rev-parse --short=12 HEAD`); a plain `cargo build` says `unknown`. Every heartbeat
//! carries it, so `pmwctl status`, `/v1/ready` and the deploy scripts can see a service left
//! running an older build (the seed's forgotten restart).

/// The git revision of this build, or `unknown`.
pub const REVISION: &str = match option_env!("PMW_REVISION") {
    Some(r) => r,
    None => "unknown",
};

/// The workspace version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

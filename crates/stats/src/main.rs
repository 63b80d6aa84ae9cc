//! The pmw-stats binary: `pmw_core::service::main` around [`pmw_stats::run`].

/// mimalloc, not glibc malloc, as every service allocates (docs/PROFILE.md, session 28).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    pmw_core::service::main(pmw_stats::SERVICE, pmw_stats::run)
}

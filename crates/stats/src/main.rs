//! The pmw-stats binary: `pmw_core::service::main` around [`pmw_stats::run`].

/// mimalloc, not glibc malloc: the per-frame and per-attempt buffers are its hot path.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    pmw_core::service::main(pmw_stats::SERVICE, pmw_stats::run)
}

//! The pmw-edge binary: core's service entry point around [`pmw_edge::run`].

/// mimalloc, not glibc malloc, as every service allocates (docs/PROFILE.md, session 28).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    pmw_core::service::main(pmw_edge::SERVICE, pmw_edge::run)
}

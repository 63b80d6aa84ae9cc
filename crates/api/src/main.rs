//! The pmw-api binary: core's service entry point around [`pmw_api::run`].

/// mimalloc, not glibc malloc, as every service allocates (docs/PROFILE.md, session 28).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    pmw_core::service::main(pmw_api::SERVICE, pmw_api::run)
}

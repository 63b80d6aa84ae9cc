//! The pmw-push binary: core's service entry point around [`pmw_push::run`].

/// mimalloc, not glibc malloc, as every service allocates (docs/PROFILE.md, session 28).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    pmw_core::service::main(pmw_push::SERVICE, pmw_push::run)
}

//! The pmw-push binary: core's service entry point around [`pmw_push::run`].

fn main() -> std::process::ExitCode {
    pmw_core::service::main(pmw_push::SERVICE, pmw_push::run)
}

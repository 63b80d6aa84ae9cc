//! The pmw-api binary: core's service entry point around [`pmw_api::run`].

fn main() -> std::process::ExitCode {
    pmw_core::service::main(pmw_api::SERVICE, pmw_api::run)
}

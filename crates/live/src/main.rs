//! The pmw-live binary: core's service entry point around [`pmw_live::run`].

fn main() -> std::process::ExitCode {
    pmw_core::service::main(pmw_live::SERVICE, pmw_live::run)
}

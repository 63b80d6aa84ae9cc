//! The pmw-edge binary: core's service entry point around [`pmw_edge::run`].

fn main() -> std::process::ExitCode {
    pmw_core::service::main(pmw_edge::SERVICE, pmw_edge::run)
}

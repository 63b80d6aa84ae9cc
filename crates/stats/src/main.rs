//! The pmw-stats binary: `pmw_core::service::main` around [`pmw_stats::run`].

fn main() -> std::process::ExitCode {
    pmw_core::service::main(pmw_stats::SERVICE, pmw_stats::run)
}

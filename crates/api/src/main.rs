fn main() -> std::process::ExitCode {
    pmw_core::service::main(pmw_api::SERVICE, pmw_api::run)
}

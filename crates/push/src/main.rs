fn main() -> std::process::ExitCode {
    pmw_core::service::main(pmw_push::SERVICE, pmw_push::run)
}

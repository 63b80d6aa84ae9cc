fn main() -> std::process::ExitCode {
    pmw_core::service::main(pmw_live::SERVICE, pmw_live::run)
}

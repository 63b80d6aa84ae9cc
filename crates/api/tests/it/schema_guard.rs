//! The service refuses a schema it does not know (exit 78) and runs on the one it knows.

#[tokio::test]
async fn refuses_unknown_schema_and_runs_on_known_one() {
    // Children inherit this: listen on a free port, never a fixed one another process may hold.
    std::env::set_var("PMW_API_LISTEN", "127.0.0.1:0");
    pmw_testkit::schema_guard(std::path::Path::new(env!("CARGO_BIN_EXE_pmw-api"))).await;
}

//! The service refuses a schema it does not know (exit 78) and runs on the one it knows.

#[tokio::test]
async fn refuses_unknown_schema_and_runs_on_known_one() {
    pmw_testkit::schema_guard_with(
        std::path::Path::new(env!("CARGO_BIN_EXE_pmw-push")),
        pmw_testkit::Unreachable::Waits,
    )
    .await;
}

//! A broken API-only setting stops the API (exit 78, naming the key). That the same broken
//! `PMW_API_*` environment never stops push is in the top-level `tests/e2e/api_config.rs`.

use std::path::Path;
use std::time::Duration;

use pmw_testkit::{run_bin, TestDb};

/// API settings a deploy could break; `tests/e2e/api_config.rs` runs push under the same ones.
const BROKEN: &[(&str, &str)] = &[
    ("PMW_API_PLANS", "{not json"),
    ("PMW_API_RATE_PER_SEC", "fast"),
    ("PMW_API_DEFAULT_PLAN", "platinum"),
    ("PMW_API_LISTEN", "0.0.0.0:80"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_binary_exits_78_naming_the_broken_key() {
    let db = TestDb::new().await;
    for (k, v) in BROKEN {
        let mut env = db.env();
        env.push((k.to_string(), v.to_string()));
        let (code, _, err) = run_bin(
            Path::new(env!("CARGO_BIN_EXE_pmw-api")),
            &env,
            &[],
            Duration::from_secs(60),
        )
        .await;
        assert_eq!(code, 78, "{k}={v}: {err}");
        let key = k.to_lowercase()[4..].to_string();
        assert!(
            err.to_lowercase().contains(&key),
            "{k}: the error names the setting: {err}"
        );
    }
}

/// Issue 42 item 5: in production (`PMW_ENV=production`, what the shipped units and pm2
/// ecosystem set) a service without `PMW_SECRET_KEYS` refuses to start (78, saying why).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_production_service_without_secret_keys_exits_78() {
    let db = TestDb::new().await;
    let mut env = db.env();
    env.retain(|(k, _)| k != pmw_core::sealed::ENV);
    // Empty is unset (and hides a value this test process may have inherited).
    env.push((pmw_core::sealed::ENV.into(), String::new()));
    env.push(("PMW_ENV".into(), "production".into()));
    let (code, _, err) = run_bin(
        Path::new(env!("CARGO_BIN_EXE_pmw-api")),
        &env,
        &[],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, 78, "{err}");
    assert!(
        err.contains("PMW_SECRET_KEYS") && err.contains("PMW_ENV=production"),
        "{err}"
    );
}

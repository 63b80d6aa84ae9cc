//! A broken API-only setting stops pmw-api's own entry point (exit 78) and never push: with the
//! same broken `PMW_API_*` environment, pmw-push leads and completes rounds in-process.

use std::time::Duration;

use pmw_api::ApiConfig;
use pmw_core::config::CoreConfig;
use pmw_push::webhook::WebhookConfig;
use pmw_push::PushConfig;
use pmw_testkit::{assert_eventually, ServiceHandle, TestDb};
use tokio_util::sync::CancellationToken;

/// The broken settings of pmw-api's own config test (`crates/api/tests/it/config.rs`).
const BROKEN: &[(&str, &str)] = &[
    ("PMW_API_PLANS", "{not json"),
    ("PMW_API_RATE_PER_SEC", "fast"),
    ("PMW_API_DEFAULT_PLAN", "platinum"),
    ("PMW_API_LISTEN", "0.0.0.0:80"),
];

#[test]
#[allow(clippy::result_large_err)]
fn push_runs_in_process_under_a_broken_api_environment() {
    figment::Jail::expect_with(|jail| {
        for (k, v) in BROKEN {
            jail.set_env(k, v);
        }
        jail.set_env("PMW_PUSH_LISTEN", "127.0.0.1:0");
        jail.set_env("PMW_PUSH_FALLBACK_MS", "200");
        jail.set_env("PMW_PUSH_LOCK_SEGMENT_MS", "1000");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let db = TestDb::new().await;
            // pmw-api's own entry point refuses to start: configuration error, exit 78.
            let refused = pmw_api::run(db.cfg.clone(), CancellationToken::new()).await;
            let e = refused.expect_err("api must refuse broken settings");
            assert_eq!(e.exit_code(), 78, "{e}");
            // pmw-push's own entry point (which loads its settings from this environment) leads
            // and completes rounds.
            let core = db.cfg.clone();
            let push = ServiceHandle::spawn(move |stop| pmw_push::run(core, stop));
            let c = db.connect().await;
            let rounded = || async {
                let row = c
                    .query_opt(
                        "SELECT (state->>'last_round_ms')::bigint FROM heartbeats \
                         WHERE service = 'pmw-push' AND state->>'role' = 'leader'",
                        &[],
                    )
                    .await
                    .unwrap();
                let done = row
                    .and_then(|r| r.get::<_, Option<i64>>(0))
                    .is_some_and(|t| t > 0);
                assert!(
                    done || !push.is_finished(),
                    "push stopped under a broken api setting"
                );
                done
            };
            assert_eventually!(
                Duration::from_secs(30),
                rounded().await,
                "push never completed a round"
            );
            push.stop().await.expect("push stops cleanly");
        });
        Ok(())
    });
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API returns its Error by value
fn broken_api_settings_leave_core_and_push_settings_loadable() {
    figment::Jail::expect_with(|jail| {
        for (k, v) in BROKEN {
            jail.set_env(k, v);
        }
        jail.set_env("PMW_PUSH_LISTEN", "127.0.0.1:0");
        CoreConfig::load().map_err(|e| e.to_string())?;
        PushConfig::load().map_err(|e| e.to_string())?;
        WebhookConfig::load().map_err(|e| e.to_string())?;
        let err = ApiConfig::load().expect_err("the api refuses broken settings");
        assert!(
            err.to_string().to_uppercase().contains("API_"),
            "names the setting: {err}"
        );
        Ok(())
    });
}

/// Readiness bounds must stay above the periods of what they watch (the seeds' lesson: a
/// readiness age below the fallback poll interval flaps on every quiet stretch).
#[test]
fn readiness_bounds_stay_above_the_periods_they_watch() {
    let api = ApiConfig::default();
    let push = PushConfig::default();
    let hooks = WebhookConfig::default();
    assert!(
        api.api_ready_round_max_age_ms > 2 * push.push_fallback_ms,
        "round max age {} vs push fallback poll {}",
        api.api_ready_round_max_age_ms,
        push.push_fallback_ms
    );
    assert!(
        api.api_ready_round_max_age_ms > push.push_ready_max_age_ms / 2,
        "the API's round bound is not far below push's own stall bound"
    );
    assert!(
        api.api_ready_webhook_due_max_age_ms > 2 * hooks.poll_interval.as_millis() as u64,
        "webhook due bound vs the dispatcher's poll"
    );
    assert!(
        api.api_ready_webhook_due_max_age_ms > hooks.claim_ttl().as_millis() as u64,
        "webhook due bound vs the claim TTL (a crashed attempt is reclaimed after it)"
    );
}

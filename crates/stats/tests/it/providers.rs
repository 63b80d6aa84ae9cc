//! pmw-live's RPC providers in `/latency.json`'s diagnostics, from live's heartbeat in Postgres
//! (a planted one here: what live writes is tested in pmw-live's own tests); `null` without one.

use crate::common::*;
use pmw_core::UnixMs;
use pmw_testkit::TestDb;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnostics_show_each_provider_from_lives_heartbeat() {
    let db = TestDb::new().await;
    let (svc, addr) = start(db.cfg.clone(), stats_config(200)).await;
    let before = json_after(addr, UnixMs::now().0).await;
    assert!(
        before["diagnostics"]["rpc_providers"].is_null(),
        "no live heartbeat, no providers: {}",
        before["diagnostics"]
    );
    let providers = json!([
        {"name": "a", "standing": "healthy", "won": 41, "heads": 41, "lag_p50_ms": null},
        {"name": "b", "standing": "lagging", "won": 0, "heads": 40, "lag_p50_ms": 200},
    ]);
    let beat_ms = 1_780_000_000_000i64;
    db.connect()
        .await
        .execute(
            "INSERT INTO heartbeats (service, instance, pid, started_ms, beat_ms, state) \
             VALUES ('pmw-live', 'live', 1, 0, $1, jsonb_build_object('providers', $2::jsonb))",
            &[&beat_ms, &providers],
        )
        .await
        .unwrap();
    let after = json_after(addr, UnixMs::now().0).await;
    let p = &after["diagnostics"]["rpc_providers"];
    assert_eq!(p["providers"], providers, "{p}");
    assert_eq!(p["as_of"], UnixMs(beat_ms).to_rfc3339(), "{p}");
    assert!(
        after["headline"].to_string().find("lag_p50").is_none(),
        "providers are diagnostics, not the headline"
    );
    svc.stop().await.unwrap();
}

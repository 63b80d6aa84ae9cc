//! `/v1/ready` warns about unlisted emitters (issue 45 item 4): a contract outside pmw-live's
//! exchange list recorded as emitting Polymarket fill/match events is named in
//! `checks.unlisted_emitters` and `warnings`, never gating; once live lists it, the warning
//! stops. (Live's recording of a real look-alike emitter on anvil: pmw-live's `emitters` test.)

use std::time::Duration;

use pmw_api::ApiConfig;
use pmw_core::pg::emitters::{mark_listed, record, Sighting, Sightings, Source};
use pmw_core::types::Address;
use pmw_core::UnixMs;

use crate::common::{test_config, Api};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlisted_emitter_is_a_warning_of_ready_until_listed() {
    let api = Api::start_with(ApiConfig {
        api_ready_interval_ms: 100,
        ..test_config()
    })
    .await;
    let within = Duration::from_secs(10);
    let r = api
        .until("/v1/ready", within, "the check", |r| {
            r.body["checks"]["unlisted_emitters"]["ok"] == true
        })
        .await;
    assert_eq!(r.body["checks"]["unlisted_emitters"]["detail"]["count"], 0);

    let c = api.db.connect().await;
    let emitter = Address([0x7e; 20]);
    let seen = Sightings::from([(
        emitter,
        Sighting {
            first_block: 120,
            last_block: 121,
            events: 4,
            first_tx: format!("0x{}", "ab".repeat(32)),
        },
    )]);
    record(&c, &seen, Source::Ingest, UnixMs::now().0)
        .await
        .unwrap();
    let r = api
        .until("/v1/ready", within, "an unlisted emitter", |r| {
            r.body["checks"]["unlisted_emitters"]["ok"] == false
        })
        .await;
    let check = &r.body["checks"]["unlisted_emitters"];
    assert_eq!(check["detail"]["count"], 1, "{}", r.text);
    let e = &check["detail"]["emitters"][0];
    assert_eq!(e["address"], emitter.to_lower_hex());
    assert_eq!(
        (e["first_block"].as_i64(), e["events"].as_i64()),
        (Some(120), Some(4))
    );
    let reason = check["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!(
            "{} (from block 120, 4 events",
            emitter.to_lower_hex()
        )),
        "{reason}"
    );
    assert!(
        r.body["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w == reason),
        "{}",
        r.text
    );
    assert!(
        !r.body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("unlisted"),
        "never gating: {}",
        r.text
    );

    // Live started with it in its exchange list: the warning stops.
    mark_listed(&c, &[emitter], UnixMs::now().0).await.unwrap();
    api.until("/v1/ready", within, "no unlisted emitter", |r| {
        r.body["checks"]["unlisted_emitters"]["ok"] == true
    })
    .await;
}

//! Issue 30, item 11: a refused webhook destination is reported to the subscriber as "destination
//! not allowed", never with the addresses its name resolved to (which would make the SSRF guard
//! an oracle of the operator's internal DNS). The name used is this machine's host name, which
//! resolves to a loopback address here but is not a local name the URL check refuses up front.

use pmw_core::ssrf::is_forbidden;
use serde_json::json;

use crate::common::Api;

/// This machine's name and the addresses it resolves to (all refused by the guard).
async fn internal_name() -> (String, Vec<String>) {
    let out = std::process::Command::new("hostname").output().unwrap();
    let name = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let addrs: Vec<_> = tokio::net::lookup_host((name.as_str(), 0))
        .await
        .unwrap()
        .map(|a| a.ip())
        .collect();
    assert!(
        !addrs.is_empty() && addrs.iter().all(|a| is_forbidden(*a)),
        "{name} must resolve to internal addresses only: {addrs:?}"
    );
    (name, addrs.iter().map(ToString::to_string).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_destination_names_no_address() {
    let (name, addrs) = internal_name().await;
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    let r = api
        .post(
            "/v1/webhooks",
            &key,
            json!({"url": format!("http://{name}:9/hook")}),
        )
        .await;
    r.expect(201, None);
    let id = r.body["id"].as_i64().unwrap();
    let r = api
        .post(&format!("/v1/webhooks/{id}/test"), &key, json!(null))
        .await;
    r.expect(200, None);
    assert_eq!(r.body["delivered"], false, "{}", r.text);
    let error = r.body["error"].as_str().unwrap();
    assert!(error.contains("destination not allowed"), "{error}");
    for a in &addrs {
        assert!(
            !r.text.contains(a.as_str()),
            "{a} shown to the subscriber: {}",
            r.text
        );
    }
}

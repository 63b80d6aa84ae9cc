//! The API's contract: schemathesis against the served document through the real Caddy, early
//! rejections that leave the proxied connection clean, 413 in the error shape, and the drift
//! issue 19 listed (each status documented where it can occur, `Check.detail` nullable, `limit`
//! from 1, `/metrics` not public, NUL bytes, throttled invalid keys, `http:///x`).

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::caddy::Caddy;
use crate::common::{test_config, wallet, Api};

fn doc() -> Value {
    serde_json::from_str(pmw_api::routes::openapi_json()).unwrap()
}

#[tokio::test]
async fn schemathesis_reports_no_failure_through_caddy() {
    let api = Api::start().await;
    let (_, key) = api.account("pro").await;
    let caddy = Caddy::start(
        api.base.trim_start_matches("http://").parse().unwrap(),
        test_config().api_max_body_bytes,
    )
    .await;
    let out = tokio::process::Command::new(pmw_testkit::repo_root().join("scripts/contract"))
        .args(["--url", &caddy.base, "--key", &key])
        .output()
        .await
        .expect("scripts/contract runs");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "schemathesis reported failures");
    assert!(
        text.contains("No issues found") || !text.contains("FAILURES"),
        "schemathesis output: {text}"
    );
}

/// Every operation documents the statuses the shared machinery can return.
#[test]
fn every_operation_documents_its_error_statuses() {
    let d = doc();
    for (path, item) in d["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let codes: Vec<&str> = op["responses"]
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            let has = |c: &str| codes.contains(&c);
            let what = format!("{method} {path}: {codes:?}");
            if op.get("security").is_some() {
                assert!(has("401") && has("429") && has("503"), "{what}");
            }
            if op.get("requestBody").is_some() {
                for c in ["400", "413", "415", "422"] {
                    assert!(has(c), "{what} lacks {c}");
                }
            }
            if path.contains('{') {
                assert!(has("400") && has("404"), "{what}");
            }
        }
    }
    assert!(
        d["paths"].get("/metrics").is_none(),
        "/metrics is not served publicly"
    );
    let retry = &d["paths"]["/v1/me"]["get"]["responses"]["429"]["headers"]["Retry-After"];
    assert!(retry.is_object(), "429 documents Retry-After");
}

/// The committed `docs/asyncapi.json` is the served document (regenerate it with
/// `PMW_WRITE_ASYNCAPI=1` on this test), and both documents describe every pushed message.
#[tokio::test]
async fn event_schemas_are_served_and_committed() {
    let api = Api::start().await;
    let served = api.call(Method::GET, "/v1/asyncapi.json", None, None).await;
    served.expect(200, None);
    let path = pmw_testkit::repo_root().join("docs/asyncapi.json");
    if std::env::var("PMW_WRITE_ASYNCAPI").is_ok_and(|v| v == "1") {
        let text = serde_json::to_string_pretty(&served.body).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
    }
    let committed: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        committed, served.body,
        "docs/asyncapi.json differs from /v1/asyncapi.json: regenerate it (PMW_WRITE_ASYNCAPI=1)"
    );
    let a = &served.body;
    assert_eq!(a["asyncapi"], "3.0.0");
    for m in [
        "hello",
        "trade",
        "retract",
        "final",
        "pending",
        "void",
        "heartbeat",
        "resync",
    ] {
        assert!(a["components"]["messages"][m]["payload"].is_object(), "{m}");
        assert!(a["channels"]["ws"]["messages"][m].is_object(), "{m}");
    }
    let d = doc();
    for m in ["trade", "retract"] {
        let s = &d["webhooks"][m]["post"]["requestBody"]["content"]["application/json"]["schema"];
        assert_eq!(s["properties"]["type"]["const"], m, "{s}");
    }
    assert!(d["components"]["schemas"]["PushedMessage"].is_object());
}

#[test]
fn limits_start_at_one_and_check_detail_is_nullable() {
    let d = doc();
    for path in ["/v1/trades", "/v1/webhooks/{id}/deliveries"] {
        let limit = d["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "limit")
            .unwrap();
        assert_eq!(limit["schema"]["minimum"], 1, "{path}: {limit}");
        assert_eq!(limit["schema"]["maximum"], 1000, "{path}: {limit}");
    }
    let detail = &d["components"]["schemas"]["Check"]["properties"]["detail"];
    // `null` when a store is unreachable, a list for `revisions`, else an object.
    assert_eq!(
        detail["type"],
        json!(["object", "array", "null"]),
        "Check.detail: {detail}"
    );
}

#[tokio::test]
async fn malformed_input_is_a_4xx_and_invalid_keys_are_throttled() {
    let cfg = pmw_api::ApiConfig {
        api_rate_per_sec: 1,
        api_rate_burst: 5,
        ..test_config()
    };
    let api = Api::start_with(cfg).await;
    let (_, key) = api.account("free").await;
    api.delete("/v1/keys/%00", &key)
        .await
        .expect(404, Some("not_found"));
    api.post("/v1/webhooks", &key, json!({"url": "http:///x"}))
        .await
        .expect(422, Some("invalid_url"));
    // Invalid keys from one address: 401 for the burst, then 429 with Retry-After.
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let r = api.get("/v1/me", "pmw_notakey").await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(&statuses[..3], &[401, 401, 401], "{statuses:?}");
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
}

/// Early rejections (401 before the body is read, 415, 400, 413) never leave a poisoned
/// connection behind Caddy: valid requests on the same proxied connections keep succeeding, and
/// an oversized body gets the JSON 413, declared or chunked, with or without `Expect`.
#[tokio::test]
async fn early_rejections_leave_caddy_connections_clean() {
    let cfg = test_config();
    let limit = cfg.api_max_body_bytes;
    let api = Api::start_with(cfg).await;
    let (_, key) = api.account("pro").await;
    let caddy = Caddy::start(
        api.base.trim_start_matches("http://").parse().unwrap(),
        limit,
    )
    .await;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let big = vec![b'x'; limit * 3];
    let huge = vec![b' '; 50 << 20];
    for round in 0..5u8 {
        // Rejected without reading a valid body: no key, then a wrong content type.
        let r = http
            .post(format!("{}/v1/subscriptions", caddy.base))
            .header("content-type", "application/json")
            .body(vec![b' '; limit / 2])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "round {round}");
        let r = http
            .post(format!("{}/v1/subscriptions", caddy.base))
            .bearer_auth(&key)
            .header("content-type", "text/plain")
            .body(vec![b'a'; limit / 2])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 415, "round {round}");
        // Oversized, declared and streamed (chunked), and 50 MB.
        for body in [big.clone(), huge.clone()] {
            let r = http
                .post(format!("{}/v1/subscriptions", caddy.base))
                .bearer_auth(&key)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 413, "round {round}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["code"], "body_too_large", "round {round}: {v}");
        }
        let raw = chunked_post(&caddy.base, &key, limit * 3).await;
        assert!(
            raw.starts_with("HTTP/1.1 413") && raw.contains("body_too_large"),
            "round {round}: {raw}"
        );
        // Valid requests right after, on whatever connection Caddy reuses.
        for i in 0..3u8 {
            let r = http
                .post(format!("{}/v1/subscriptions", caddy.base))
                .bearer_auth(&key)
                .json(&json!({"wallet": wallet(round * 3 + i + 1)}))
                .send()
                .await
                .unwrap();
            assert_eq!(
                r.status(),
                201,
                "round {round}: {}",
                r.text().await.unwrap()
            );
            let r = http
                .patch(format!("{}/v1/webhooks/999999", caddy.base))
                .bearer_auth(&key)
                .json(&json!({"enabled": false}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 404, "round {round}");
        }
    }
    // Directly (no proxy): the API's own 413 in the error shape, and the connection closed.
    let r = http
        .post(format!("{}/v1/subscriptions", api.base))
        .bearer_auth(&key)
        .header("content-type", "application/json")
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(r.headers()["connection"], "close");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "body_too_large");
}

/// POST a chunked body of `len` bytes over a fresh connection; the raw response.
async fn chunked_post(base: &str, key: &str, len: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/subscriptions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b' '; 4096];
    let mut sent = 0;
    while sent < len {
        let frame = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
        if s.write_all(&frame).await.is_err() {
            break; // the proxy answered and closed: read what it said
        }
        sent += chunk.len();
    }
    let _ = s.write_all(b"0\r\n\r\n").await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

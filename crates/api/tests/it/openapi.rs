//! The OpenAPI document is served, parses as OpenAPI 3.1, resolves every `$ref`, and lists
//! exactly the public routes the server answers, with their methods; `/metrics` (loopback only,
//! not in the document) exposes request counters by route template.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::Api;
use reqwest::Method;
use serde_json::Value;

/// What the router serves (path → methods), written out independently of the document.
fn served() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    let routes: &[(&str, &[&str])] = &[
        ("/v1/me", &["get"]),
        ("/v1/keys", &["get", "post"]),
        ("/v1/keys/{prefix}", &["delete"]),
        ("/v1/ws-ticket", &["post"]),
        ("/v1/subscriptions", &["get", "post"]),
        ("/v1/subscriptions/{wallet}", &["patch", "delete"]),
        ("/v1/subscriptions/bulk", &["post"]),
        ("/v1/markets", &["get", "post"]),
        ("/v1/markets/{market}", &["patch", "delete"]),
        ("/v1/webhooks", &["get", "post"]),
        ("/v1/webhooks/{id}", &["get", "patch", "delete"]),
        ("/v1/webhooks/{id}/rotate-secret", &["post"]),
        ("/v1/webhooks/{id}/deliveries", &["get"]),
        ("/v1/webhooks/{id}/replay", &["post"]),
        ("/v1/webhooks/{id}/test", &["post"]),
        ("/v1/trades", &["get"]),
        ("/v1/ready", &["get"]),
        ("/v1/health", &["get"]),
        ("/v1/openapi.json", &["get"]),
        ("/v1/asyncapi.json", &["get"]),
    ];
    routes
        .iter()
        .map(|(p, m)| (*p, m.iter().copied().collect()))
        .collect()
}

const PUBLIC: &[&str] = &[
    "/v1/ready",
    "/v1/health",
    "/v1/openapi.json",
    "/v1/asyncapi.json",
];

fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "$ref" {
                    out.extend(x.as_str());
                }
                refs(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_matches_the_routes() {
    let api = Api::start().await;
    let r = api.call(Method::GET, "/v1/openapi.json", None, None).await;
    r.expect(200, None);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let doc = r.body.clone();
    // It is a well-formed OpenAPI 3.1 document (round-trips through utoipa's model).
    let parsed: utoipa::openapi::OpenApi = serde_json::from_str(&r.text).expect("valid OpenAPI");
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    assert_eq!(parsed.info.title, "pmw API");
    // Every $ref points at a defined component.
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("unexpected ref {r}"));
        assert!(schemas.contains_key(name), "dangling $ref {r}");
    }
    assert!(doc["components"]["securitySchemes"]["api_key"]["scheme"] == "bearer");

    // Paths and methods are exactly the served routes.
    let documented: BTreeMap<String, BTreeSet<String>> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(p, ops)| {
            (
                p.clone(),
                ops.as_object().unwrap().keys().cloned().collect(),
            )
        })
        .collect();
    let expected: BTreeMap<String, BTreeSet<String>> = served()
        .into_iter()
        .map(|(p, m)| (p.to_string(), m.into_iter().map(String::from).collect()))
        .collect();
    assert_eq!(documented, expected);

    // Every documented operation is routed (never 404/405), declares responses, and protected
    // ones declare the bearer scheme and answer 401 without a key.
    for (path, methods) in &documented {
        let concrete = path
            .replace("{id}", "1")
            .replace("{prefix}", "pmw_00000000")
            .replace("{wallet}", "0x1111111111111111111111111111111111111111");
        for m in methods {
            let op = &doc["paths"][path][m];
            assert!(
                op["responses"].as_object().is_some_and(|r| !r.is_empty()),
                "{m} {path}"
            );
            let method = Method::from_bytes(m.to_uppercase().as_bytes()).unwrap();
            let r = api.call(method, &concrete, None, None).await;
            assert!(
                ![404, 405].contains(&r.status.as_u16()),
                "{m} {path} is documented but not routed: {}",
                r.status
            );
            if PUBLIC.contains(&path.as_str()) {
                assert!(op.get("security").is_none(), "{m} {path}");
            } else {
                assert!(
                    op["security"][0].get("api_key").is_some(),
                    "{m} {path} declares its auth"
                );
                r.expect(401, Some("unauthorized"));
            }
        }
        // A method that is not documented is not served.
        let r = api.call(Method::PUT, &concrete, None, None).await;
        r.expect(405, Some("method_not_allowed"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_route_template() {
    let api = Api::start().await;
    let (_, key) = api.account("free").await;
    api.get("/v1/me", &key).await.expect(200, None);
    api.get("/v1/webhooks/41", &key)
        .await
        .expect(404, Some("not_found"));
    api.get("/v1/webhooks/42", &key)
        .await
        .expect(404, Some("not_found"));
    let r = api.call(Method::GET, "/metrics", None, None).await;
    assert_eq!(r.status.as_u16(), 200);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let t = &r.text;
    assert!(
        t.contains(r#"pmw_api_http_requests_total{method="GET",route="/v1/me",status="200"} 1"#),
        "{t}"
    );
    assert!(
        t.contains(
            r#"pmw_api_http_requests_total{method="GET",route="/v1/webhooks/{id}",status="404"} 2"#
        ),
        "{t}"
    );
    assert!(
        t.contains("pmw_api_http_request_duration_seconds_bucket"),
        "{t}"
    );
}

//! Signatures checked by a receiver written independently of our signer: the official
//! `standardwebhooks` Python package, in a real HTTP server, verifying real deliveries.

use std::time::Duration;

use crate::webhook_support::{config, eventually, Env};
use pmw_core::UnixMs;
use pmw_push::webhook::sign::Secret;
use pmw_testkit::hooks::{python_sign, PyReceiver};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_python_sign_agrees_on_published_vector() {
    // The Standard Webhooks published vector, computed by the Python package and by ours.
    let key = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let (id, ts, body) = (
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1_614_265_330,
        r#"{"test": 2432232314}"#,
    );
    let expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    assert_eq!(python_sign(key, id, ts, body).await, expected);
    assert_eq!(
        Secret::parse(key).unwrap().sign(id, ts, body.as_bytes()),
        expected
    );
    // And for a generated secret.
    let s = Secret::generate();
    assert_eq!(
        python_sign(&s.expose(), "msg_x", 1_700_000_000, "{\"a\":1}").await,
        s.sign("msg_x", 1_700_000_000, b"{\"a\":1}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_python_standardwebhooks_verifies_deliveries() {
    let env = Env::new().await;
    let secret = Secret::generate().expose();
    let py = PyReceiver::start(&secret).await;
    let ep = env.endpoint(&py.url(), &secret).await;
    let ids = env.enqueue(1, ep, &[10, 11, 12]).await.unwrap();
    let d = env.dispatcher(1, config());
    d.wake();
    assert!(
        eventually(Duration::from_secs(20), || async {
            py.verdicts().len() >= 3
        })
        .await,
        "{:?}",
        py.verdicts()
    );
    let v = py.verdicts();
    assert_eq!(v.len(), 3, "{v:?}");
    let mut got: Vec<String> = v
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    got.sort();
    assert_eq!(got, ids);
    for r in &v {
        assert_eq!(r["ok"], true, "standardwebhooks rejected: {r}");
        assert!(
            r["user_agent"]
                .as_str()
                .unwrap()
                .starts_with("pmw-webhooks/"),
            "{r}"
        );
        assert_eq!(r["content_type"], "application/json");
        assert_eq!(r["body"]["type"], "trade");
        assert!(
            r["body"]["t_push_ms"].as_i64().unwrap() > 1_600_000_000_000,
            "{r}"
        );
        let ts: i64 = r["timestamp"].as_str().unwrap().parse().unwrap();
        assert!(
            (ts - UnixMs::now().as_i64() / 1000).abs() < 60,
            "timestamp in seconds: {ts}"
        );
    }
    for id in &ids {
        assert!(
            eventually(Duration::from_secs(10), || async {
                env.delivery(id).await.state == "delivered"
            })
            .await
        );
    }
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_rotation_signs_with_previous_secret_until_it_expires() {
    let env = Env::new().await;
    let (old, new) = (Secret::generate().expose(), Secret::generate().expose());
    let now = UnixMs::now().as_i64();
    // Receivers that still know only the old secret.
    let overlap = PyReceiver::start(&old).await;
    let expired = PyReceiver::start(&old).await;
    // A receiver with an unrelated secret must reject: the check can fail.
    let wrong = PyReceiver::start(&Secret::generate().expose()).await;
    let ep_overlap = env
        .endpoint_rotated(&overlap.url(), &new, Some(&old), Some(now + 3_600_000))
        .await;
    let ep_expired = env
        .endpoint_rotated(&expired.url(), &new, Some(&old), Some(now - 1))
        .await;
    let ep_wrong = env.endpoint(&wrong.url(), &new).await;
    for ep in [ep_overlap, ep_expired, ep_wrong] {
        env.enqueue(1, ep, &[20]).await.unwrap();
    }
    let d = env.dispatcher(1, config());
    d.wake();
    for r in [&overlap, &expired, &wrong] {
        assert!(
            eventually(Duration::from_secs(20), || async {
                !r.verdicts().is_empty()
            })
            .await
        );
    }
    let v = overlap.verdicts();
    assert_eq!(
        v[0]["ok"], true,
        "previous secret still signs during the overlap: {v:?}"
    );
    assert_eq!(
        v[0]["signatures"].as_str().unwrap().split(' ').count(),
        2,
        "{v:?}"
    );
    let v = expired.verdicts();
    assert_eq!(
        v[0]["ok"], false,
        "an expired previous secret no longer signs: {v:?}"
    );
    assert_eq!(
        v[0]["signatures"].as_str().unwrap().split(' ').count(),
        1,
        "{v:?}"
    );
    let v = wrong.verdicts();
    assert_eq!(v[0]["ok"], false, "{v:?}");
    assert_eq!(v[0]["error"], "No matching signature found");
    d.stop().await.unwrap();
}

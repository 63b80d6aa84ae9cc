//! SSRF: URLs and resolved addresses a webhook must never reach unless private destinations are
//! allowed, checked on the URL, in the resolver, and end to end through the dispatcher.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use crate::webhook_support::{config, Env, Receiver, Step};
use pmw_core::ssrf::{validate_url, UrlError};
use pmw_push::webhook::client::{
    filter_addrs, resolve_checked, GuardedClient, GuardedResolver, Refused, SendError,
};
use pmw_push::webhook::sign::{sign_headers, Secret};
use pmw_push::webhook::WebhookConfig;
use reqwest::dns::{Name, Resolve};

#[test]
fn webhook_validate_url_refuses_private_destinations() {
    for raw in [
        "http://127.1/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://10.0.0.1/",
        "http://169.254.169.254/",
        "http://192.168.1.1/",
        "http://100.64.0.1/",
        "http://[fd00::1]/",
        "http://localhost/",
    ] {
        let e = validate_url(raw, false).expect_err(raw);
        assert!(
            matches!(
                e,
                UrlError::ForbiddenAddress { .. } | UrlError::ForbiddenHost { .. }
            ),
            "{raw}: {e:?}"
        );
    }
    assert_eq!(
        validate_url("ftp://example.com/x", false).unwrap_err(),
        UrlError::Scheme("ftp".into())
    );
    assert_eq!(
        validate_url("http://user:pw@example.com/", false).unwrap_err(),
        UrlError::Userinfo
    );
    assert_eq!(
        validate_url("https://example.com/hook", false)
            .unwrap()
            .as_str(),
        "https://example.com/hook"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_resolver_drops_forbidden_addresses() {
    // localhost through the system resolver: every address is loopback.
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(("localhost", 0))
        .await
        .unwrap()
        .collect();
    assert!(matches!(
        filter_addrs("localhost", addrs.clone(), false),
        Err(Refused::Forbidden { .. })
    ));
    assert_eq!(
        filter_addrs("localhost", addrs.clone(), true).unwrap(),
        addrs
    );
    // A mixed answer keeps only the public address.
    let mixed: Vec<SocketAddr> = vec![
        "127.0.0.1:0".parse().unwrap(),
        "93.184.215.14:0".parse().unwrap(),
    ];
    assert_eq!(
        filter_addrs("x", mixed, false).unwrap(),
        vec!["93.184.215.14:0".parse().unwrap()]
    );
    // The resolver functions, by name and by an address given as a name.
    assert!(matches!(
        resolve_checked("localhost", false).await,
        Err(Refused::LocalName { .. })
    ));
    assert!(matches!(
        resolve_checked("127.0.0.1", false).await,
        Err(Refused::Forbidden { .. })
    ));
    assert!(!resolve_checked("localhost", true).await.unwrap().is_empty());
    let r = GuardedResolver {
        allow_private: false,
    };
    assert!(r
        .resolve(Name::from_str("localhost").unwrap())
        .await
        .is_err());
    assert!(r
        .resolve(Name::from_str("127.0.0.1").unwrap())
        .await
        .is_err());
    let open = GuardedResolver {
        allow_private: true,
    };
    assert!(
        open.resolve(Name::from_str("localhost").unwrap())
            .await
            .unwrap()
            .count()
            > 0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_guarded_client_refuses_loopback_names() {
    let rx = Receiver::start(vec![Step::status(204)]).await;
    let url = format!("http://localhost:{}/hook", rx.addr.port());
    let guarded = GuardedClient::new(Duration::from_secs(3), false).unwrap();
    let h = sign_headers(&[&Secret::generate()], "msg_1", 1, b"{}");
    // Through the checked path: the URL check refuses the name.
    assert!(matches!(
        guarded.post(&url, &h, b"{}".to_vec()).await,
        Err(SendError::Url(_))
    ));
    // Around the URL check, straight to reqwest: the resolver refuses it.
    let e = guarded
        .http()
        .post(&url)
        .body("{}")
        .send()
        .await
        .expect_err("refused by the resolver");
    let mut chain = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        chain.push_str(&format!(": {s}"));
        src = s.source();
    }
    // The refusal names no address (issue 30: no internal-DNS oracle).
    assert!(
        chain.contains("destination not allowed") && !chain.contains("127.0.0.1"),
        "{chain}"
    );
    // Literal loopback addresses are refused by the URL check before any connection.
    let literal = format!("http://127.0.0.1:{}/hook", rx.addr.port());
    assert!(matches!(
        guarded.post(&literal, &h, b"{}".to_vec()).await,
        Err(SendError::Url(_))
    ));
    assert_eq!(rx.count(), 0, "nothing reached the receiver");
    // Control: with private destinations allowed the same requests arrive (the test can fail).
    let open = GuardedClient::new(Duration::from_secs(3), true).unwrap();
    assert_eq!(
        open.post(&url, &h, b"{}".to_vec()).await.unwrap().status,
        204
    );
    assert_eq!(
        open.post(&literal, &h, b"{}".to_vec())
            .await
            .unwrap()
            .status,
        204
    );
    assert_eq!(rx.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_dispatcher_refuses_private_destinations_unless_allowed() {
    let env = Env::new().await;
    let rx = Receiver::start(vec![Step::status(204)]).await;
    let by_ip = env.endpoint(&rx.url(), &Secret::generate().expose()).await;
    let by_name = env
        .endpoint(
            &format!("http://localhost:{}/hook", rx.addr.port()),
            &Secret::generate().expose(),
        )
        .await;
    let a = env.enqueue(1, by_ip, &[600]).await.unwrap();
    let b = env.enqueue(1, by_name, &[600]).await.unwrap();
    let strict = WebhookConfig {
        allow_private_destinations: false,
        ..config()
    };
    let d = env.dispatcher(1, strict);
    d.wake();
    for id in [&a[0], &b[0]] {
        env.wait_attempts(id, 1, Duration::from_secs(15)).await;
        let row = env.delivery(id).await;
        assert_eq!(
            (row.state.as_str(), row.last_status),
            ("pending", None),
            "{row:?}"
        );
        assert!(
            row.last_error.as_deref().unwrap_or("").contains("refused"),
            "{row:?}"
        );
    }
    assert_eq!(rx.count(), 0);
    d.stop().await.unwrap();
    let refused = env
        .ch_count(
            "SELECT count() FROM delivery_log WHERE outcome = 'refused' AND attempt = ?",
            1,
        )
        .await;
    assert_eq!(refused, 2);
}

//! The locked broker (deploy/nats/nats.conf, as scripts/stack runs it on the shared cluster):
//! no client connects without a role's user and password, and only over TLS; the user and
//! password really go with the connection (a URL's are not sent); each role gets only its
//! permissions: push claims and publishes, an edge follows but cannot publish on pmw's
//! subjects nor create, update, purge or delete a stream.

use std::future::IntoFuture;
use std::time::Duration;

use async_nats::ConnectOptions;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use pmw_session::bus::{stream, Bus, BusAccess, BusConfig, Event, FencedPublisher, Follower};
use pmw_testkit::NatsRole;

use crate::bus::{access, frame, signed};

/// The shared cluster's URLs and `role`'s identity on it.
fn shared(role: &str) -> (&'static str, NatsRole) {
    (pmw_testkit::nats_urls(), pmw_testkit::nats_role(role))
}

/// A stream and prefix no other test uses on the shared cluster, as `role`, with the binary's
/// frame keys.
fn config(tag: &str, role: &NatsRole) -> BusConfig {
    let mut c = signed(BusConfig::new(pmw_testkit::nats_urls()).with_access(access(role)));
    c.stream = format!("PMW_T_{tag}");
    c.prefix = format!("pmwt{tag}");
    c
}

/// Whether `request` succeeded within 3 s (a denied request is never answered).
async fn done<T, E>(request: impl std::future::Future<Output = Result<T, E>>) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(3), request).await,
        Ok(Ok(_))
    )
}

/// The stream sequence of the follower's next frame.
async fn next(f: &mut Follower) -> u64 {
    match tokio::time::timeout(Duration::from_secs(20), f.next()).await {
        Ok(Ok(Event::Frame(fr))) => fr.seq,
        other => panic!("edge follow: {other:?}"),
    }
}

/// `host:port` of the first URL.
fn first_node(urls: &str) -> String {
    let u = urls.split(',').next().unwrap();
    u.split_once("://").map_or(u, |(_, a)| a).to_string()
}

#[tokio::test]
async fn broker_refuses_anonymous_and_wrong_credentials_and_urls_credentials() {
    let (urls, push) = shared("push");
    let anonymous = BusAccess {
        ca: push.ca.clone(),
        ..BusAccess::default()
    };
    let refused = |access: BusAccess| async move {
        match Bus::connect(BusConfig::new(urls).with_access(access), "pmw-test").await {
            Ok(_) => panic!("connected"),
            Err(e) => e.to_string(),
        }
    };
    let e = refused(anonymous).await;
    assert!(e.contains("authorization violation"), "anonymous: {e}");
    let e = refused(BusAccess::new(
        &push.user,
        "not-its-password",
        push.ca.clone(),
    ))
    .await;
    assert!(e.contains("authorization violation"), "wrong password: {e}");
    let e = refused(BusAccess::new("nobody", &push.password, push.ca.clone())).await;
    assert!(e.contains("authorization violation"), "unknown user: {e}");
    // The user and password in the URL alone: the client does not send them (so pmw refuses
    // such URLs and takes them from the settings).
    let in_url = format!("tls://{}:{}@{}", push.user, push.password, first_node(urls));
    let mut opts = ConnectOptions::new();
    if let Some(ca) = &push.ca {
        opts = opts.add_root_certificates(ca.clone());
    }
    let e = match opts
        .connection_timeout(Duration::from_secs(2))
        .connect(in_url)
        .await
    {
        Ok(_) => panic!("a URL's credentials alone are not sent: connected"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("authorization violation"),
        "URL credentials: {e}"
    );
    // The same identity from the settings connects.
    let bus = Bus::connect(BusConfig::new(urls).with_access(access(&push)), "pmw-test")
        .await
        .expect("push connects");
    bus.client.flush().await.expect("flush");
}

/// A client that speaks plain text to a client port (with the right user and password) gets no
/// further than the server's INFO: the server requires TLS and answers no PING in clear.
#[tokio::test]
async fn broker_refuses_a_plain_text_client() {
    let (urls, push) = shared("push");
    let tcp = tokio::net::TcpStream::connect(first_node(urls))
        .await
        .expect("tcp");
    let (r, mut w) = tcp.into_split();
    let mut r = BufReader::new(r);
    let mut info = String::new();
    r.read_line(&mut info).await.expect("INFO");
    assert!(info.starts_with("INFO "), "{info}");
    assert!(info.contains("\"tls_required\":true"), "{info}");
    let connect = serde_json::json!({
        "verbose": false, "pedantic": false, "tls_required": false,
        "user": push.user, "pass": push.password, "name": "plain", "lang": "raw",
        "version": "0", "protocol": 1,
    });
    // The server may close before the write completes: only its answer matters.
    let _ = w
        .write_all(format!("CONNECT {connect}\r\nPING\r\n").as_bytes())
        .await;
    let mut answer = String::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut all = String::new();
        while r.read_line(&mut answer).await.unwrap_or(0) > 0 {
            all.push_str(&answer);
            answer.clear();
        }
        all
    })
    .await;
    let all = read.unwrap_or_else(|_| "(no answer in 5 s)".into());
    assert!(
        !all.contains("PONG"),
        "a plain-text client got an answer: {all}"
    );
}

#[tokio::test]
async fn broker_edge_reads_but_cannot_write_or_change_the_stream() {
    let tag = format!("{:08x}", rand::random::<u32>());
    let (_, push_role) = shared("push");
    let edge_role = pmw_testkit::nats_role("edge");
    let push = Bus::connect(config(&tag, &push_role), "pmw-test")
        .await
        .expect("push connects");
    stream::ensure(&push)
        .await
        .expect("push creates its stream");
    let mut p = FencedPublisher::claim(push.clone(), 1)
        .await
        .expect("push claims");
    p.publish_round(&[frame("a", 1)]).await.expect("publish");

    let (tx, mut events) = mpsc::unbounded_channel();
    let opts = ConnectOptions::new().event_callback(move |e| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(e.to_string());
        }
    });
    let edge = Bus::connect_with(config(&tag, &edge_role), "pmw-test", opts)
        .await
        .expect("edge connects");
    stream::expect(&edge)
        .await
        .expect("the edge sees the stream");
    let mut f = Follower::start(edge.clone(), "a", 0).unwrap();
    assert_eq!(next(&mut f).await, 2, "the edge follows the stream");

    // A publish on the frames subject: refused by the server, never stored.
    let subject = edge.config.frames_subject("a").unwrap();
    edge.client
        .publish(subject.clone(), "junk".into())
        .await
        .unwrap();
    edge.client.flush().await.unwrap();
    let violation = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(e) = events.recv().await {
            if e.contains("Permissions Violation for Publish") {
                return e;
            }
        }
        panic!("events ended");
    })
    .await
    .expect("a permissions violation for the edge's publish");
    assert!(violation.contains(&subject), "{violation}");
    let acked = async { edge.js.publish(subject.clone(), "junk".into()).await?.await };
    assert!(acked.await.is_err(), "an edge's JetStream publish is acked");
    assert!(edge
        .js
        .publish(edge.config.epoch_subject(), "99".into())
        .await
        .unwrap()
        .await
        .is_err());

    // No stream update, purge, delete or create.
    let name = edge.config.stream.clone();
    let mut changed = stream::config(&edge);
    changed.max_age *= 2;
    assert!(!done(edge.js.update_stream(changed)).await);
    let s = edge.js.get_stream_no_info(&name).await.unwrap();
    assert!(!done(s.purge().into_future()).await, "purged");
    assert!(!done(edge.js.delete_stream(&name)).await, "deleted");
    let mut other = stream::config(&edge);
    other.name = format!("PMW_T_{tag}_X");
    other.subjects = vec![format!("pmwx{tag}.>")];
    assert!(!done(edge.js.create_stream(other)).await, "created");
    // Push manages its own stream only: no delete either.
    assert!(!done(push.js.delete_stream(&name)).await, "push deleted");

    // Untouched: push goes on from where it was and the edge follows.
    let info = push.js.get_stream(&name).await.unwrap();
    assert_eq!(info.cached_info().state.last_sequence, 2);
    assert_eq!(
        info.cached_info().config.max_age,
        stream::config(&push).max_age
    );
    p.publish_round(&[frame("a", 2)]).await.expect("publish on");
    assert_eq!(next(&mut f).await, 3);

    let operator = Bus::connect(
        config(&tag, &pmw_testkit::nats_role("operator")),
        "pmw-test",
    )
    .await
    .expect("operator");
    operator
        .js
        .delete_stream(&name)
        .await
        .expect("operator deletes");
}

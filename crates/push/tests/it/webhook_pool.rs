//! Connection reuse: an endpoint's connections outlive its bursts of concurrent attempts (the
//! client keeps as many idle as may be in flight), so a busy endpoint is not sent a TCP connect
//! (and, on https, a TLS handshake) per attempt. Counted by a TCP proxy in front of the receiver.

use std::time::Duration;

use crate::webhook_support::{config, eventually, Env, Receiver, Step};
use pmw_push::webhook::sign::Secret;
use pmw_push::webhook::WebhookConfig;
use pmw_testkit::TcpProxy;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_keeps_a_connection_per_attempt_in_flight_across_bursts() {
    let env = Env::new().await;
    // Slow enough answers that every burst runs its attempts at once.
    let rx = Receiver::start(vec![Step::status(204).delay(Duration::from_millis(150))]).await;
    let proxy = TcpProxy::start(rx.addr).await;
    let url = format!("http://{}/hook", proxy.addr);
    let ep = env.endpoint(&url, &Secret::generate().expose()).await;
    let in_flight = 4;
    let cfg = WebhookConfig {
        max_in_flight_per_endpoint: in_flight,
        ..config()
    };
    let d = env.dispatcher(1, cfg);
    let mut sent = 0;
    for burst in 0..5u64 {
        let blocks: Vec<u64> = (1..=8).map(|i| burst * 10 + i).collect();
        let ids = env.enqueue(1, ep, &blocks).await.unwrap();
        d.wake();
        for id in &ids {
            let done = eventually(Duration::from_secs(20), || async {
                env.delivery(id).await.state == "delivered"
            })
            .await;
            assert!(done, "{id} delivered");
        }
        sent += ids.len();
    }
    assert_eq!(rx.count(), sent);
    let accepted = proxy.accepted();
    assert!(
        accepted <= in_flight as u64,
        "{accepted} connections for {sent} deliveries in bursts, at most {in_flight} in flight"
    );
}

//! Edge mode on real processes: pm2 runs live, push-a, push-b, api and two pmw-edge servers
//! from the production ecosystem file, push and the edges share the NATS cluster, Caddy sends
//! `/v1/ws` to the edges (`PMW_WS_MODE=edge`), and 100 clients resume by cursor through it. A
//! push rolling deploy and a kill -9 of the push leader close no client socket (0 reconnects);
//! `scripts/deploy/edge` restarts the edges one at a time and their clients resume on the
//! other; nothing is lost, duplicated or out of order.

use std::time::Duration;

use pmw_sim::RunConfig;
use pmw_tools::harness::{Drill, Opts};
use pmw_tools::verdict;
use tokio_util::sync::CancellationToken;

/// Run `scripts/deploy/<what>` against the drill; its log (it must succeed).
async fn deploy(d: &Drill, what: &str) -> String {
    let (ok, log) = super::deploy(d, what, pmw_core::build_info::REVISION, &[]).await;
    println!("{log}");
    assert!(ok, "scripts/deploy/{what} failed: {log}");
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_edge_mode_push_faults_close_no_socket_and_an_edge_deploy_loses_nothing() {
    let d = Drill::start_with(Opts {
        edges: 2,
        ..Opts::default()
    })
    .await;
    let traffic = d.sim.spawn(
        RunConfig {
            matches_per_block: 2,
            interval: Duration::from_millis(100),
            count: Some(300),
            duration: None,
        },
        CancellationToken::new(),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    // A push rolling deploy: both instances restarted, the leader handed over.
    deploy(&d, "push").await;
    let after_deploy = d.figures().reconnects;

    // kill -9 of the push leader: the standby takes over, pm2 brings the killed one back as the
    // standby (the drills' own kill, as in the single-process drill).
    let (takeover, _, _) = super::kill_9_the_leader(&d).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_kill = d.figures().reconnects;

    // The edges, one at a time.
    let edge_log = deploy(&d, "edge").await;
    assert!(edge_log.contains("all 2 edges restarted"), "{edge_log}");
    traffic.await.unwrap().unwrap();
    d.drain().await;
    let f = d.figures();
    let line = format!(
        "2 edges; reconnects after a push rolling deploy {after_deploy}, after a push leader kill -9 {after_kill} (takeover {} ms); after the edge rolling deploy: {f}",
        takeover.as_millis()
    );
    verdict("edge mode", "edge-mode", &line);
    assert_eq!(after_deploy, 0, "a push deploy closed client sockets");
    assert_eq!(after_kill, 0, "a push leader kill closed client sockets");
    assert!(
        f.reconnects >= 100,
        "every client was moved off its restarted edge ({} reconnects)",
        f.reconnects
    );
    f.assert_clean();
}

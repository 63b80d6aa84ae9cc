//! The multi-host harness (pmw_testkit::Hosts) on the real kernel: three network namespaces
//! on one bridge, each running a real server process in its own freezer cgroup. A host killed
//! has no process left, a frozen one answers nothing until thawed, a partitioned one is cut
//! from its peers while the test's own namespace still reaches it, an isolated one from all.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use pmw_testkit::{eventually, Host, Hosts};

const PORT: u16 = 18_080;
const UP: Duration = Duration::from_secs(15);

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_millis(800))
        .no_proxy()
        .build()
        .unwrap()
}

async fn answers(ip: Ipv4Addr) -> bool {
    let url = format!("http://{ip}:{PORT}/");
    matches!(client().get(url).send().await, Ok(r) if r.status().is_success())
}

/// Whether a TCP connection from `from` to `to` opens (a probe process on `from`).
async fn reaches(from: &Host, to: Ipv4Addr) -> bool {
    let probe = format!("exec 3<>/dev/tcp/{to}/{PORT}");
    from.command(Path::new("timeout"))
        .args(["2", "bash", "-c", &probe])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .map(|s| s.success())
        .unwrap_or(false)
}

#[tokio::test]
async fn hosts_are_killed_frozen_partitioned_and_isolated_whole() {
    let hosts = Hosts::create(3).expect("create hosts (needs root and iproute2)");
    let mut servers = Vec::new();
    for h in hosts.iter() {
        let server = h
            .command(Path::new("python3"))
            .args(["-m", "http.server", &PORT.to_string(), "--bind", "0.0.0.0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start a server on the host");
        servers.push(server);
    }
    for h in hosts.iter() {
        assert!(eventually(UP, || answers(h.ip)).await, "{} serves", h.netns);
        assert!(!h.pids().is_empty(), "the server is in the host's cgroup");
    }
    let (h1, h2, h3) = (hosts.host(1), hosts.host(2), hosts.host(3));
    assert!(reaches(h2, h1.ip).await && reaches(h1, h3.ip).await);

    // Partition: cut from its peers both ways, still reached from the test's namespace.
    hosts.partition(1).unwrap();
    assert!(
        !reaches(h2, h1.ip).await,
        "a peer reaches the partitioned host"
    );
    assert!(
        !reaches(h1, h3.ip).await,
        "the partitioned host reaches a peer"
    );
    assert!(reaches(h2, h3.ip).await, "the other two still talk");
    assert!(
        answers(h1.ip).await,
        "clients still reach the partitioned host"
    );
    hosts.heal(1).unwrap();
    assert!(reaches(h2, h1.ip).await && reaches(h1, h3.ip).await);

    // Freeze: every process stopped; the kernel may accept a connection but nothing answers.
    h2.freeze().unwrap();
    assert!(!answers(h2.ip).await, "a frozen host answered");
    h2.thaw().unwrap();
    assert!(
        eventually(UP, || answers(h2.ip)).await,
        "thawed host serves again"
    );

    // Isolation: nothing reaches it.
    h3.isolate().unwrap();
    assert!(!answers(h3.ip).await && !reaches(h1, h3.ip).await);
    h3.reconnect().unwrap();
    assert!(eventually(UP, || answers(h3.ip)).await);

    // Kill: no process left on the host, its server gone; the others untouched.
    h1.kill().unwrap();
    assert!(h1.pids().is_empty());
    assert!(!answers(h1.ip).await);
    assert!(answers(h2.ip).await && answers(h3.ip).await);

    let names: Vec<String> = hosts.iter().map(|h| h.netns.clone()).collect();
    drop(hosts);
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&out.stdout);
    assert!(
        names.iter().all(|n| !left.contains(n.as_str())),
        "namespaces left: {left}"
    );
}

//! A frozen primary is left (issue 44): with every Postgres process stopped (SIGSTOP, as on a
//! frozen host, the kernel still ACKs data and keepalives, so no TCP timeout ever fires), the
//! sessions a process opened through a multi-host URL end within the liveness probe's bound
//! (`pmw_core::pg::liveness`): a pooled statement in flight fails, a dedicated (lock or LISTEN)
//! session reports its loss; once the server answers again the pool serves again. On a private
//! Postgres (the shared one is never stopped).

use std::process::Command;
use std::time::Duration;

use pmw_core::pg;
use pmw_testkit::{eventually, PrivateStack, TestDb};
use secrecy::{ExposeSecret, SecretString};

/// Stopped processes, continued on drop (a failed assertion never leaves the server frozen).
pub struct Frozen(Vec<String>);

impl Frozen {
    pub fn stop(pids: Vec<String>) -> Frozen {
        signal("-STOP", &pids);
        Frozen(pids)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal("-CONT", &self.0);
    }
}

pub fn signal(sig: &str, pids: &[String]) {
    let ok = Command::new("kill")
        .arg(sig)
        .args(pids)
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill {sig} {pids:?}");
}

/// The postmaster behind `c` and every process it forked.
async fn server_processes(c: &tokio_postgres::Client) -> Vec<String> {
    let dir: String = c
        .query_one("SHOW data_directory", &[])
        .await
        .unwrap()
        .get(0);
    let pidfile = std::fs::read_to_string(format!("{dir}/postmaster.pid")).expect("postmaster.pid");
    let postmaster = pidfile.lines().next().expect("a pid").trim().to_string();
    let children = Command::new("pgrep")
        .args(["-P", &postmaster])
        .output()
        .expect("pgrep");
    let mut pids = vec![postmaster];
    pids.extend(
        String::from_utf8_lossy(&children.stdout)
            .split_whitespace()
            .map(String::from),
    );
    pids
}

#[tokio::test]
async fn a_frozen_primary_ends_the_sessions_of_a_multi_host_url() {
    let stack = PrivateStack::start();
    let db = TestDb::empty_on(&stack.env).await;
    // The same server named twice: a multi-host URL, as with Patroni's members.
    let url = db.cfg.postgres_url.expose_secret().to_string();
    let (head, tail) = url.rsplit_once('@').expect("user@host");
    let (hostport, path) = tail.split_once('/').expect("host/db");
    let mut cfg = db.cfg.clone();
    cfg.postgres_url = SecretString::from(format!("{head}@{hostport},{hostport}/{path}"));
    let pool = pg::pool(&cfg, "pmw-test-liveness").unwrap();
    let c = pool.get().await.unwrap();
    c.simple_query("SELECT 1").await.unwrap();
    let session = pg::dedicated(&cfg, "pmw-test-liveness-lock").await.unwrap();
    let pids = server_processes(&c).await;

    let frozen = Frozen::stop(pids);
    let in_flight = tokio::spawn(async move { c.simple_query("SELECT 1").await.is_ok() });
    let answered = tokio::time::timeout(Duration::from_secs(30), in_flight)
        .await
        .expect("a statement to the frozen primary ended within 30 s (the probe's bound is 6 s)")
        .unwrap();
    assert!(!answered, "a frozen server cannot have answered");
    tokio::time::timeout(Duration::from_secs(30), session.lost().cancelled())
        .await
        .expect("the dedicated session reported its loss within 30 s");

    drop(frozen);
    let serves = eventually(Duration::from_secs(30), || async {
        let Ok(c) = pool.get().await else {
            return false;
        };
        c.simple_query("SELECT 1").await.is_ok()
    })
    .await;
    assert!(serves, "the pool serves again once the server answers");
}

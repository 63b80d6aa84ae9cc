//! A client-side liveness bound on the primary, for multi-host (HA) URLs: a frozen host's kernel
//! still ACKs data and keepalives, so neither TCP keepalives nor the TCP user timeout ever end a
//! session to it, and its server-side timeouts cannot run; a lock holder, a LISTEN session or a
//! pooled statement would wait on it until it thaws, never learning that Patroni promoted the
//! standby. So each process probes the primary it reaches through the URL (`SELECT 1` every
//! [`PROBE_EVERY`] on a session of its own); when one goes unanswered for [`PROBE_TIMEOUT`], every
//! session the process opened through that URL is ended ([`super::follow::drive`]): queries in
//! flight fail, lock and LISTEN sessions report their loss, the pool reconnects host by host
//! (the frozen one gets [`super::follow::HOST_HANDSHAKE_TIMEOUT`]). With Patroni's REST APIs
//! configured ([`super::patroni`]) the probe also asks the node's member, every probe, whether it
//! still holds the leader key, and ends the sessions the moment it says no. With one host there
//! is no other node to go to, and no probe.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::watch;

use super::follow;
use super::patroni::{Named, Patroni};
use crate::backoff::{Backoff, Policy};

/// How often a process probes the primary.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How long a probe may go unanswered before the primary is taken for frozen. Long enough that
/// a primary busy on 2 shared cores answers in time; short enough that the sessions are ended
/// before Patroni promotes the standby (its `ttl` is 10 s).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// `pmw_pg_primary_unresponsive_total` (counter): probes of the primary unanswered for
/// [`PROBE_TIMEOUT`], each ending every session of the process through that URL.
pub const UNRESPONSIVE_TOTAL: &str = "pmw_pg_primary_unresponsive_total";

/// `pmw_pg_primary_unnamed_total` (counter): times the node the sessions were on stopped being
/// the one Patroni names primary (its REST API said so, or did not answer for
/// [`PROBE_TIMEOUT`]), each ending every session of the process through that URL.
pub const UNNAMED_TOTAL: &str = "pmw_pg_primary_unnamed_total";

/// The probes started in this process, by URL (its hosts, ports, database and user): each
/// one's count of unanswered probes.
fn probes() -> &'static Mutex<HashMap<String, watch::Receiver<u64>>> {
    static PROBES: OnceLock<Mutex<HashMap<String, watch::Receiver<u64>>>> = OnceLock::new();
    PROBES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// What a session opened through `pg` watches: changed when the primary stops answering (`None`
/// for a one-host URL). Starts the URL's probe on first use (within a Tokio runtime).
pub fn watch(pg: &tokio_postgres::Config, patroni: &Patroni) -> Option<watch::Receiver<u64>> {
    if pg.get_hosts().len() < 2 {
        return None;
    }
    let key = format!(
        "{:?} {:?} {:?} {:?} {patroni:?}",
        pg.get_hosts(),
        pg.get_ports(),
        pg.get_dbname(),
        pg.get_user()
    );
    let mut probes = probes().lock().expect("probes");
    let mut rx = match probes.get(&key) {
        Some(rx) => rx.clone(),
        None => {
            let (tx, rx) = watch::channel(0);
            tokio::spawn(probe(pg.clone(), patroni.clone(), tx));
            probes.insert(key, rx.clone());
            rx
        }
    };
    // What happened before this session opened is not its concern.
    rx.borrow_and_update();
    Some(rx)
}

/// Whether `rx` says the primary stopped answering since the session began (never resolves
/// otherwise).
pub async fn unresponsive(rx: &mut Option<watch::Receiver<u64>>) {
    if let Some(rx) = rx {
        if rx.changed().await.is_ok() {
            return;
        }
    }
    std::future::pending().await
}

/// Probe the primary behind `pg` for as long as the process runs.
async fn probe(mut pg: tokio_postgres::Config, patroni: Patroni, tx: watch::Sender<u64>) {
    pg.application_name("pmw-liveness")
        .connect_timeout(follow::HOST_HANDSHAKE_TIMEOUT);
    let mut backoff = Backoff::new(Policy::STORE);
    // When a primary last answered (a probe, or a connection refused by a server that runs).
    let mut answered = tokio::time::Instant::now();
    loop {
        let (host, client) = match follow::connect_indexed(&pg, &patroni).await {
            Ok((host, client, conn)) => {
                tokio::spawn(follow::drive(conn, "pmw-liveness".into(), None, None));
                backoff.reset();
                (host, client)
            }
            Err(e) => {
                tracing::debug!(error = %super::describe(&e), "postgres liveness probe cannot connect");
                // A server that refuses runs; one that does not answer at all for the bound
                // (frozen before the probe got its session) holds the sessions opened earlier.
                if e.as_db_error().is_some() {
                    answered = tokio::time::Instant::now();
                } else if answered.elapsed() >= PROBE_TIMEOUT {
                    lost("postgres primary unreachable: ending this process's sessions to it");
                    tx.send_modify(|n| *n += 1);
                    answered = tokio::time::Instant::now();
                }
                tokio::time::sleep(backoff.next_wait()).await;
                continue;
            }
        };
        let mut unnamed_since = None;
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            let gone =
                match tokio::time::timeout(PROBE_TIMEOUT, client.simple_query("SELECT 1")).await {
                    Ok(Ok(_)) => {
                        answered = tokio::time::Instant::now();
                        leadership(&patroni, host, &mut unnamed_since).await
                    }
                    // The connection ended (a restart, a read-only node): reconnect.
                    Ok(Err(_)) => break,
                    Err(_) => {
                        lost("postgres primary unresponsive: ending this process's sessions to it");
                        true
                    }
                };
            if gone {
                tx.send_modify(|n| *n += 1);
                answered = tokio::time::Instant::now();
                break;
            }
        }
    }
}

/// The primary did not answer for [`PROBE_TIMEOUT`]: count it (the caller ends the sessions).
fn lost(why: &'static str) {
    metrics::counter!(UNRESPONSIVE_TOTAL).increment(1);
    tracing::warn!(timeout_ms = PROBE_TIMEOUT.as_millis() as u64, "{why}");
}

/// Whether the node at `host` lost Patroni's leadership: its member says another holds the
/// leader key, or has not answered for [`PROBE_TIMEOUT`] (`unnamed_since`: since when).
async fn leadership(
    patroni: &Patroni,
    host: usize,
    unnamed_since: &mut Option<tokio::time::Instant>,
) -> bool {
    match patroni.ask(host).await {
        Named::Primary => {
            *unnamed_since = None;
            false
        }
        Named::Not => {
            metrics::counter!(UNNAMED_TOTAL).increment(1);
            tracing::warn!(
                host,
                "patroni no longer names this postgres node primary: ending this process's sessions to it"
            );
            true
        }
        Named::NoAnswer => {
            let since = *unnamed_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() < PROBE_TIMEOUT {
                return false;
            }
            metrics::counter!(UNNAMED_TOTAL).increment(1);
            tracing::warn!(
                host,
                timeout_ms = PROBE_TIMEOUT.as_millis() as u64,
                "patroni's rest api of this postgres node does not answer: ending this process's sessions to it"
            );
            true
        }
    }
}

//! Following the primary (Postgres HA, docs/OPERATIONS.md): every session pmw opens connects
//! read-write only (`target_session_attrs=read-write`, tried host by host), and every connection,
//! pooled or dedicated, is driven here so that one which meets a read-only node ends at once: the
//! pool never hands it out again (deadpool discards a closed client) and a lock or LISTEN
//! session reports its loss; with Patroni's REST APIs configured, only the member Patroni names
//! primary is connected to ([`super::patroni`]). Postgres ≥ 14 reports `in_hot_standby` and
//! `default_transaction_read_only` to the client whenever they change, so this costs no query.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use deadpool_postgres::Connect;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::config::Host;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{AsyncMessage, Client, Connection, NoTls, Notification, Socket};

use super::patroni::Patroni;

/// `pmw_pg_sessions_dropped_total{reason}`: connections ended because their node turned
/// read-only (`read_only`), stopped answering ([`super::liveness`]: `unresponsive`) or the
/// connection failed (`error`).
pub const SESSIONS_DROPPED: &str = "pmw_pg_sessions_dropped_total";

/// The node behind `conn` no longer takes writes: a standby (`in_hot_standby`), or a primary
/// fenced with `default_transaction_read_only`.
pub fn read_only_node(conn: &Connection<Socket, NoTlsStream>) -> bool {
    conn.parameter("in_hot_standby") == Some("on")
        || conn.parameter("default_transaction_read_only") == Some("on")
}

/// How a driven connection ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The server closed it.
    Closed,
    /// A connection error.
    Failed,
    /// Its node turned read-only: dropped by us.
    ReadOnly,
    /// Its node stopped answering the process's liveness probe: dropped by us.
    Unresponsive,
}

/// How a driven connection stops.
enum Stop {
    Failed(tokio_postgres::Error),
    Closed,
    ReadOnly,
}

/// Drive `conn` until it ends, its node turns read-only or (`liveness`,
/// [`super::liveness::watch`]) stops answering, forwarding notifications to `notifications`
/// (when given). Dropping the connection closes the client's side: queries in flight fail and
/// `Client::is_closed` turns true.
pub async fn drive(
    mut conn: Connection<Socket, NoTlsStream>,
    name: String,
    notifications: Option<mpsc::UnboundedSender<Notification>>,
    mut liveness: Option<tokio::sync::watch::Receiver<u64>>,
) -> Ended {
    let messages = std::future::poll_fn(|cx| loop {
        let polled = conn.poll_message(cx);
        // Checked after every read: a ParameterStatus is handled inside `poll_message`.
        if read_only_node(&conn) {
            return Poll::Ready(Stop::ReadOnly);
        }
        match polled {
            Poll::Ready(Some(Ok(AsyncMessage::Notification(n)))) => {
                if let Some(tx) = &notifications {
                    // The receiver may be gone (nobody listens): that is fine.
                    let _ = tx.send(n);
                }
            }
            Poll::Ready(Some(Ok(AsyncMessage::Notice(n)))) => {
                tracing::debug!(session = %name, notice = %n.message(), "postgres notice");
            }
            Poll::Ready(Some(Ok(_))) => {}
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Stop::Failed(e)),
            Poll::Ready(None) => return Poll::Ready(Stop::Closed),
            Poll::Pending => return Poll::Pending,
        }
    });
    let stop = tokio::select! {
        stop = messages => stop,
        _ = super::liveness::unresponsive(&mut liveness) => {
            tracing::warn!(session = %name, "postgres node unresponsive: session dropped");
            return dropped(Ended::Unresponsive);
        }
    };
    match stop {
        Stop::Failed(e) => {
            tracing::warn!(session = %name, error = %super::describe(&e), "postgres session lost");
            dropped(Ended::Failed)
        }
        Stop::Closed => {
            tracing::info!(session = %name, "postgres session closed");
            Ended::Closed
        }
        Stop::ReadOnly => {
            tracing::warn!(session = %name, "postgres node is read-only: session dropped");
            dropped(Ended::ReadOnly)
        }
    }
}

fn dropped(how: Ended) -> Ended {
    let reason = match how {
        Ended::ReadOnly => "read_only",
        Ended::Unresponsive => "unresponsive",
        _ => "error",
    };
    metrics::counter!(SESSIONS_DROPPED, "reason" => reason).increment(1);
    how
}

/// How long one host of a multi-host URL may take to complete a connection, handshake
/// included: a frozen host's kernel still accepts the TCP connection, so `connect_timeout`
/// alone (socket level) would wait on it for as long as it stays frozen, never trying the next.
pub const HOST_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// `pmw_pg_no_primary_named_total` (counter): connection attempts that found no host named
/// primary by Patroni ([`super::patroni`]; a failover in progress, or its REST API unreachable).
pub const NO_PRIMARY_NAMED: &str = "pmw_pg_no_primary_named_total";

/// Connect as `pg` says, host by host: with several hosts each gets at most
/// [`HOST_HANDSHAKE_TIMEOUT`] for the whole connection (TCP, startup, authentication, the
/// read-write check) before the next is tried, and with `patroni` set only the hosts whose
/// Patroni says it holds the leader key are tried; with one host, as tokio-postgres does.
pub async fn connect(
    pg: &tokio_postgres::Config,
    patroni: &Patroni,
) -> Result<(Client, Connection<Socket, NoTlsStream>), tokio_postgres::Error> {
    connect_indexed(pg, patroni)
        .await
        .map(|(_, client, conn)| (client, conn))
}

/// [`connect`], saying which host (its index in `pg`) the connection went to.
pub async fn connect_indexed(
    pg: &tokio_postgres::Config,
    patroni: &Patroni,
) -> Result<(usize, Client, Connection<Socket, NoTlsStream>), tokio_postgres::Error> {
    let hosts = pg.get_hosts();
    if hosts.len() < 2 || !pg.get_hostaddrs().is_empty() {
        let (client, conn) = pg.connect(NoTls).await?;
        return Ok((0, client, conn));
    }
    let named = patroni.primaries(hosts.len()).await;
    if named.is_empty() {
        metrics::counter!(NO_PRIMARY_NAMED).increment(1);
        tracing::warn!(
            hosts = hosts.len(),
            "postgres: patroni names no host primary (failover in progress, or its rest api unreachable)"
        );
        return Err(tokio_postgres::Error::__private_api_timeout());
    }
    let mut last = None;
    for i in named {
        let one = single_host(pg, &hosts[i], i);
        match tokio::time::timeout(HOST_HANDSHAKE_TIMEOUT, one.connect(NoTls)).await {
            Ok(Ok((client, conn))) => return Ok((i, client, conn)),
            Ok(Err(e)) => last = Some(e),
            Err(_) => last = Some(tokio_postgres::Error::__private_api_timeout()),
        }
    }
    Err(last.unwrap_or_else(tokio_postgres::Error::__private_api_timeout))
}

/// `pg` with only its `i`th host (`host`) and that host's port.
fn single_host(pg: &tokio_postgres::Config, host: &Host, i: usize) -> tokio_postgres::Config {
    let mut one = tokio_postgres::Config::new();
    match host {
        Host::Tcp(h) => one.host(h),
        Host::Unix(p) => one.host_path(p),
    };
    let ports = pg.get_ports();
    if let Some(port) = ports.get(i).or(ports.first()) {
        one.port(*port);
    }
    if let Some(u) = pg.get_user() {
        one.user(u);
    }
    if let Some(p) = pg.get_password() {
        one.password(p);
    }
    if let Some(d) = pg.get_dbname() {
        one.dbname(d);
    }
    if let Some(o) = pg.get_options() {
        one.options(o);
    }
    if let Some(a) = pg.get_application_name() {
        one.application_name(a);
    }
    if let Some(t) = pg.get_connect_timeout() {
        one.connect_timeout(*t);
    }
    if let Some(t) = pg.get_tcp_user_timeout() {
        one.tcp_user_timeout(*t);
    }
    one.keepalives(pg.get_keepalives())
        .keepalives_idle(pg.get_keepalives_idle());
    if let Some(t) = pg.get_keepalives_interval() {
        one.keepalives_interval(t);
    }
    if let Some(r) = pg.get_keepalives_retries() {
        one.keepalives_retries(r);
    }
    one.ssl_mode(pg.get_ssl_mode())
        .channel_binding(pg.get_channel_binding())
        .target_session_attrs(pg.get_target_session_attrs());
    one
}

/// The pool's connector: connects like deadpool's own, then drives the connection with
/// [`drive`], so a pooled client whose node turns read-only is closed and never reused.
#[derive(Debug, Clone)]
pub struct PrimaryOnly {
    pub application_name: String,
    pub patroni: Patroni,
}

impl Connect for PrimaryOnly {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> BoxFuture<'_, Result<(Client, JoinHandle<()>), tokio_postgres::Error>> {
        let pg_config = pg_config.clone();
        let name = self.application_name.clone();
        let patroni = self.patroni.clone();
        Box::pin(async move {
            let liveness = super::liveness::watch(&pg_config, &patroni);
            let (client, conn) = connect(&pg_config, &patroni).await?;
            let task: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
                drive(conn, name, None, liveness).await;
            });
            Ok((client, tokio::spawn(task)))
        })
    }
}

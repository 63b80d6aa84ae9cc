//! Following the primary (Postgres HA, docs/OPERATIONS.md): every session pmw opens connects
//! read-write only (`target_session_attrs=read-write`, tried host by host), and every connection,
//! pooled or dedicated, is driven here so that one which meets a read-only node ends at once: the
//! pool never hands it out again (deadpool discards a closed client) and a lock or LISTEN
//! session reports its loss. Postgres ≥ 14 reports `in_hot_standby` and
//! `default_transaction_read_only` to the client whenever they change, so this costs no query.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use deadpool_postgres::Connect;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{AsyncMessage, Client, Connection, NoTls, Notification, Socket};

/// `pmw_pg_sessions_dropped_total{reason}`: connections ended because their node turned
/// read-only (`read_only`) or the connection failed (`error`).
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
}

/// One step of a driven connection.
enum Step {
    Message(AsyncMessage),
    Failed(tokio_postgres::Error),
    Closed,
    ReadOnly,
}

/// Drive `conn` until it ends or its node turns read-only, forwarding notifications to
/// `notifications` (when given). Dropping the connection closes the client's side: queries in
/// flight fail and `Client::is_closed` turns true.
pub async fn drive(
    mut conn: Connection<Socket, NoTlsStream>,
    name: String,
    notifications: Option<mpsc::UnboundedSender<Notification>>,
) -> Ended {
    loop {
        let step = std::future::poll_fn(|cx| {
            let polled = conn.poll_message(cx);
            // Checked after every read: a ParameterStatus is handled inside `poll_message`.
            if read_only_node(&conn) {
                return Poll::Ready(Step::ReadOnly);
            }
            match polled {
                Poll::Ready(Some(Ok(m))) => Poll::Ready(Step::Message(m)),
                Poll::Ready(Some(Err(e))) => Poll::Ready(Step::Failed(e)),
                Poll::Ready(None) => Poll::Ready(Step::Closed),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        match step {
            Step::Message(AsyncMessage::Notification(n)) => {
                if let Some(tx) = &notifications {
                    // The receiver may be gone (nobody listens): that is fine.
                    let _ = tx.send(n);
                }
            }
            Step::Message(AsyncMessage::Notice(n)) => {
                tracing::debug!(session = %name, notice = %n.message(), "postgres notice");
            }
            Step::Message(_) => {}
            Step::Failed(e) => {
                tracing::warn!(session = %name, error = %super::describe(&e), "postgres session lost");
                return dropped(Ended::Failed);
            }
            Step::Closed => {
                tracing::info!(session = %name, "postgres session closed");
                return Ended::Closed;
            }
            Step::ReadOnly => {
                tracing::warn!(session = %name, "postgres node is read-only: session dropped");
                return dropped(Ended::ReadOnly);
            }
        }
    }
}

fn dropped(how: Ended) -> Ended {
    let reason = match how {
        Ended::ReadOnly => "read_only",
        _ => "error",
    };
    metrics::counter!(SESSIONS_DROPPED, "reason" => reason).increment(1);
    how
}

/// The pool's connector: connects like deadpool's own, then drives the connection with
/// [`drive`], so a pooled client whose node turns read-only is closed and never reused.
#[derive(Debug, Clone)]
pub struct PrimaryOnly {
    pub application_name: String,
}

impl Connect for PrimaryOnly {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> BoxFuture<'_, Result<(Client, JoinHandle<()>), tokio_postgres::Error>> {
        let pg_config = pg_config.clone();
        let name = self.application_name.clone();
        Box::pin(async move {
            let (client, conn) = pg_config.connect(NoTls).await?;
            let task: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
                drive(conn, name, None).await;
            });
            Ok((client, tokio::spawn(task)))
        })
    }
}

//! Postgres access: a deadpool pool for ordinary queries, and dedicated unpooled sessions for
//! LISTEN and advisory locks (pooled connections are driven in a way that drops notifications).

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, QueueMode, RecyclingMethod};
use tokio::sync::mpsc;
use tokio_postgres::{Client, Notification};
use tokio_util::sync::CancellationToken;

use super::follow;
use crate::config::CoreConfig;

pub use deadpool_postgres::{Object as PooledClient, Pool as PgPool};

/// Postgres failures outside a query's own error.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("postgres: {}", describe(.0))]
    Query(#[from] tokio_postgres::Error),
    #[error("postgres pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("postgres pool setup: {0}")]
    Build(String),
}

/// A Postgres error as an operator needs it: the server's own message, SQLSTATE, detail, hint
/// and constraint when the server sent them (tokio-postgres' `Display` says only "db error"),
/// else the client-side error.
pub fn describe(e: &tokio_postgres::Error) -> String {
    let Some(db) = e.as_db_error() else {
        return match std::error::Error::source(e) {
            Some(src) => format!("{e}: {src}"),
            None => e.to_string(),
        };
    };
    let mut s = format!("{} (sqlstate {})", db.message(), db.code().code());
    for (k, v) in [
        ("detail", db.detail()),
        ("hint", db.hint()),
        ("table", db.table()),
        ("constraint", db.constraint()),
    ] {
        if let Some(v) = v {
            s.push_str(&format!("; {k}: {v}"));
        }
    }
    s
}

/// `url_options` with `-c name=value` appended for each setting.
fn with_settings(url_options: Option<&str>, settings: &[(&str, u64)]) -> String {
    let mut opts = url_options.unwrap_or("").trim().to_string();
    for (name, value) in settings {
        if !opts.is_empty() {
            opts.push(' ');
        }
        opts.push_str(&format!("-c {name}={value}"));
    }
    opts
}

/// The session settings every pooled connection starts with (`-c` options of the startup
/// packet, after any `options` of the URL): `statement_timeout`, `lock_timeout` and
/// `idle_in_transaction_session_timeout` from the core config, so no pooled statement, lock wait
/// or forgotten transaction can hold a connection (and `backend_xmin`) for long. Dedicated
/// sessions ([`dedicated`]) get none of them.
pub fn pooled_session_options(cfg: &CoreConfig, url_options: Option<&str>) -> String {
    with_settings(
        url_options,
        &[
            ("statement_timeout", cfg.postgres_statement_timeout_ms),
            ("lock_timeout", cfg.postgres_lock_timeout_ms),
            (
                "idle_in_transaction_session_timeout",
                cfg.postgres_idle_in_transaction_timeout_ms,
            ),
        ],
    )
}

/// The settings of a dedicated session: no `statement_timeout` and no `lock_timeout`, whatever
/// the database or role defaults say, so a segmented lock wait ends only by its own per-segment
/// `SET lock_timeout` ([`crate::lock`]) and a LISTEN session is never cut.
pub fn dedicated_session_options(url_options: Option<&str>) -> String {
    with_settings(
        url_options,
        &[("statement_timeout", 0), ("lock_timeout", 0)],
    )
}

/// The pooled client for ordinary, short statements. Its sessions carry the timeouts of
/// [`pooled_session_options`].
pub fn pool(cfg: &CoreConfig, application_name: &str) -> Result<Pool, PgError> {
    let mut pg = cfg.postgres();
    let options = pooled_session_options(cfg, pg.get_options());
    pg.options(options);
    pg.application_name(application_name);
    pg.connect_timeout(Duration::from_secs(5));
    keepalives(&mut pg);
    // Fast recycling discards a closed client; `PrimaryOnly` closes one whose node turned
    // read-only, and a dead node is noticed by the keepalives.
    let mgr = Manager::from_connect(
        pg,
        follow::PrimaryOnly {
            application_name: application_name.to_string(),
            patroni: cfg.patroni(),
        },
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    // LIFO: a statement goes to the connection used last, whose backend has it planned and its
    // catalog cached. deadpool's default (FIFO) hands out every idle connection in turn, so each
    // of the pool's backends re-planned each hot statement for its first five runs (Postgres
    // custom plans, ~2 ms each for a round's read or a block's commit) and ran on cold caches.
    Pool::builder(mgr)
        .queue_mode(QueueMode::Lifo)
        .max_size(cfg.postgres_pool_size)
        .wait_timeout(Some(Duration::from_secs(10)))
        .create_timeout(Some(Duration::from_secs(5)))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| PgError::Build(e.to_string()))
}

/// TCP keepalives (idle 10 s, interval 2 s, 3 probes) and a TCP user timeout of 20 s: a dead or
/// partitioned node is noticed in seconds, not hours, by pooled and dedicated sessions alike.
fn keepalives(pg: &mut tokio_postgres::Config) {
    pg.keepalives(true)
        .keepalives_idle(Duration::from_secs(10))
        .keepalives_interval(Duration::from_secs(2))
        .keepalives_retries(3)
        .tcp_user_timeout(Duration::from_secs(20));
}

/// A dedicated session: its own TCP connection, driven by `poll_message` so notifications reach
/// [`Session::notifications`]. `lost` is cancelled the moment the connection ends, or its node
/// turns read-only ([`follow::drive`]).
pub struct Session {
    pub client: Client,
    pub notifications: mpsc::UnboundedReceiver<Notification>,
    lost: CancellationToken,
}

impl Session {
    /// Cancelled when the server connection is gone (restart, network, terminate).
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }
}

/// A dedicated session ([`dedicated`]) that LISTENs on `channels`: push's wake-ups, an edge's
/// subscription changes. Its notifications arrive on [`Session::notifications`].
pub async fn listening(
    cfg: &CoreConfig,
    application_name: &str,
    channels: &[&str],
) -> Result<Session, PgError> {
    let s = dedicated(cfg, application_name).await?;
    let sql: String = channels.iter().map(|c| format!("LISTEN {c};")).collect();
    s.client.batch_execute(&sql).await?;
    Ok(s)
}

/// Open a dedicated session with TCP keepalives (idle 10 s, interval 2 s, 3 probes) and a TCP
/// user timeout of 20 s, so a dead or partitioned peer is noticed in seconds, not hours (a lock
/// held by a vanished host would otherwise stall the standby). A frozen process on a live host
/// still ACKs keepalives: push's standby handles that with the leader's heartbeat as a lease,
/// and with a multi-host URL the process's liveness probe ends the session ([`super::liveness`]).
/// `application_name` makes it recognisable in `pg_stat_activity`. It carries
/// none of the pooled timeouts ([`dedicated_session_options`]): an advisory lock wait or a LISTEN
/// session is long by design.
pub async fn dedicated(cfg: &CoreConfig, application_name: &str) -> Result<Session, PgError> {
    let mut pg = cfg.postgres();
    let options = dedicated_session_options(pg.get_options());
    pg.options(options)
        .application_name(application_name)
        .connect_timeout(Duration::from_secs(5));
    keepalives(&mut pg);
    let patroni = cfg.patroni();
    let liveness = super::liveness::watch(&pg, &patroni);
    let (client, conn) = follow::connect(&pg, &patroni).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let lost = CancellationToken::new();
    let lost_tx = lost.clone();
    let name = application_name.to_string();
    tokio::spawn(async move {
        follow::drive(conn, name, Some(tx), liveness).await;
        lost_tx.cancel();
    });
    Ok(Session {
        client,
        notifications: rx,
        lost,
    })
}

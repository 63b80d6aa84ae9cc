//! Foundation guarantees on the real servers: times survive the production ClickHouse write path
//! on a server running in Asia/Shanghai, windows are two-sided, dedicated Postgres sessions
//! deliver notifications and report their loss, pooled Postgres sessions carry their timeouts
//! and dedicated ones none; edge mode's bus on real JetStream clusters (`bus`), its frames signed
//! (`bus_signed`); every session following the Postgres primary on the Patroni HA stack (`ha`,
//! `ha_cluster`); whole hosts killed, frozen and partitioned by the multi-host harness (`hosts`);
//! a frozen primary left by the sessions of a multi-host URL (`liveness`).

#[path = "foundation/broker.rs"]
mod broker;
#[path = "foundation/bus.rs"]
mod bus;
#[path = "foundation/bus_signed.rs"]
mod bus_signed;
#[path = "foundation/ha.rs"]
mod ha;
#[path = "foundation/ha_cluster.rs"]
mod ha_cluster;
#[path = "foundation/hosts.rs"]
mod hosts;
#[path = "foundation/liveness.rs"]
mod liveness;

use std::time::Duration;

use pmw_core::ch::{latency, IngestLatencyRow, Window};
use pmw_core::lock::WriterLock;
use pmw_core::pg;
use pmw_core::UnixMs;
use pmw_testkit::{eventually, TestDb};
use serde::Deserialize;

fn row(block: u64, t_detect_ms: i64) -> IngestLatencyRow {
    IngestLatencyRow {
        block_number: block,
        block_hash: format!("0x{block:064x}"),
        t_detect_ms,
        t_logs_ms: t_detect_ms + 50,
        t_stored_ms: t_detect_ms + 128,
        head_lead_ms: -740,
        trade_count: 3,
        backfilled: 0,
    }
}

#[derive(Debug, Deserialize)]
struct ReadBack {
    block_number: String,
    t_detect_ms: String,
    t_stored_ms: String,
    head_lead_ms: String,
    server_local: String,
    utc: String,
}

#[tokio::test]
async fn times_round_trip_exactly_through_the_production_write_path_in_a_non_utc_server() {
    let db = TestDb::new().await;
    let tz: String = db.ch.query("SELECT timezone()").fetch_one().await.unwrap();
    assert_eq!(
        tz, "Asia/Shanghai",
        "the test server must run in a non-UTC timezone to mean anything"
    );

    // 2025-12-02T10:40:00.123Z: sub-second part, and a UTC date/hour that differs from Shanghai's.
    let t = 1_764_672_000_123_i64;
    let now = UnixMs::now().0;
    latency::insert_ingest(&db.ch, &[row(1, t), row(2, now)])
        .await
        .unwrap();

    // Read back over a different path than the write (JSON text, not RowBinary), and let the
    // server render the instant in its own zone and in UTC: the stored value is an instant.
    let mut cursor = db
        .ch
        .query(
            "SELECT block_number, t_detect_ms, t_stored_ms, head_lead_ms, \
             toString(toDateTime(intDiv(t_detect_ms, 1000))) AS server_local, \
             toString(toDateTime(intDiv(t_detect_ms, 1000), 'UTC')) AS utc \
             FROM ingest_latency ORDER BY block_number",
        )
        .fetch_bytes("JSONEachRow")
        .unwrap();
    let bytes = cursor.collect().await.unwrap();
    let rows: Vec<ReadBack> = String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        rows.len(),
        2,
        "both rows must read back (an empty result is a failure, not a pass)"
    );
    assert_eq!(rows[0].block_number, "1");
    assert_eq!(rows[0].t_detect_ms, t.to_string());
    assert_eq!(rows[0].t_stored_ms, (t + 128).to_string());
    assert_eq!(rows[0].head_lead_ms, "-740");
    assert_eq!(rows[0].utc, "2025-12-02 10:40:00");
    assert_eq!(rows[0].server_local, "2025-12-02 18:40:00");
    assert_eq!(rows[1].t_detect_ms, now.to_string());

    // And the typed read path gives back the identical rows.
    let typed = latency::ingest_in_window(
        &db.ch,
        Window {
            from_ms: 0,
            to_ms: i64::MAX,
        },
    )
    .await
    .unwrap();
    assert_eq!(typed, vec![row(1, t), row(2, now)]);
}

#[tokio::test]
async fn window_queries_are_bounded_on_both_sides() {
    let db = TestDb::new().await;
    let now = UnixMs::now();
    let hour = 3_600_000;
    let far_future = 253_402_300_799_000; // 9999-12-31T23:59:59Z, the seed's saturated value
    latency::insert_ingest(
        &db.ch,
        &[
            row(10, now.0 - 2 * hour), // before the 1h window
            row(11, now.0 - hour / 2), // inside
            row(12, now.0 - 1),        // inside
            row(13, far_future),       // corrupt: far future
            row(14, 1_000),            // corrupt: far past
        ],
    )
    .await
    .unwrap();
    let last_hour = Window::ending_at(now, Duration::from_secs(3600));
    let got: Vec<u64> = latency::ingest_in_window(&db.ch, last_hour)
        .await
        .unwrap()
        .iter()
        .map(|r| r.block_number)
        .collect();
    assert_eq!(got, vec![11, 12]);
    let last_day = Window::ending_at(now, Duration::from_secs(86_400));
    let got: Vec<u64> = latency::ingest_in_window(&db.ch, last_day)
        .await
        .unwrap()
        .iter()
        .map(|r| r.block_number)
        .collect();
    assert_eq!(
        got,
        vec![10, 11, 12],
        "the far-future row must sit in no window"
    );
}

#[tokio::test]
async fn reinserted_block_reads_once() {
    let db = TestDb::new().await;
    let t = UnixMs::now().0;
    // A crash between insert and watermark update re-inserts the same block.
    latency::insert_ingest(&db.ch, &[row(20, t)]).await.unwrap();
    latency::insert_ingest(&db.ch, &[row(20, t)]).await.unwrap();
    let got = latency::ingest_in_window(
        &db.ch,
        Window {
            from_ms: 0,
            to_ms: i64::MAX,
        },
    )
    .await
    .unwrap();
    assert_eq!(got.len(), 1, "readers de-duplicate: {got:?}");
}

#[tokio::test]
async fn dedicated_session_delivers_notifications_and_reports_its_loss() {
    let db = TestDb::new().await;
    let mut session = pg::dedicated(&db.cfg, "pmw-test-listen").await.unwrap();
    session
        .client
        .batch_execute("LISTEN pmw_blocks")
        .await
        .unwrap();
    let pid: i32 = session
        .client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);

    let other = db.connect().await;
    other
        .execute("SELECT pg_notify('pmw_blocks', '42')", &[])
        .await
        .unwrap();
    let n = tokio::time::timeout(Duration::from_secs(10), session.notifications.recv())
        .await
        .expect("notification within 10 s")
        .expect("channel open");
    assert_eq!((n.channel(), n.payload()), ("pmw_blocks", "42"));

    let app: String = other
        .query_one(
            "SELECT application_name FROM pg_stat_activity WHERE pid = $1",
            &[&pid],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(app, "pmw-test-listen");

    assert!(!session.is_lost());
    other
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), session.lost().cancelled())
        .await
        .expect("a terminated session is reported lost");
}

/// A multi-host URL whose first host is frozen (its kernel accepts the TCP connection, nothing
/// ever answers: a host in the freezer, issue 44) still connects, through the next host, both
/// the pool and a dedicated session: each host gets a bounded handshake, not only a bounded
/// TCP connect.
#[tokio::test]
async fn a_frozen_first_host_of_a_multi_host_url_is_skipped_by_pooled_and_dedicated_sessions() {
    use secrecy::{ExposeSecret, SecretString};
    let db = TestDb::new().await;
    // Accepts connections and never reads or answers them.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            open.push(s);
        }
    });
    let mut cfg = db.cfg.clone();
    let url = cfg.postgres_url.expose_secret().to_string();
    let at = url.find('@').expect("a user in the url") + 1;
    cfg.postgres_url = SecretString::from(format!(
        "{}127.0.0.1:{silent_port},{}",
        &url[..at],
        &url[at..]
    ));
    let pool = pg::pool(&cfg, "pmw-test-frozen-first").unwrap();
    let c = tokio::time::timeout(Duration::from_secs(15), pool.get())
        .await
        .expect("a pooled connection within 15 s")
        .expect("the pool connects through the second host");
    c.execute("SELECT 1", &[]).await.unwrap();
    let s = tokio::time::timeout(
        Duration::from_secs(15),
        pg::dedicated(&cfg, "pmw-test-frozen-first"),
    )
    .await
    .expect("a dedicated session within 15 s")
    .expect("the dedicated session connects through the second host");
    s.client.execute("SELECT 1", &[]).await.unwrap();
    held.abort();
}

async fn show(c: &tokio_postgres::Client, name: &str) -> String {
    c.query_one(&format!("SHOW {name}"), &[])
        .await
        .unwrap()
        .get(0)
}

fn sqlstate(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_sessions_carry_timeouts_and_dedicated_sessions_do_not() {
    let db = TestDb::new().await;
    // The defaults, on the pool every service uses.
    let c = db.pg.get().await.unwrap();
    assert_eq!(show(&c, "statement_timeout").await, "30s");
    assert_eq!(show(&c, "lock_timeout").await, "10s");
    assert_eq!(
        show(&c, "idle_in_transaction_session_timeout").await,
        "1min"
    );
    drop(c);

    // Configured values, and what they do.
    let mut cfg = db.cfg.clone();
    cfg.postgres_statement_timeout_ms = 800;
    cfg.postgres_lock_timeout_ms = 300;
    cfg.postgres_idle_in_transaction_timeout_ms = 500;
    let pool = pg::pool(&cfg, "pmw-test-timeouts").unwrap();
    let c = pool.get().await.unwrap();
    assert_eq!(show(&c, "statement_timeout").await, "800ms");
    assert_eq!(show(&c, "lock_timeout").await, "300ms");
    assert_eq!(
        show(&c, "idle_in_transaction_session_timeout").await,
        "500ms"
    );
    let e = c.execute("SELECT pg_sleep(5)", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "57014", "statement timeout: {e:?}");
    // A lock held elsewhere: the pooled wait gives up with 55P03 (before its statement timeout).
    let holder = db.connect().await;
    holder
        .execute("SELECT pg_advisory_lock(4242)", &[])
        .await
        .unwrap();
    let e = c
        .execute("SELECT pg_advisory_lock(4242)", &[])
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "55P03", "lock timeout: {e:?}");
    // A transaction left idle is ended by the server.
    let mut idle = pool.get().await.unwrap();
    let tx = idle.transaction().await.unwrap();
    let pid: i32 = tx
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    // The server ends it after 500 ms idle: its backend leaves pg_stat_activity.
    let ended = eventually(Duration::from_secs(10), || async {
        holder
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 0
    })
    .await;
    assert!(ended, "the session idle in its transaction is still there");
    assert!(
        tx.execute("SELECT 1", &[]).await.is_err(),
        "the session idle in its transaction was terminated"
    );
    drop(tx);
    drop(idle);

    // Dedicated sessions ignore even a database default that would cut a long wait.
    let name = db.name.clone();
    holder
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET statement_timeout = 200; ALTER DATABASE {name} SET lock_timeout = 200"
        ))
        .await
        .unwrap();
    let plain = db.connect().await;
    assert_eq!(
        show(&plain, "statement_timeout").await,
        "200ms",
        "the database default applies"
    );
    let session = pg::dedicated(&db.cfg, "pmw-test-dedicated").await.unwrap();
    assert_eq!(show(&session.client, "statement_timeout").await, "0");
    assert_eq!(show(&session.client, "lock_timeout").await, "0");
    session
        .client
        .execute("SELECT pg_sleep(0.5)", &[])
        .await
        .expect("a dedicated session has no statement timeout");
    // A segmented lock wait longer than the database's timeouts: released after 1 s, acquired.
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        holder
            .execute("SELECT pg_advisory_unlock(4242)", &[])
            .await
            .unwrap();
        holder
    });
    let lock = WriterLock::acquire(
        &db.cfg,
        "pmw-test-lock",
        4242,
        Duration::from_secs(30),
        &tokio_util::sync::CancellationToken::new(),
    )
    .await
    .expect("the lock wait is not cut by a statement or lock timeout")
    .expect("acquired");
    let holder = release.await.unwrap();
    holder
        .batch_execute(&format!(
            "ALTER DATABASE {name} RESET statement_timeout; ALTER DATABASE {name} RESET lock_timeout"
        ))
        .await
        .unwrap();
    lock.release().await.unwrap();
}

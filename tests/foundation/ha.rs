//! Postgres HA on Patroni (issue 44): every pmw session follows the primary. On the opt-in HA
//! stack (`scripts/stack up ha`, ports and state of its own), through pmw's own pool, LISTEN and
//! writer-lock sessions: a switchover and a killed primary are followed (writes acknowledged
//! again, every acknowledged row present, PushEpoch strictly increasing across the promotion, a
//! stale lock holder fenced on the new primary); a pooled connection whose node turned
//! read-only is dropped, never reused; the sync standby's loss leaves the primary writing alone
//! (synchronous_mode_strict off). The tests share one cluster: nextest runs them one at a time
//! (test group `postgres-ha`, .config/nextest.toml). Each prints its time to writable.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pmw_core::lock::{fence_sql, holder_sql, WriterLock};
use pmw_core::pg::{self, PgPool};
use pmw_testkit::{eventually, TestDb};
use tokio::sync::Mutex;
use tokio_postgres::error::SqlState;
use tokio_util::sync::CancellationToken;

use super::ha_cluster::{acked_ids, write, write_until_acknowledged, Ha, FAILOVER_WITHIN};

const LOCK_KEY: i64 = 7_944;

async fn setup(ha: &Ha) -> TestDb {
    let db = TestDb::new_on(&ha.env).await;
    db.pg
        .get()
        .await
        .unwrap()
        .batch_execute("CREATE TABLE acked (id bigint PRIMARY KEY)")
        .await
        .unwrap();
    for id in 1..=20 {
        write(&db.pg, id)
            .await
            .expect("acknowledged before the fault");
    }
    db
}

/// The backend pid holding `LOCK_KEY` on the primary now, if any.
async fn lock_holder(pool: &PgPool) -> Option<i32> {
    let c = pool.get().await.ok()?;
    c.query_opt(&holder_sql(LOCK_KEY), &[])
        .await
        .ok()?
        .map(|r| r.get(0))
}

/// Whether a write fenced by writer epoch `epoch` would pass on the primary now.
async fn fence_passes(pool: &PgPool, epoch: i64) -> bool {
    let c = pool.get().await.unwrap();
    c.query_one(&format!("SELECT {}", fence_sql(LOCK_KEY, "$1")), &[&epoch])
        .await
        .unwrap()
        .get(0)
}

/// After a fault: the lock and LISTEN sessions report their loss; new ones open on the new
/// primary, the lock is taken there and notifications flow again; the old holder is fenced.
async fn sessions_follow(db: &TestDb, old_lock: WriterLock, old_listen: pg::Session) {
    let (lock_lost, listen_lost) = (old_lock.lost(), old_listen.lost());
    let both_lost = eventually(FAILOVER_WITHIN, || async {
        lock_lost.is_cancelled() && listen_lost.is_cancelled()
    })
    .await;
    assert!(
        both_lost,
        "the lock and LISTEN sessions must report their loss"
    );
    let stale_epoch = old_lock.epoch();
    let none = CancellationToken::new();
    let mut lock = WriterLock::acquire(
        &db.cfg,
        "ha-lock",
        LOCK_KEY,
        Duration::from_millis(200),
        &none,
    )
    .await
    .expect("the lock is taken again on the new primary")
    .expect("not shut down");
    let epoch = lock.take_epoch("ha-b").await.expect("a new epoch");
    assert!(
        epoch > stale_epoch,
        "the writer epoch is monotonic across the promotion: {stale_epoch} then {epoch}"
    );
    assert_eq!(lock_holder(&db.pg).await, Some(lock.pid()));
    assert!(fence_passes(&db.pg, epoch).await);
    // Whatever pid the new holder got (even the old one's): the old epoch is fenced.
    assert!(
        !fence_passes(&db.pg, stale_epoch).await,
        "the old holder's fenced writes must fail on the new primary"
    );
    let mut listen = pg::listening(&db.cfg, "ha-listen", &["ha_test"])
        .await
        .expect("LISTEN again on the new primary");
    db.pg
        .get()
        .await
        .unwrap()
        .batch_execute("NOTIFY ha_test, 'after'")
        .await
        .unwrap();
    let n = tokio::time::timeout(FAILOVER_WITHIN, listen.notifications.recv())
        .await
        .expect("a notification after the failover")
        .expect("listening");
    assert_eq!(n.payload(), "after");
}

async fn sessions(db: &TestDb) -> (WriterLock, pg::Session) {
    let none = CancellationToken::new();
    let mut lock = WriterLock::acquire(
        &db.cfg,
        "ha-lock",
        LOCK_KEY,
        Duration::from_millis(200),
        &none,
    )
    .await
    .unwrap()
    .unwrap();
    lock.take_epoch("ha-a").await.unwrap();
    let listen = pg::listening(&db.cfg, "ha-listen", &["ha_test"])
        .await
        .unwrap();
    (lock, listen)
}

#[tokio::test]
async fn ha_switchover_is_followed_by_the_pool_and_the_lock_and_listen_sessions() {
    let ha = Ha::up();
    let db = setup(&ha).await;
    let (lock, listen) = sessions(&db).await;
    let old = ha.primary().await;
    let new = 1 - old;
    let t0 = Instant::now();
    ha.switchover(old, new).await;
    let (port, writable) = write_until_acknowledged(&db.pg, 21, t0).await;
    eprintln!(
        "ha: switchover pg{} -> pg{}: writable after {writable:?}",
        old + 1,
        new + 1
    );
    assert_eq!(port, ha.pg_ports[new], "the write went to the new primary");
    assert_eq!(acked_ids(&db.pg).await, (1..=21).collect::<Vec<i64>>());
    sessions_follow(&db, lock, listen).await;
}

/// A PushEpoch bump (push's own statement) in a loop through the pool, recording each
/// acknowledged epoch, until `stop`.
async fn bump_epochs(pool: PgPool, acked: Arc<Mutex<Vec<i64>>>, stop: CancellationToken) {
    let sql = include_str!("../../crates/push/src/sql/bump_epoch.sql");
    while !stop.is_cancelled() {
        let bumped = async {
            let c = pool.get().await.map_err(|e| e.to_string())?;
            c.query_one(sql, &[&0_i16, &"ha-test", &0_i64])
                .await
                .map_err(|e| pg::describe(&e))
        }
        .await;
        match bumped {
            Ok(row) => acked.lock().await.push(row.get(0)),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

#[tokio::test]
async fn ha_primary_killed_writes_resume_on_the_sync_standby_with_every_acknowledged_commit() {
    let ha = Ha::up();
    let db = setup(&ha).await;
    let (lock, listen) = sessions(&db).await;
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = CancellationToken::new();
    let bumper = tokio::spawn(bump_epochs(db.pg.clone(), acked.clone(), stop.clone()));
    assert!(eventually(FAILOVER_WITHIN, || async { acked.lock().await.len() >= 20 }).await);
    let old = ha.primary().await;
    let t0 = Instant::now();
    ha.kill(old);
    let at_kill = acked.lock().await.len();
    let (port, writable) = write_until_acknowledged(&db.pg, 21, t0).await;
    eprintln!(
        "ha: primary pg{} killed: writable after {writable:?}",
        old + 1
    );
    assert_eq!(
        port,
        ha.pg_ports[1 - old],
        "the write went to the promoted standby"
    );
    // Epochs acknowledged after the promotion, then stop.
    assert!(
        eventually(FAILOVER_WITHIN, || async {
            acked.lock().await.len() > at_kill + 5
        })
        .await
    );
    stop.cancel();
    bumper.await.unwrap();
    let epochs = acked.lock().await.clone();
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "every acknowledged epoch is above the one acknowledged before it, across the promotion: {epochs:?}"
    );
    let c = db.pg.get().await.unwrap();
    let stored: i64 = c
        .query_one("SELECT epoch FROM push_epoch WHERE slot = 0", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        Some(&stored),
        epochs.last(),
        "the last acknowledged epoch is the stored one"
    );
    assert_eq!(acked_ids(&db.pg).await, (1..=21).collect::<Vec<i64>>());
    sessions_follow(&db, lock, listen).await;
}

async fn pid_of(c: &pg::PooledClient) -> Result<i32, tokio_postgres::Error> {
    Ok(c.query_one("SELECT pg_backend_pid()", &[]).await?.get(0))
}

#[tokio::test]
async fn ha_a_pooled_connection_whose_node_turned_read_only_is_dropped_not_reused() {
    let ha = Ha::up();
    let db = setup(&ha).await;
    let pool = pg::pool(&db.cfg, "ha-ro").unwrap();
    let first = pool.get().await.unwrap();
    let pid = pid_of(&first).await.unwrap();
    drop(first);
    // The primary fenced read-only (as an operator would), with this pooled connection idle.
    let primary = ha.primary().await;
    let admin = ha.admin(primary).await.unwrap();
    for sql in [
        "SET default_transaction_read_only = off",
        "ALTER SYSTEM SET default_transaction_read_only = on",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(sql).await.unwrap();
    }
    // In effect once a new session sees it: the postmaster has signalled every backend by then.
    let fenced = eventually(FAILOVER_WITHIN, || async {
        let Ok(c) = ha.admin(primary).await else {
            return false;
        };
        c.query_one("SHOW default_transaction_read_only", &[])
            .await
            .map(|r| r.get::<_, String>(0) == "on")
            .unwrap_or(false)
    })
    .await;
    // Nothing below panics before the node is writable again. The pool's one idle connection
    // is handed out; the write is its first statement since the node turned read-only.
    let c = pool.get().await;
    let refused = match &c {
        Ok(c) => Some(c.execute("INSERT INTO acked (id) VALUES (100)", &[]).await),
        Err(_) => None,
    };
    drop(c);
    // Every node refuses writes now: the next get() must not hand out that connection again.
    let next = pool.get().await;
    let reused = match &next {
        Ok(c) => pid_of(c).await.ok() == Some(pid),
        Err(_) => false,
    };
    drop(next);
    for sql in [
        "ALTER SYSTEM RESET default_transaction_read_only",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(sql).await.unwrap();
    }
    assert!(fenced, "the primary never turned read-only");
    let refused = refused.expect("a pooled connection");
    let refused = refused.expect_err("a write on a read-only node fails");
    // Refused by the server (25006), or the session was dropped as soon as the server reported
    // the change (at the statement's Parse) and the write never left.
    assert!(
        refused.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION) || refused.is_closed(),
        "{refused}"
    );
    assert!(
        !reused,
        "the connection that met a read-only node was handed out again"
    );
    let again = eventually(FAILOVER_WITHIN, || write(&pool, 101)).await;
    assert_eq!(again, Ok(ha.pg_ports[primary]));
}

#[tokio::test]
async fn ha_sync_standby_lost_the_primary_writes_alone_then_the_standby_catches_up() {
    let ha = Ha::up();
    let db = setup(&ha).await;
    let primary = ha.primary().await;
    let standby = 1 - primary;
    let t0 = Instant::now();
    ha.kill(standby);
    // Policy (deploy/patroni/patroni.yml, synchronous_mode_strict: false): writes go on.
    let (port, writable) = write_until_acknowledged(&db.pg, 21, t0).await;
    eprintln!(
        "ha: sync standby pg{} lost: writes acknowledged after {writable:?}",
        standby + 1
    );
    assert_eq!(port, ha.pg_ports[primary]);
    // Patroni drops the lost standby from synchronous_standby_names, its cluster view and its
    // metrics in separate steps: each is awaited (bounded), never assumed at once.
    let admin = ha.admin(primary).await.unwrap();
    let names_cleared = eventually(FAILOVER_WITHIN, || async {
        admin
            .query_one("SHOW synchronous_standby_names", &[])
            .await
            .map(|r| r.get::<_, String>(0).is_empty())
            .unwrap_or(false)
    })
    .await;
    assert!(
        names_cleared,
        "Patroni dropped the lost standby from synchronous_standby_names"
    );
    let no_sync = eventually(FAILOVER_WITHIN, || async {
        !ha.roles()
            .await
            .iter()
            .any(|(_, role)| role == "sync_standby")
    })
    .await;
    assert!(no_sync, "no member is a sync standby");
    // What PmwPostgresNoSyncStandby reads: a primary, and no sync standby.
    let metrics = eventually(FAILOVER_WITHIN, || async {
        let primaries = ha.metric_sum("patroni_primary").await;
        let syncs = ha.metric_sum("patroni_sync_standby").await;
        (primaries, syncs) == (1.0, 0.0)
    })
    .await;
    assert!(metrics, "patroni /metrics: one primary, no sync standby");
    for id in 22..=30 {
        write(&db.pg, id)
            .await
            .expect("the primary alone takes writes");
    }
    // The standby returns (scripts/stack up ha), is synchronous again and has every row.
    let ha = Ha::up_again().await;
    let has_all = eventually(FAILOVER_WITHIN, || async {
        let ha_db = format!(
            "postgres://postgres@127.0.0.1:{}/{}",
            ha.pg_ports[standby], db.name
        );
        let Ok((c, conn)) = tokio_postgres::connect(&ha_db, tokio_postgres::NoTls).await else {
            return false;
        };
        tokio::spawn(conn);
        c.query_one("SELECT count(*) FROM acked", &[])
            .await
            .map(|r| r.get::<_, i64>(0) == 30)
            .unwrap_or(false)
    })
    .await;
    assert!(
        has_all,
        "the returned standby has every row written while it was away"
    );
}

/// The port of the server behind `c`.
async fn server_port(c: &tokio_postgres::Client) -> Result<u16, String> {
    c.query_one("SELECT inet_server_port()", &[])
        .await
        .map(|r| r.get::<_, i32>(0) as u16)
        .map_err(|e| pg::describe(&e))
}

/// A primary whose Patroni stopped: its leader key runs out and the standby is promoted, while
/// the old Postgres runs on read-write (nothing demotes it), first in the URL, so read-write
/// alone still picks it and a session there reads what stopped at the fault (a thawed or healed
/// primary is the same until its Patroni demotes it). With Patroni's REST APIs set, sessions go
/// to the member Patroni names, and the one opened on the old primary before is ended.
#[tokio::test]
async fn ha_a_read_write_node_patroni_no_longer_names_is_left_for_the_promoted_one() {
    let ha = Ha::up();
    let db = setup(&ha).await;
    let old = ha.primary().await;
    let new = 1 - old;
    let named = ha.first_in_url(&db, old, true);
    let plain = ha.first_in_url(&db, old, false);
    let before = pg::dedicated(&named, "ha-before").await.expect("a session");
    assert_eq!(server_port(&before.client).await, Ok(ha.pg_ports[old]));
    let stopped = ha.stop_patroni(old);
    let t0 = Instant::now();
    let promoted = eventually(FAILOVER_WITHIN, || ha.writable(new)).await;
    assert!(
        promoted,
        "pg{} promoted once pg{}'s leader key ran out",
        new + 1,
        old + 1
    );
    // The fault itself: the old node still takes read-write sessions.
    let stale = pg::dedicated(&plain, "ha-plain").await.expect("a session");
    assert_eq!(
        server_port(&stale.client).await,
        Ok(ha.pg_ports[old]),
        "read-write alone picks the old primary (nothing demoted it)"
    );
    let pool = pg::pool(&named, "ha-named").unwrap();
    let (port, writable) = write_until_acknowledged(&pool, 21, t0).await;
    eprintln!(
        "ha: pg{}'s patroni stopped: writable after {writable:?}",
        old + 1
    );
    assert_eq!(
        port, ha.pg_ports[new],
        "the pool went to the member Patroni names"
    );
    let after = pg::dedicated(&named, "ha-after").await.expect("a session");
    assert_eq!(server_port(&after.client).await, Ok(ha.pg_ports[new]));
    let ended = eventually(FAILOVER_WITHIN, || async { before.is_lost() }).await;
    assert!(
        ended,
        "the session opened on the old primary is ended once Patroni stops naming it"
    );
    drop(stopped);
    // The next tests need the stack whole: the old member is restarted (as after a primary
    // kill), not left to rewind itself from the thaw, which once took longer than
    // `scripts/stack up ha` waits (the multi-host checker measures that rejoin).
    ha.kill(old);
    let _ = Ha::up_again().await;
    assert_eq!(acked_ids(&pool).await, (1..=21).collect::<Vec<i64>>());
}

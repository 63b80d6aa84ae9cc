//! The pooled client against the real Postgres: which idle connection a statement is given.

use pmw_testkit::TestDb;

async fn backend(c: &deadpool_postgres::Object) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// The connection returned last is the next one handed out (LIFO): the hot statements of a
/// service run on a backend that has them planned and its catalog cached, instead of on each of
/// the pool's backends in turn (each planning a statement anew for its first five runs).
#[tokio::test]
async fn the_pool_hands_out_the_connection_returned_last() {
    let db = TestDb::new().await;
    let (a, b) = (db.pg.get().await.unwrap(), db.pg.get().await.unwrap());
    let (pid_a, pid_b) = (backend(&a).await, backend(&b).await);
    assert_ne!(pid_a, pid_b, "two connections at once are two backends");
    drop(a);
    drop(b);
    for _ in 0..3 {
        let c = db.pg.get().await.unwrap();
        assert_eq!(backend(&c).await, pid_b, "the connection returned last");
    }
    // Two at once again: the second is the one idle longest.
    let (c, d) = (db.pg.get().await.unwrap(), db.pg.get().await.unwrap());
    assert_eq!((backend(&c).await, backend(&d).await), (pid_b, pid_a));
}

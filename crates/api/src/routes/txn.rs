//! What the routes' Postgres work shares: the pooled client type, and the two steps every
//! change takes inside its transaction (lock the account, wake the push leader).

use pmw_core::pg::PooledClient;

/// Wake the push leader: subscriptions or endpoints changed (call inside the changing
/// transaction, so the notification is delivered exactly when the change commits).
pub async fn notify_changes(
    tx: &tokio_postgres::Transaction<'_>,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        include_str!("sql/notify_changes.sql"),
        &[&pmw_core::channels::SUBSCRIPTIONS],
    )
    .await
    .map(drop)
}

/// Lock the account row for the rest of the transaction: plan-limit checks and the insert
/// they guard are serialised per account.
pub async fn lock_account(
    tx: &tokio_postgres::Transaction<'_>,
    account_id: i64,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(include_str!("sql/lock_account.sql"), &[&account_id])
        .await
        .map(drop)
}

/// A pooled client (typed alias for handlers).
pub type Client = PooledClient;

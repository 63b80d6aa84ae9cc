//! The `subscriptions` table as the subscription routes read and write it (single and bulk
//! alike): one row shape, one INSERT, one DELETE. Statements are in `sql/`.

use std::collections::HashMap;

use pmw_core::filter::Filter;
use pmw_core::Address;
use tokio_postgres::{GenericClient, Row};

use super::model::Subscription;

/// A row read as `wallet, label, created_ms, filter::text` (every statement here returns that).
pub fn from_row(r: &Row) -> Subscription {
    Subscription {
        wallet: format!("0x{}", hex::encode(r.get::<_, &[u8]>(0))),
        label: r.get(1),
        created_ms: r.get(2),
        filter: crate::routes::filters::shown(r.get(3)),
    }
}

/// The account's subscriptions, oldest first.
pub async fn list(c: &impl GenericClient, account: i64) -> Result<Vec<Row>, tokio_postgres::Error> {
    c.query(include_str!("sql/list.sql"), &[&account]).await
}

/// The account's subscription of `wallet`, if it follows it.
pub async fn one(
    c: &impl GenericClient,
    account: i64,
    wallet: &Address,
) -> Result<Option<Row>, tokio_postgres::Error> {
    c.query_opt(
        include_str!("sql/one.sql"),
        &[&account, &wallet.as_bytes().as_slice()],
    )
    .await
}

/// How many wallets the account follows.
pub async fn count(c: &impl GenericClient, account: i64) -> Result<i64, tokio_postgres::Error> {
    Ok(c.query_one(include_str!("sql/count.sql"), &[&account])
        .await?
        .get(0))
}

/// The account's subscriptions by wallet (the raw 20 bytes).
pub async fn by_wallet(
    c: &impl GenericClient,
    account: i64,
) -> Result<HashMap<Vec<u8>, Row>, tokio_postgres::Error> {
    Ok(c.query(include_str!("sql/all.sql"), &[&account])
        .await?
        .into_iter()
        .map(|r| (r.get::<_, Vec<u8>>(0), r))
        .collect())
}

/// Follow `wallet` (the caller checked it is not followed yet and the label rule).
pub async fn insert(
    c: &impl GenericClient,
    account: i64,
    wallet: &Address,
    label: &str,
    created_ms: i64,
    filter: Option<&Filter>,
) -> Result<(), tokio_postgres::Error> {
    let stored = crate::routes::filters::stored(filter);
    c.execute(
        include_str!("sql/insert.sql"),
        &[
            &account,
            &wallet.as_bytes().as_slice(),
            &label,
            &created_ms,
            &stored,
        ],
    )
    .await
    .map(drop)
}

/// Change a subscription's label (`None`: unchanged) and, when `filter` is `Some`, its stored
/// filter; the row as it is now, or `None` when the wallet is not followed.
pub async fn update(
    c: &impl GenericClient,
    account: i64,
    wallet: &Address,
    label: Option<&str>,
    filter: Option<Option<&str>>,
) -> Result<Option<Row>, tokio_postgres::Error> {
    c.query_opt(
        include_str!("sql/update.sql"),
        &[
            &account,
            &wallet.as_bytes().as_slice(),
            &label,
            &filter.is_some(),
            &filter.flatten(),
        ],
    )
    .await
}

/// Stop following `wallets`; how many were followed.
pub async fn remove(
    c: &impl GenericClient,
    account: i64,
    wallets: &[&Address],
) -> Result<u64, tokio_postgres::Error> {
    let gone: Vec<&[u8]> = wallets.iter().map(|a| a.as_bytes().as_slice()).collect();
    c.execute(include_str!("sql/remove.sql"), &[&account, &gone])
        .await
}

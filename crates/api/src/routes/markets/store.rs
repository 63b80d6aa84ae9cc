//! The `market_subscriptions` table (migration 0019) as the market routes read and write it.
//! Statements are in `sql/`.

use std::collections::HashMap;

use pmw_core::filter::Filter;
use tokio_postgres::{GenericClient, Row};

use super::resolve::{MarketRef, Resolved};
use super::MarketSubscription;

/// A row as every statement here returns it.
pub fn from_row(r: &Row) -> MarketSubscription {
    MarketSubscription {
        kind: r.get(0),
        market: r.get(1),
        label: r.get(2),
        conditions: r.get(3),
        tokens: r.get(4),
        filter: crate::routes::filters::shown(r.get(5)),
        created_ms: r.get(6),
        updated_ms: r.get(7),
    }
}

pub async fn list(c: &impl GenericClient, account: i64) -> Result<Vec<Row>, tokio_postgres::Error> {
    c.query(include_str!("sql/list.sql"), &[&account]).await
}

pub async fn one(
    c: &impl GenericClient,
    account: i64,
    m: &MarketRef,
) -> Result<Option<Row>, tokio_postgres::Error> {
    c.query_opt(
        include_str!("sql/one.sql"),
        &[&account, &m.kind(), &m.name()],
    )
    .await
}

/// The distinct condition ids the account follows through its other market subscriptions.
pub async fn other_conditions(
    c: &impl GenericClient,
    account: i64,
    m: &MarketRef,
) -> Result<Vec<String>, tokio_postgres::Error> {
    Ok(c.query_one(
        include_str!("sql/other_conditions.sql"),
        &[&account, &m.kind(), &m.name()],
    )
    .await?
    .get(0))
}

/// What a subscription row is written with.
pub struct Write<'a> {
    pub label: &'a str,
    pub resolved: &'a Resolved,
    /// The canonical filter text (NULL: none).
    pub filter: Option<&'a str>,
    pub now_ms: i64,
}

pub async fn upsert(
    c: &impl GenericClient,
    account: i64,
    m: &MarketRef,
    w: Write<'_>,
) -> Result<Row, tokio_postgres::Error> {
    let conditions: Vec<&String> = w.resolved.conditions.iter().collect();
    let tokens: Vec<&String> = w.resolved.tokens.iter().collect();
    c.query_one(
        include_str!("sql/upsert.sql"),
        &[
            &account,
            &m.kind(),
            &m.name(),
            &w.label,
            &conditions,
            &tokens,
            &w.filter,
            &w.now_ms,
        ],
    )
    .await
}

pub async fn remove(
    c: &impl GenericClient,
    account: i64,
    m: &MarketRef,
) -> Result<u64, tokio_postgres::Error> {
    c.execute(
        include_str!("sql/remove.sql"),
        &[&account, &m.kind(), &m.name()],
    )
    .await
}

/// The account's followed markets as push matches them: token id → the filters of the
/// subscriptions naming it ([`Filter::default`] for none; a fill passes when any does).
pub async fn filters_of(
    c: &impl GenericClient,
    account: i64,
) -> Result<HashMap<String, Vec<Filter>>, tokio_postgres::Error> {
    let mut out: HashMap<String, Vec<Filter>> = HashMap::new();
    for r in c
        .query(include_str!("sql/filters.sql"), &[&account])
        .await?
    {
        let f = r
            .get::<_, Option<&str>>(1)
            .and_then(Filter::from_stored)
            .unwrap_or_default();
        for t in r.get::<_, Vec<String>>(0) {
            out.entry(t).or_default().push(f.clone());
        }
    }
    Ok(out)
}

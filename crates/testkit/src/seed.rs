//! Rows a test writes straight into its database (no API in between): an account, a webhook
//! endpoint.

use tokio_postgres::Client;

/// A new account `name` on `plan`; its id.
pub async fn account(c: &Client, name: &str, plan: &str) -> i64 {
    c.query_one(
        "INSERT INTO accounts (name, plan, created_ms) VALUES ($1, $2, 0) RETURNING id",
        &[&name, &plan],
    )
    .await
    .expect("insert an account")
    .get(0)
}

/// A new enabled webhook endpoint of `account` at `url` signing with `secret` (trades only);
/// its id.
pub async fn endpoint(c: &Client, account: i64, url: &str, secret: &str) -> i64 {
    endpoint_for(c, account, (url, secret), &["trade"]).await
}

/// A new enabled webhook endpoint of `account` at `url` with `secret`, receiving `events`
/// (`trade`, `final`); its id.
pub async fn endpoint_for(
    c: &Client,
    account: i64,
    (url, secret): (&str, &str),
    events: &[&str],
) -> i64 {
    c.query_one(
        "INSERT INTO webhook_endpoints (account_id, url, secret, events, created_ms, updated_ms) \
         VALUES ($1, $2, $3, $4, 0, 0) RETURNING id",
        &[&account, &url, &secret, &events],
    )
    .await
    .expect("insert a webhook endpoint")
    .get(0)
}

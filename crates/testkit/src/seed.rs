//! Rows a test writes straight into its database (no API in between): an account, a webhook
//! endpoint ([`Endpoint`]).

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

/// A webhook endpoint row, written straight to Postgres: the one way tests seed an endpoint.
/// [`Endpoint::new`] is an enabled endpoint receiving trades, created at 0; set what differs.
#[derive(Debug, Clone)]
pub struct Endpoint<'a> {
    pub account: i64,
    pub url: &'a str,
    pub secret: &'a str,
    /// What it receives (`trade`, `final`).
    pub events: &'a [&'a str],
    pub enabled: bool,
    /// A rotated-out secret still signed with, and until when (ms).
    pub previous_secret: Option<&'a str>,
    pub previous_expires_ms: Option<i64>,
    /// Its `created_ms` and `updated_ms`.
    pub created_ms: i64,
}

impl<'a> Endpoint<'a> {
    /// An enabled endpoint of `account` at `url` signing with `secret`, receiving trades,
    /// created at 0.
    pub fn new(account: i64, url: &'a str, secret: &'a str) -> Self {
        Endpoint {
            account,
            url,
            secret,
            events: &["trade"],
            enabled: true,
            previous_secret: None,
            previous_expires_ms: None,
            created_ms: 0,
        }
    }

    /// The same endpoint receiving `events`.
    pub fn events(self, events: &'a [&'a str]) -> Self {
        Endpoint { events, ..self }
    }

    /// The same endpoint created (and last updated) at `ms`.
    pub fn created(self, ms: i64) -> Self {
        Endpoint {
            created_ms: ms,
            ..self
        }
    }

    /// Insert it; its id.
    pub async fn try_insert(&self, c: &Client) -> Result<i64, tokio_postgres::Error> {
        let row = c
            .query_one(
                "INSERT INTO webhook_endpoints (account_id, url, secret, events, enabled, \
                 previous_secret, previous_expires_ms, created_ms, updated_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING id",
                &[
                    &self.account,
                    &self.url,
                    &self.secret,
                    &self.events,
                    &self.enabled,
                    &self.previous_secret,
                    &self.previous_expires_ms,
                    &self.created_ms,
                ],
            )
            .await?;
        Ok(row.get(0))
    }

    /// Insert it; its id. Panics when Postgres refuses it.
    pub async fn insert(&self, c: &Client) -> i64 {
        self.try_insert(c).await.expect("insert a webhook endpoint")
    }
}

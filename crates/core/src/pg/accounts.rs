//! Accounts and API keys in Postgres, shared by the API and `pmwctl account|key`. Keys are
//! random (`pmw_` + 64 hex), returned once by [`create_key`], stored as SHA-256 and shown by
//! their 12-character prefix.

use crate::auth::{self, KEY_PREFIX};
use crate::UnixMs;
use serde::Serialize;
use tokio_postgres::GenericClient;

/// Most active keys one account may hold.
pub const MAX_KEYS_PER_ACCOUNT: i64 = 20;
/// Longest label of a key or subscription, in characters.
pub const MAX_LABEL_CHARS: usize = 200;

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("postgres: {0}")]
    Db(#[from] tokio_postgres::Error),
    #[error("no such account: {0}")]
    NoAccount(i64),
    #[error("no active key with prefix {0:?}")]
    NoKey(String),
    #[error("{0}")]
    Invalid(String),
}

/// One account.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Account {
    pub id: i64,
    pub name: String,
    pub email: Option<String>,
    pub plan: String,
    pub created_ms: i64,
    pub disabled_ms: Option<i64>,
}

impl Account {
    /// From a row whose first six columns are `id, name, email, plan, created_ms, disabled_ms`.
    pub fn from_row(r: &tokio_postgres::Row) -> Account {
        Account {
            id: r.get(0),
            name: r.get(1),
            email: r.get(2),
            plan: r.get(3),
            created_ms: r.get(4),
            disabled_ms: r.get(5),
        }
    }
}

/// One API key as shown after creation: never the key itself.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyInfo {
    #[cfg_attr(feature = "openapi", schema(example = "pmw_1a2b3c4d"))]
    pub prefix: String,
    pub label: String,
    pub created_ms: i64,
    pub revoked_ms: Option<i64>,
}

/// A key just created: the only time `key` is ever shown (its `Debug` never shows it).
#[derive(Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewKey {
    /// Absent from an `Idempotency-Key` replay of the creation (never stored).
    #[cfg_attr(feature = "openapi", schema(required = false))]
    pub key: String,
    pub prefix: String,
    pub label: String,
    pub account_id: i64,
    pub created_ms: i64,
}

impl std::fmt::Debug for NewKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewKey")
            .field("key", &crate::redact::HIDDEN)
            .field("prefix", &self.prefix)
            .field("label", &self.label)
            .field("account_id", &self.account_id)
            .field("created_ms", &self.created_ms)
            .finish()
    }
}

fn check_label(label: &str) -> Result<(), AccountError> {
    if label.chars().count() > MAX_LABEL_CHARS || label.chars().any(char::is_control) {
        return Err(AccountError::Invalid(format!(
            "label must be at most {MAX_LABEL_CHARS} characters without control characters"
        )));
    }
    Ok(())
}

/// Create an account on `plan` (the caller checks the plan exists).
pub async fn create_account(
    c: &impl GenericClient,
    name: &str,
    email: Option<&str>,
    plan: &str,
) -> Result<Account, AccountError> {
    if name.trim().is_empty() || name.chars().count() > MAX_LABEL_CHARS {
        return Err(AccountError::Invalid(format!(
            "name must be 1 to {MAX_LABEL_CHARS} characters"
        )));
    }
    if email.is_some_and(|e| !e.contains('@') || e.len() > 320) {
        return Err(AccountError::Invalid("email is not an address".into()));
    }
    let now = UnixMs::now().0;
    let row = c
        .query_one(
            "INSERT INTO accounts (name, email, plan, created_ms) VALUES ($1, $2, $3, $4) RETURNING id",
            &[&name, &email, &plan, &now],
        )
        .await?;
    Ok(Account {
        id: row.get(0),
        name: name.into(),
        email: email.map(Into::into),
        plan: plan.into(),
        created_ms: now,
        disabled_ms: None,
    })
}

/// Every account, oldest first.
pub async fn list_accounts(c: &impl GenericClient) -> Result<Vec<Account>, AccountError> {
    let rows = c
        .query(
            "SELECT id, name, email, plan, created_ms, disabled_ms FROM accounts ORDER BY id",
            &[],
        )
        .await?;
    Ok(rows.iter().map(Account::from_row).collect())
}

/// Create a key for `account_id` (retrying the rare prefix collision). At most
/// [`MAX_KEYS_PER_ACCOUNT`] active keys per account, enforced atomically: the count and the
/// insert run in one transaction holding the account row's lock, so parallel creations cannot
/// exceed it.
pub async fn create_key(
    c: &mut impl GenericClient,
    account_id: i64,
    label: &str,
) -> Result<NewKey, AccountError> {
    check_label(label)?;
    let tx = c.transaction().await?;
    tx.query_opt(include_str!("sql/lock_account_keys.sql"), &[&account_id])
        .await?
        .ok_or(AccountError::NoAccount(account_id))?;
    let active: i64 = tx
        .query_one(include_str!("sql/active_keys.sql"), &[&account_id])
        .await?
        .get(0);
    if active >= MAX_KEYS_PER_ACCOUNT {
        return Err(AccountError::Invalid(format!(
            "an account holds at most {MAX_KEYS_PER_ACCOUNT} active keys; revoke one first"
        )));
    }
    let now = UnixMs::now().0;
    for _ in 0..5 {
        let (key, prefix) = auth::generate(KEY_PREFIX);
        let hash = auth::hash_secret(&key);
        let inserted = tx
            .execute(
                include_str!("sql/insert_key.sql"),
                &[&account_id, &prefix, &hash.as_slice(), &label, &now],
            )
            .await?;
        if inserted == 1 {
            tx.commit().await?;
            return Ok(NewKey {
                key,
                prefix,
                label: label.into(),
                account_id,
                created_ms: now,
            });
        }
    }
    Err(AccountError::Invalid(
        "could not generate a unique key prefix; try again".into(),
    ))
}

/// Revoke the active key with `prefix`, if `account_id` is given only when it is that
/// account's. Returns the revoked key's account.
pub async fn revoke_key(
    c: &impl GenericClient,
    prefix: &str,
    account_id: Option<i64>,
) -> Result<i64, AccountError> {
    let row = c
        .query_opt(
            include_str!("sql/revoke_key.sql"),
            &[&prefix, &UnixMs::now().0, &account_id],
        )
        .await?;
    let account: i64 = row
        .map(|r| r.get(0))
        .ok_or_else(|| AccountError::NoKey(prefix.into()))?;
    // Its outstanding tickets die with it; open sessions are closed by push, woken now.
    c.execute(
        "DELETE FROM ws_tickets WHERE key_id = (SELECT id FROM api_keys WHERE prefix = $1)",
        &[&prefix],
    )
    .await?;
    c.execute(
        "SELECT pg_notify($1, '')",
        &[&crate::channels::SUBSCRIPTIONS],
    )
    .await?;
    Ok(account)
}

/// The keys of one account, newest first.
pub async fn list_keys(
    c: &impl GenericClient,
    account_id: i64,
) -> Result<Vec<KeyInfo>, AccountError> {
    let rows = c
        .query(include_str!("sql/list_keys.sql"), &[&account_id])
        .await?;
    Ok(rows
        .iter()
        .map(|r| KeyInfo {
            prefix: r.get(0),
            label: r.get(1),
            created_ms: r.get(2),
            revoked_ms: r.get(3),
        })
        .collect())
}

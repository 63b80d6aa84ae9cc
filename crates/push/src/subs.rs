//! The in-memory subscription index: wallet → accounts following it, account → enabled webhook
//! endpoints, with the `subs_version` it was read at. Every round compares that version with
//! the one it reads beside the watermark and reloads when they differ, so a lost NOTIFY never
//! leaves the index stale (it once stayed stale for as long as blocks kept arriving).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use pmw_core::message::Events;
use pmw_core::pg::{PgError, PgPool};
use tokio::sync::RwLock;

/// Channel the API notifies when subscriptions or endpoints change (a wake-up only: the
/// version in `subs_version` is what makes a round reload).

#[derive(Debug, Default)]
pub struct Index {
    /// `subs_version.seq` in the snapshot these maps were read in.
    pub version: i64,
    /// Lowercase `0x…` wallet → accounts.
    pub accounts_by_wallet: HashMap<String, Vec<i64>>,
    /// Account → wallets (enabled accounts only).
    pub wallets_by_account: HashMap<i64, Vec<String>>,
    /// Account → enabled webhook endpoint ids.
    pub endpoints_by_account: HashMap<i64, Vec<i64>>,
    /// Endpoint → the events it receives (absent: `trade` only).
    pub events_by_endpoint: HashMap<i64, Events>,
    /// API keys that may hold a session: not revoked, account enabled.
    pub live_keys: HashSet<i64>,
}

impl Index {
    /// The events endpoint `id` receives.
    pub fn events_of(&self, endpoint: i64) -> Events {
        self.events_by_endpoint
            .get(&endpoint)
            .copied()
            .unwrap_or_default()
    }
}

/// Shared, swappable index.
#[derive(Clone, Default)]
pub struct Subscriptions {
    inner: Arc<RwLock<Arc<Index>>>,
}

impl Subscriptions {
    pub async fn current(&self) -> Arc<Index> {
        self.inner.read().await.clone()
    }

    /// Reload from Postgres: the version and both maps in one snapshot (REPEATABLE READ), so
    /// the index is exactly the state at `version`.
    pub async fn reload(&self, pool: &PgPool) -> Result<Arc<Index>, PgError> {
        let mut client = pool.get().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let mut idx = Index {
            version: tx
                .query_one("SELECT seq FROM subs_version WHERE id = 1", &[])
                .await?
                .get(0),
            ..Index::default()
        };
        for r in tx
            .query("SELECT s.account_id, s.wallet FROM subscriptions s JOIN accounts a ON a.id = s.account_id WHERE a.disabled_ms IS NULL", &[])
            .await?
        {
            let account: i64 = r.get(0);
            let wallet = format!("0x{}", hex::encode(r.get::<_, &[u8]>(1)));
            idx.accounts_by_wallet.entry(wallet.clone()).or_default().push(account);
            idx.wallets_by_account.entry(account).or_default().push(wallet);
        }
        // Sorted, as a session's own wallets are, so an unchanged set compares equal.
        for w in idx.wallets_by_account.values_mut() {
            w.sort();
        }
        for r in tx
            .query("SELECT e.account_id, e.id, e.events FROM webhook_endpoints e JOIN accounts a ON a.id = e.account_id WHERE e.enabled AND a.disabled_ms IS NULL", &[])
            .await?
        {
            let id: i64 = r.get(1);
            idx.endpoints_by_account.entry(r.get(0)).or_default().push(id);
            let names: Vec<String> = r.get(2);
            // The column's CHECK allows only valid lists; a bad one would fall back to trades.
            idx.events_by_endpoint
                .insert(id, Events::from_names(&names).unwrap_or_default());
        }
        idx.live_keys = tx
            .query("SELECT k.id FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.revoked_ms IS NULL AND a.disabled_ms IS NULL", &[])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        tx.commit().await?;
        let idx = Arc::new(idx);
        tracing::info!(
            version = idx.version,
            wallets = idx.accounts_by_wallet.len(),
            accounts = idx.wallets_by_account.len(),
            endpoints = idx
                .endpoints_by_account
                .values()
                .map(Vec::len)
                .sum::<usize>(),
            "subscriptions loaded"
        );
        *self.inner.write().await = idx.clone();
        Ok(idx)
    }
}

/// What a WebSocket session starts with, straight from Postgres in one statement (one
/// snapshot): the account's followed wallets with the `subs_version` they were read at (fresher
/// than any index a round may still use), and its plan's session limit (`None`: no plans
/// published yet, no limit).
#[derive(Debug, Clone)]
pub struct Grant {
    pub version: i64,
    pub wallets: Vec<String>,
    pub max_sessions: Option<u32>,
}

pub async fn grant(pool: &PgPool, account_id: i64) -> Result<Grant, PgError> {
    let client = pool.get().await?;
    let row = client
        .query_one(include_str!("sql/session_grant.sql"), &[&account_id])
        .await?;
    let wallets: Vec<Vec<u8>> = row.get(1);
    Ok(Grant {
        version: row.get(0),
        wallets: wallets
            .iter()
            .map(|w| format!("0x{}", hex::encode(w)))
            .collect(),
        max_sessions: row.get::<_, Option<i32>>(2).map(|n| n.max(0) as u32),
    })
}

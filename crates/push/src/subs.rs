//! The in-memory subscription index: wallet → accounts following it, account → enabled webhook
//! endpoints. Reloaded whole (it is small) on a change notification from the API and periodically.

use std::collections::HashMap;
use std::sync::Arc;

use pmw_core::pg::PgPool;
use tokio::sync::RwLock;

/// Channel the API notifies when subscriptions or endpoints change.
pub const CHANGES_CHANNEL: &str = "pmw_subscriptions";

#[derive(Debug, Default)]
pub struct Index {
    /// Lowercase `0x…` wallet → accounts.
    pub accounts_by_wallet: HashMap<String, Vec<i64>>,
    /// Account → wallets (for resume replays).
    pub wallets_by_account: HashMap<i64, Vec<String>>,
    /// Account → enabled webhook endpoint ids.
    pub endpoints_by_account: HashMap<i64, Vec<i64>>,
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

    /// Reload from Postgres.
    pub async fn reload(&self, pool: &PgPool) -> Result<(usize, usize), pmw_core::pg::PgError> {
        let client = pool.get().await?;
        let mut idx = Index::default();
        for r in client
            .query("SELECT s.account_id, s.wallet FROM subscriptions s JOIN accounts a ON a.id = s.account_id WHERE a.disabled_ms IS NULL", &[])
            .await?
        {
            let account: i64 = r.get(0);
            let wallet = format!("0x{}", hex::encode(r.get::<_, &[u8]>(1)));
            idx.accounts_by_wallet.entry(wallet.clone()).or_default().push(account);
            idx.wallets_by_account.entry(account).or_default().push(wallet);
        }
        for r in client
            .query("SELECT e.account_id, e.id FROM webhook_endpoints e JOIN accounts a ON a.id = e.account_id WHERE e.enabled AND a.disabled_ms IS NULL", &[])
            .await?
        {
            idx.endpoints_by_account.entry(r.get(0)).or_default().push(r.get(1));
        }
        let counts = (
            idx.accounts_by_wallet.len(),
            idx.endpoints_by_account.values().map(Vec::len).sum(),
        );
        *self.inner.write().await = Arc::new(idx);
        Ok(counts)
    }
}

//! The in-memory subscription index: wallet → accounts following it, account → enabled webhook
//! endpoints, with the `subs_version` it was read at. Every round compares that version with
//! the one it reads beside the watermark and reloads when they differ, so a lost NOTIFY never
//! leaves the index stale (it once stayed stale for as long as blocks kept arriving).
//!
//! It also holds the filters (`pmw_core::filter`) of subscriptions and endpoints: a round
//! decides with them who gets each message ([`Index::endpoints_for`], the hub's sessions).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use pmw_core::filter::{self, Facts, Filter};
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
    /// Account → the filters of its followed wallets (only wallets that have one).
    pub filters_by_account: HashMap<i64, Filters>,
    /// Endpoint → its filter (only endpoints that have one).
    pub endpoint_filters: HashMap<i64, Filter>,
}

/// Wallet (lowercase `0x…`) → the filter of its subscription; a wallet not listed has none.
pub type Filters = HashMap<String, Filter>;

/// Whether a message about `wallet` with `facts` passes the subscription filter in `filters`.
pub fn wants(filters: &Filters, wallet: &str, facts: &Facts) -> bool {
    filter::passes(filters.get(wallet), facts)
}

impl Index {
    /// Every endpoint in the index, in id order.
    pub fn all_endpoints(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self
            .endpoints_by_account
            .values()
            .flatten()
            .copied()
            .collect();
        v.sort_unstable();
        v
    }

    /// The enabled endpoints of `accounts` (followers of `wallet`) that get a message: for a
    /// trade (`facts` given), those whose account's subscription filter of `wallet` and whose
    /// own filter both let it through; without `facts` (a retract), every one, since a retract
    /// is queued only behind the endpoint's delivery of its trade (the enqueue statement).
    pub fn endpoints_for(&self, accounts: &[i64], wallet: &str, facts: Option<&Facts>) -> Vec<i64> {
        let none = Filters::new();
        let mut out = Vec::new();
        for a in accounts {
            let Some(eps) = self.endpoints_by_account.get(a) else {
                continue;
            };
            if let Some(f) = facts {
                if !wants(self.filters_by_account.get(a).unwrap_or(&none), wallet, f) {
                    continue;
                }
            }
            out.extend(
                eps.iter().copied().filter(|e| {
                    facts.is_none_or(|f| filter::passes(self.endpoint_filters.get(e), f))
                }),
            );
        }
        out
    }
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
            .query("SELECT s.account_id, s.wallet, s.filter::text FROM subscriptions s JOIN accounts a ON a.id = s.account_id WHERE a.disabled_ms IS NULL", &[])
            .await?
        {
            let account: i64 = r.get(0);
            let wallet = format!("0x{}", hex::encode(r.get::<_, &[u8]>(1)));
            if let Some(f) = r.get::<_, Option<&str>>(2).and_then(Filter::from_stored) {
                idx.filters_by_account.entry(account).or_default().insert(wallet.clone(), f);
            }
            idx.accounts_by_wallet.entry(wallet.clone()).or_default().push(account);
            idx.wallets_by_account.entry(account).or_default().push(wallet);
        }
        // Sorted, as a session's own wallets are, so an unchanged set compares equal.
        for w in idx.wallets_by_account.values_mut() {
            w.sort();
        }
        for r in tx
            .query("SELECT e.account_id, e.id, e.filter::text, e.events FROM webhook_endpoints e JOIN accounts a ON a.id = e.account_id WHERE e.enabled AND a.disabled_ms IS NULL", &[])
            .await?
        {
            let id: i64 = r.get(1);
            idx.endpoints_by_account.entry(r.get(0)).or_default().push(id);
            if let Some(f) = r.get::<_, Option<&str>>(2).and_then(Filter::from_stored) {
                idx.endpoint_filters.insert(id, f);
            }
            let names: Vec<String> = r.get(3);
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
    /// The filters of those wallets that have one.
    pub filters: Filters,
    pub max_sessions: Option<u32>,
    /// The key is live at `version` (not revoked, its account not disabled).
    pub key_live: bool,
}

pub async fn grant(pool: &PgPool, account_id: i64, key_id: i64) -> Result<Grant, PgError> {
    let client = pool.get().await?;
    let row = client
        .query_one(
            include_str!("sql/session_grant.sql"),
            &[&account_id, &key_id],
        )
        .await?;
    let wallets: Vec<String> = row
        .get::<_, Vec<Vec<u8>>>(1)
        .iter()
        .map(|w| format!("0x{}", hex::encode(w)))
        .collect();
    let stored: Vec<Option<String>> = row.get(3);
    let filters = wallets
        .iter()
        .zip(&stored)
        .filter_map(|(w, f)| Some((w.clone(), Filter::from_stored(f.as_deref()?)?)))
        .collect();
    Ok(Grant {
        version: row.get(0),
        wallets,
        filters,
        max_sessions: row.get::<_, Option<i32>>(2).map(|n| n.max(0) as u32),
        key_live: row.get(4),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use pmw_core::filter::{Facts, Filter, Side};

    use super::*;

    fn facts(side: Side, shares: u128) -> Facts {
        Facts {
            side,
            shares,
            collateral: 1,
            token_id: "1".into(),
            condition_id: None,
        }
    }

    /// A filter that lets only buys through.
    pub(crate) fn buys() -> Filter {
        Filter {
            side: Some(Side::Buy),
            ..Filter::default()
        }
    }

    #[test]
    fn webhook_trades_pass_both_filters_and_retracts_go_to_every_follower_endpoint() {
        let mut idx = Index::default();
        idx.endpoints_by_account.insert(1, vec![10, 11]);
        idx.endpoints_by_account.insert(2, vec![20]);
        idx.filters_by_account
            .insert(2, [("0xa".to_string(), buys())].into());
        idx.endpoint_filters.insert(
            11,
            Filter {
                min_shares: Some(5),
                ..Filter::default()
            },
        );
        let small_sell = facts(Side::Sell, 1);
        let big_buy = facts(Side::Buy, 5);
        assert_eq!(
            idx.endpoints_for(&[1, 2], "0xa", Some(&small_sell)),
            vec![10]
        );
        assert_eq!(
            idx.endpoints_for(&[1, 2], "0xa", Some(&big_buy)),
            vec![10, 11, 20]
        );
        // The subscription filter is the wallet's: another wallet of account 2 is unfiltered.
        assert_eq!(idx.endpoints_for(&[2], "0xb", Some(&small_sell)), vec![20]);
        // A retract is offered to every endpoint (the enqueue keeps those that got the trade).
        assert_eq!(idx.endpoints_for(&[1, 2], "0xa", None), vec![10, 11, 20]);
    }
}

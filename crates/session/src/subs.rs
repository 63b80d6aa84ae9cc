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
    /// Outcome token id (decimal) → accounts following its market (each once).
    pub accounts_by_token: HashMap<String, Vec<i64>>,
    /// Account → its followed markets' tokens and their filters.
    pub markets_by_account: HashMap<i64, MarketFilters>,
}

/// Outcome token id → the filters of the market subscriptions naming it (one per subscription;
/// [`Filter::default`] lets everything through): a fill passes when any of them does.
pub type MarketFilters = HashMap<String, Vec<Filter>>;

/// Whether a fill with `facts` reaches a follower of its market through `markets`.
pub fn market_wants(markets: &MarketFilters, facts: &Facts) -> bool {
    markets
        .get(&facts.token_id)
        .is_some_and(|fs| fs.iter().any(|f| f.matches(facts)))
}

/// What a subscriber follows: wallets (sorted) with their filters, and markets' tokens with
/// theirs. A fill reaches it once if either lets it through ([`Follows::wants`]).
#[derive(Debug, Clone, Copy)]
pub struct Follows<'a> {
    pub wallets: &'a [String],
    pub filters: &'a Filters,
    pub markets: &'a MarketFilters,
}

impl Follows<'_> {
    /// Whether a message about `wallet`'s fill with `facts` is this subscriber's: through a
    /// followed wallet whose filter passes, or a followed market one of whose filters does.
    pub fn wants(&self, wallet: &str, facts: &Facts) -> bool {
        (self.wallets.iter().any(|w| w == wallet) && wants(self.filters, wallet, facts))
            || market_wants(self.markets, facts)
    }

    /// The followed markets' token ids, sorted (what a replay reads besides the wallets).
    pub fn tokens(&self) -> Vec<String> {
        let mut t: Vec<String> = self.markets.keys().cloned().collect();
        t.sort();
        t
    }
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

    /// The accounts following `wallet` or the market of `token`, each once (a fill matching
    /// both a followed wallet and a followed market reaches its account once).
    pub fn accounts_for(&self, wallet: &str, token: &str) -> Vec<i64> {
        let mut out: Vec<i64> = self
            .accounts_by_wallet
            .get(wallet)
            .cloned()
            .unwrap_or_default();
        if let Some(by_market) = self.accounts_by_token.get(token) {
            out.extend(by_market);
            out.sort_unstable();
            out.dedup();
        }
        out
    }

    /// Whether anyone follows `wallet` or the market of `token`.
    pub fn follows(&self, wallet: &str, token: &str) -> bool {
        self.accounts_by_wallet.contains_key(wallet) || self.accounts_by_token.contains_key(token)
    }

    /// Whether account `a`'s subscriptions let a message about `wallet`'s fill with `facts`
    /// through: its filter of `wallet` if it follows the wallet, or a filter of one of its
    /// market subscriptions naming the fill's token.
    pub fn account_wants(&self, a: i64, wallet: &str, facts: &Facts) -> bool {
        let none = Filters::new();
        let by_wallet = self
            .accounts_by_wallet
            .get(wallet)
            .is_some_and(|v| v.contains(&a))
            && wants(
                self.filters_by_account.get(&a).unwrap_or(&none),
                wallet,
                facts,
            );
        by_wallet
            || self
                .markets_by_account
                .get(&a)
                .is_some_and(|m| market_wants(m, facts))
    }

    /// The enabled endpoints of the followers of `wallet` or of the market of `token` that get
    /// a message, each once: for a trade (`facts` given), those whose account's subscriptions
    /// ([`Index::account_wants`]) and whose own filter let it through; without `facts` (a
    /// retract), every one, since a retract is queued only behind the endpoint's delivery of
    /// its trade (the enqueue statement).
    pub fn endpoints_for(&self, wallet: &str, token: &str, facts: Option<&Facts>) -> Vec<i64> {
        let mut out = Vec::new();
        for a in &self.accounts_for(wallet, token) {
            let Some(eps) = self.endpoints_by_account.get(a) else {
                continue;
            };
            if let Some(f) = facts {
                if !self.account_wants(*a, wallet, f) {
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
        load_markets(&tx, &mut idx).await?;
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
            market_tokens = idx.accounts_by_token.len(),
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

/// The followed markets of enabled accounts into `idx` (same snapshot as the rest).
async fn load_markets(
    tx: &tokio_postgres::Transaction<'_>,
    idx: &mut Index,
) -> Result<(), PgError> {
    for r in tx
        .query(include_str!("sql/market_follows.sql"), &[])
        .await?
    {
        let account: i64 = r.get(0);
        let filter = market_filter(r.get(2));
        let markets = idx.markets_by_account.entry(account).or_default();
        for token in r.get::<_, Vec<String>>(1) {
            let followers = idx.accounts_by_token.entry(token.clone()).or_default();
            if followers.last() != Some(&account) {
                followers.push(account); // rows come ordered by account
            }
            markets.entry(token).or_default().push(filter.clone());
        }
    }
    Ok(())
}

/// A market subscription's stored filter (none: everything passes).
fn market_filter(stored: Option<&str>) -> Filter {
    stored.and_then(Filter::from_stored).unwrap_or_default()
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
    /// The account's followed markets (same snapshot).
    pub markets: MarketFilters,
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
    let mut markets = MarketFilters::new();
    for (tokens, filter) in row
        .get::<_, Vec<String>>(5)
        .iter()
        .zip(row.get::<_, Vec<Option<String>>>(6))
    {
        let filter = market_filter(filter.as_deref());
        for token in tokens.split(',') {
            markets
                .entry(token.to_string())
                .or_default()
                .push(filter.clone());
        }
    }
    Ok(Grant {
        version: row.get(0),
        wallets,
        filters,
        markets,
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
        idx.accounts_by_wallet.insert("0xa".into(), vec![1, 2]);
        idx.accounts_by_wallet.insert("0xb".into(), vec![2]);
        assert_eq!(idx.endpoints_for("0xa", "1", Some(&small_sell)), vec![10]);
        assert_eq!(
            idx.endpoints_for("0xa", "1", Some(&big_buy)),
            vec![10, 11, 20]
        );
        // The subscription filter is the wallet's: another wallet of account 2 is unfiltered.
        assert_eq!(idx.endpoints_for("0xb", "1", Some(&small_sell)), vec![20]);
        // A retract is offered to every endpoint (the enqueue keeps those that got the trade).
        assert_eq!(idx.endpoints_for("0xa", "1", None), vec![10, 11, 20]);
    }

    /// A market follower gets any wallet's fill in its market that its filter lets through;
    /// an account following both the wallet and the market gets it once.
    #[test]
    fn market_followers_get_any_wallets_fill_once() {
        let mut idx = Index::default();
        idx.endpoints_by_account.insert(1, vec![10]);
        idx.endpoints_by_account.insert(2, vec![20]);
        idx.accounts_by_wallet.insert("0xa".into(), vec![1]);
        idx.accounts_by_token.insert("1".into(), vec![1, 2]);
        let floor = Filter {
            min_shares: Some(5),
            ..Filter::default()
        };
        for a in [1, 2] {
            idx.markets_by_account
                .insert(a, [("1".to_string(), vec![floor.clone()])].into());
        }
        let small = facts(Side::Buy, 1);
        let big = facts(Side::Buy, 5);
        // Account 1 follows the wallet (unfiltered): once, whatever the market filter says.
        assert_eq!(idx.endpoints_for("0xa", "1", Some(&small)), vec![10]);
        assert_eq!(idx.endpoints_for("0xa", "1", Some(&big)), vec![10, 20]);
        // Another wallet: only through the market, above its floor.
        assert_eq!(
            idx.endpoints_for("0xc", "1", Some(&small)),
            Vec::<i64>::new()
        );
        assert_eq!(idx.endpoints_for("0xc", "1", Some(&big)), vec![10, 20]);
        // Another market: nobody.
        let mut other = big.clone();
        other.token_id = "2".into();
        assert_eq!(
            idx.endpoints_for("0xc", "2", Some(&other)),
            Vec::<i64>::new()
        );
    }
}

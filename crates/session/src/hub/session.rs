//! One session as the hub holds it: what it follows (wallets and markets, with their filters and
//! `subs_version`), what it stopped following while open (kept for the `retract`s it may still be
//! owed), and the one decision of whether a message is its ([`Session::wants`]).

use pmw_core::message::{Events, Kind};
use tokio::sync::mpsc;

use super::{CloseCode, Frame, Item};
use crate::subs::{market_wants, wants, Filters, MarketFilters};

pub(super) struct Session {
    pub account_id: i64,
    pub key_id: i64,
    /// Sorted: [`Session::follows`] searches them.
    pub wallets: Vec<String>,
    /// The filters of `wallets` (same version).
    pub filters: Filters,
    /// The followed markets' tokens and their filters (same version).
    pub markets: MarketFilters,
    /// `subs_version` of `wallets` and `markets`.
    pub version: i64,
    /// Wallets this session stopped following while open, with their filters then: a trade it
    /// was sent may still be orphaned by a reorg, and its `retract` is still the session's
    /// (retracts only, the newest [`FORMER_MAX`]).
    pub former: Vec<(String, Filters)>,
    /// The same for market tokens it stopped following (at most [`FORMER_MAX`] tokens).
    pub former_markets: MarketFilters,
    pub events: Events,
    pub tx: mpsc::Sender<Frame>,
    pub close: CloseCode,
}

/// How many wallets (and market tokens) a session stopped following are kept for their retracts.
const FORMER_MAX: usize = 64;

/// Which of the hub's indexes reached a session for an item, in the order they are walked.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    Wallet,
    /// A wallet it stopped following (retracts only).
    FormerWallet,
    Market,
    /// A market it stopped following (retracts only).
    FormerMarket,
}

impl Session {
    /// Whether the session follows `wallet`.
    fn follows(&self, wallet: &str) -> bool {
        self.wallets
            .binary_search_by(|w| w.as_str().cmp(wallet))
            .is_ok()
    }

    fn former_wallet(&self, wallet: &str) -> Option<&Filters> {
        self.former
            .iter()
            .find(|(w, _)| w == wallet)
            .map(|(_, f)| f)
    }

    /// Whether an index walked before `via` already reached this session for `item` (it is then
    /// decided there, once).
    pub fn reached_before(&self, item: &Item, via: Via) -> bool {
        let retract = item.kind == Kind::Retract;
        let token = &item.facts.token_id;
        let by_wallet = || self.follows(&item.wallet);
        let by_former = || retract && self.former_wallet(&item.wallet).is_some();
        match via {
            Via::Wallet => false,
            Via::FormerWallet => by_wallet(),
            Via::Market => by_wallet() || by_former(),
            Via::FormerMarket => by_wallet() || by_former() || self.markets.contains_key(token),
        }
    }

    /// Whether `item` is this session's: its wallet's filter, a market's filter, or (a retract)
    /// the filter of a wallet or market it stopped following, lets it through.
    pub fn wants(&self, item: &Item) -> bool {
        let (w, f) = (&item.wallet, &item.facts);
        let retract = item.kind == Kind::Retract;
        (self.follows(w) && wants(&self.filters, w, f))
            || market_wants(&self.markets, f)
            || (retract && self.former_wallet(w).is_some_and(|fl| wants(fl, w, f)))
            || (retract && market_wants(&self.former_markets, f))
    }

    /// Before taking `wallets` and `markets`: remember the ones dropped (with their filters),
    /// forget the ones followed again, keep the newest [`FORMER_MAX`] of each.
    pub fn remember_former(&mut self, wallets: &[String], markets: &MarketFilters) {
        self.former.retain(|(w, _)| !wallets.contains(w));
        for w in self.wallets.iter().filter(|w| !wallets.contains(w)) {
            let mut f = Filters::new();
            if let Some(x) = self.filters.get(w) {
                f.insert(w.clone(), x.clone());
            }
            self.former.retain(|(o, _)| o != w);
            self.former.push((w.clone(), f));
        }
        let excess = self.former.len().saturating_sub(FORMER_MAX);
        self.former.drain(..excess);
        self.former_markets.retain(|t, _| !markets.contains_key(t));
        for (t, fs) in self
            .markets
            .iter()
            .filter(|(t, _)| !markets.contains_key(*t))
        {
            if self.former_markets.len() >= FORMER_MAX {
                break;
            }
            self.former_markets.insert(t.clone(), fs.clone());
        }
    }
}

//! The market-names cache a lane's ledger reader (and the pending lane) keeps: names of the
//! tokens its batches hold, from
//! the background resolver's table (`market_names`), misses retried at most every 10 s.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pmw_core::message::Market;
use pmw_core::pg;

/// Market names from the background resolver's cache; misses are looked up again at most every
/// 10 s and never waited for.
#[derive(Default)]
pub(crate) struct Names {
    known: HashMap<String, Market>,
    missing: HashMap<String, Instant>,
}

impl Names {
    pub(crate) fn get(&self, token: &str) -> Option<&Market> {
        self.known.get(token)
    }

    pub(crate) async fn refresh<'a>(
        &mut self,
        client: &deadpool_postgres::Object,
        tokens: impl Iterator<Item = &'a str>,
    ) -> Result<(), tokio_postgres::Error> {
        let retry = Duration::from_secs(10);
        let mut ask: Vec<String> = tokens
            .map(str::to_string)
            .filter(|t| {
                !self.known.contains_key(t)
                    && self.missing.get(t).is_none_or(|at| at.elapsed() > retry)
            })
            .collect();
        ask.sort();
        ask.dedup();
        if ask.is_empty() {
            return Ok(());
        }
        let tokens: Vec<&str> = ask.iter().map(String::as_str).collect();
        for (token, market) in pg::market_names(&***client, &tokens).await? {
            self.missing.remove(&token);
            self.known.insert(token, market);
        }
        let now = Instant::now();
        for t in ask {
            if !self.known.contains_key(&t) {
                self.missing.insert(t, now);
            }
        }
        Ok(())
    }
}

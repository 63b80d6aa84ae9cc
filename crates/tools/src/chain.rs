//! What every stack harness stands on, written once: a private migrated database, a private anvil
//! with the simulator's emitters, accounts seeded straight into Postgres, and what push owes and
//! reached. The e2e tests run the services on it in-process (`tests/e2e/harness.rs`); the drills
//! and `pmw-check` under pm2 behind Caddy ([`crate::harness::Drill`]).

use std::collections::BTreeSet;
use std::time::Duration;

use pmw_core::{Address, Cursor, UnixMs};
use pmw_sim::anvil::Anvil;
use pmw_sim::{Sim, SimConfig};
use pmw_testkit::{eventually_every, StackEnv, TestDb};

/// A private database on a stack and a private chain the simulator trades on.
pub struct Chain {
    pub db: TestDb,
    pub anvil: Anvil,
    pub sim: Sim,
}

impl Chain {
    /// A fresh migrated database on `stack` and an anvil given `anvil_args`, with the exchange
    /// emitters installed.
    pub async fn start(stack: &StackEnv, anvil_args: &[&str]) -> Chain {
        Chain::start_with(stack, anvil_args, SimConfig::default()).await
    }

    /// [`Chain::start`] with the simulator's world `config` (settle mode, mempool behaviours).
    pub async fn start_with(stack: &StackEnv, anvil_args: &[&str], config: SimConfig) -> Chain {
        let db = TestDb::new_on(stack).await;
        let anvil = Anvil::spawn_with(anvil_args).await.expect("anvil");
        let sim = Sim::connect_with(&anvil.http_url(), config)
            .await
            .expect("sim");
        sim.install_emitters().await.expect("emitters");
        Chain { db, anvil, sim }
    }

    /// The chain head's block number.
    pub async fn head(&self) -> u64 {
        self.sim.rpc().latest_block().await.unwrap().number.0
    }

    /// The block push's cursor is at (none before its first round).
    pub async fn pushed(&self) -> Option<u64> {
        self.db
            .connect()
            .await
            .query_opt("SELECT block_number FROM push_cursor WHERE slot = 0", &[])
            .await
            .unwrap()
            .map(|r| r.get::<_, i64>(0) as u64)
    }

    /// Wait until push's cursor reaches the chain head's block, polling every `every`; panics
    /// after `within`, naming where the cursor was.
    pub async fn wait_pushed_every(&self, within: Duration, every: Duration) {
        let head = self.head().await;
        let reached = eventually_every(within, every, || async {
            let b = self.pushed().await;
            b.filter(|b| *b >= head).ok_or(b)
        })
        .await;
        if let Err(b) = reached {
            panic!("push did not reach block {head} within {within:?} (at {b:?})");
        }
    }

    /// The canonical fills owned by `wallets` after `after`, in ledger order.
    pub fn expected(&self, wallets: &[Address], after: Cursor) -> Vec<Cursor> {
        let set: BTreeSet<_> = wallets.iter().copied().collect();
        let mut v: Vec<Cursor> = self
            .sim
            .canonical()
            .iter()
            .filter(|e| set.contains(&e.maker))
            .map(|e| Cursor {
                block: e.block_number,
                log_index: e.log_index as u32,
            })
            .filter(|c| *c > after)
            .collect();
        v.sort();
        v
    }

    /// Tell push the subscriptions changed (the NOTIFY the API sends).
    pub async fn notify(&self) {
        notify(&self.db.connect().await).await;
    }
}

/// The NOTIFY the API sends when subscriptions change, on `pg`.
pub async fn notify(pg: &tokio_postgres::Client) {
    pg.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
        .await
        .unwrap();
}

/// An account on plan `pro` named `name`, with one API key and `wallets` followed, written
/// directly to Postgres with no NOTIFY (the caller notifies push when it needs to); its id and
/// key.
pub async fn account(
    pg: &tokio_postgres::Client,
    name: &str,
    wallets: &[Address],
) -> (i64, String) {
    let now = UnixMs::now().0;
    let id: i64 = pg
        .query_one(
            "INSERT INTO accounts (name, plan, created_ms) VALUES ($1, 'pro', $2) RETURNING id",
            &[&name, &now],
        )
        .await
        .unwrap()
        .get(0);
    let (key, prefix) = pmw_core::auth::generate(pmw_core::auth::KEY_PREFIX);
    pg.execute(
        "INSERT INTO api_keys (account_id, prefix, key_hash, created_ms) VALUES ($1, $2, $3, $4)",
        &[
            &id,
            &prefix,
            &pmw_core::auth::hash_secret(&key).as_slice(),
            &now,
        ],
    )
    .await
    .unwrap();
    for w in wallets {
        pg.execute(
            "INSERT INTO subscriptions (account_id, wallet, created_ms) VALUES ($1, $2, $3)",
            &[&id, &w.as_bytes().as_slice(), &now],
        )
        .await
        .unwrap();
    }
    (id, key)
}

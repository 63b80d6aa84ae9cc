//! One push round: read trades after the cursor up to the ingest watermark (handling reorgs
//! first), match them to subscribers, claim the range and move the cursor in one fenced
//! statement (webhook deliveries enqueued in the same transaction), then fan out to sessions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use pmw_core::ch::ChClient;
use pmw_core::pg::PgPool;
use pmw_core::store::{trades, TradeRow};
use pmw_core::types::cursor::MAX_LOG_INDEX;
use pmw_core::{Cursor, UnixMs};

use crate::hub::{Hub, Item};
use crate::payload::{self, Market};
use crate::subs::Subscriptions;
use crate::webhook;

#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    #[error("this leader's epoch was superseded: write fenced off")]
    Fenced,
    #[error("postgres: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error("postgres pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("clickhouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
    #[error("webhooks: {0}")]
    Webhook(String),
}

/// What a round did.
#[derive(Debug, Default, Clone, Copy)]
pub struct RoundOutcome {
    pub trades: usize,
    pub retracted: usize,
    pub frames: usize,
    pub webhooks: u64,
    /// The round read a full batch: more is waiting.
    pub more: bool,
}

pub struct Rounds {
    pub pool: PgPool,
    pub ch: ChClient,
    pub slot: i16,
    pub epoch: i64,
    pub cursor: Cursor,
    pub reorg_id: i64,
    pub limit: u64,
    pub subs: Subscriptions,
    pub hub: Hub,
    names: Names,
}

impl Rounds {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        pool: PgPool,
        ch: ChClient,
        slot: i16,
        epoch: i64,
        cursor: Cursor,
        reorg_id: i64,
        limit: u64,
        subs: Subscriptions,
        hub: Hub,
    ) -> Rounds {
        Rounds {
            pool,
            ch,
            slot,
            epoch,
            cursor,
            reorg_id,
            limit,
            subs,
            hub,
            names: Names::default(),
        }
    }

    pub async fn round(&mut self) -> Result<RoundOutcome, RoundError> {
        let mut client = self.pool.get().await?;
        let Some(wm) = client
            .query_opt("SELECT block_number FROM ingest_cursor WHERE id = 1", &[])
            .await?
            .map(|r| r.get::<_, i64>(0) as u64)
        else {
            return Ok(RoundOutcome::default());
        };
        self.hub.set_head(wm);

        // Reorgs first: retract what was delivered from orphaned blocks, rewind to the ancestor.
        let mut from = self.cursor;
        let mut reorg_id = self.reorg_id;
        let mut retracts = Vec::new();
        for r in client
            .query(
                "SELECT id, ancestor FROM reorgs WHERE id > $1 ORDER BY id",
                &[&self.reorg_id],
            )
            .await?
        {
            reorg_id = r.get(0);
            let ancestor = r.get::<_, i64>(1) as u64;
            if ancestor < from.block {
                from = Cursor {
                    block: ancestor,
                    log_index: MAX_LOG_INDEX,
                };
            }
        }
        if from < self.cursor {
            retracts = trades::retracted_between(&self.ch, from.block, self.cursor.block)
                .await?
                .into_iter()
                .filter(|t| t.cursor() <= self.cursor)
                .collect();
        }
        let rows = trades::trades_after(&self.ch, from, wm, self.limit).await?;
        if rows.is_empty() && retracts.is_empty() && reorg_id == self.reorg_id {
            return Ok(RoundOutcome::default());
        }
        let through = rows.last().map(TradeRow::cursor).unwrap_or(from);
        self.names
            .refresh(&client, rows.iter().chain(&retracts))
            .await?;

        // Match: a trade belongs to the subscribers of its maker (the owner of the fill).
        let idx = self.subs.current().await;
        let mut per_account: HashMap<i64, Vec<Arc<Item>>> = HashMap::new();
        let mut deliveries = Vec::new();
        let now = UnixMs::now().0;
        for (kind, row) in retracts
            .iter()
            .map(|r| ("retract", r))
            .chain(rows.iter().map(|r| ("trade", r)))
        {
            let Some(accounts) = idx.accounts_by_wallet.get(&row.maker) else {
                continue;
            };
            let body = payload::trade_body(row, self.names.get(&row.token_id));
            let item = Arc::new(Item {
                kind,
                cursor: row.cursor(),
                t_detect_ms: row.t_detect_ms,
                body: body.to_string(),
            });
            for account in accounts {
                per_account.entry(*account).or_default().push(item.clone());
                for endpoint in idx.endpoints_by_account.get(account).into_iter().flatten() {
                    let dk = if kind == "trade" {
                        webhook::DeliveryKind::Trade
                    } else {
                        webhook::DeliveryKind::Retract
                    };
                    deliveries.push(webhook::NewDelivery {
                        id: webhook::webhook_id(row.cursor(), &row.block_hash, *endpoint, dk),
                        endpoint_id: *endpoint,
                        kind: dk,
                        cursor: row.cursor(),
                        payload: serde_json::from_str(&payload::stamp(kind, &item.body, now))
                            .unwrap_or_default(),
                        t_detect_ms: row.t_detect_ms,
                    });
                }
            }
        }

        let tx = client.transaction().await?;
        let claim: Option<i64> = tx
            .query_opt(
                include_str!("sql/claim_round.sql"),
                &[
                    &self.slot,
                    &self.epoch,
                    &(from.block as i64),
                    &(from.log_index as i32),
                    &(through.block as i64),
                    &(through.log_index as i32),
                    &((rows.len() + retracts.len()) as i32),
                    &now,
                    &reorg_id,
                ],
            )
            .await?
            .map(|r| r.get(0));
        let Some(claim) = claim else {
            return Err(RoundError::Fenced);
        };
        let webhooks = match webhook::enqueue_in_slot(&tx, self.slot, self.epoch, &deliveries).await
        {
            Ok(n) => n,
            Err(webhook::WebhookError::Fenced { .. }) => return Err(RoundError::Fenced),
            Err(e) => return Err(RoundError::Webhook(e.to_string())),
        };
        tx.commit().await?;

        if from < self.cursor {
            self.hub.rewind(from);
        }
        let frames = per_account.values().map(Vec::len).sum();
        self.hub.dispatch(&per_account, through);
        client
            .execute(
                include_str!("sql/claim_done.sql"),
                &[&claim, &self.epoch, &UnixMs::now().0, &self.slot],
            )
            .await?;
        self.cursor = through;
        self.reorg_id = reorg_id;
        Ok(RoundOutcome {
            trades: rows.len(),
            retracted: retracts.len(),
            frames,
            webhooks,
            more: rows.len() as u64 >= self.limit,
        })
    }
}

/// Market names from the background resolver's cache; misses are looked up again at most every
/// 10 s and never waited for.
#[derive(Default)]
struct Names {
    known: HashMap<String, Market>,
    missing: HashMap<String, std::time::Instant>,
}

impl Names {
    fn get(&self, token: &str) -> Option<&Market> {
        self.known.get(token)
    }

    async fn refresh<'a>(
        &mut self,
        client: &deadpool_postgres::Object,
        rows: impl Iterator<Item = &'a TradeRow>,
    ) -> Result<(), tokio_postgres::Error> {
        let retry = Duration::from_secs(10);
        let mut ask: Vec<String> = rows
            .map(|r| r.token_id.clone())
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
        for r in client
            .query(
                "SELECT token_id, question, outcome, slug, condition_id FROM market_names \
                 WHERE token_id = ANY($1) AND status = 'resolved'",
                &[&ask],
            )
            .await?
        {
            let token: String = r.get(0);
            self.missing.remove(&token);
            self.known.insert(
                token,
                Market {
                    question: r.get(1),
                    outcome: r.get(2),
                    slug: r.get(3),
                    condition_id: r.get(4),
                },
            );
        }
        let now = std::time::Instant::now();
        for t in ask {
            if !self.known.contains_key(&t) {
                self.missing.insert(t, now);
            }
        }
        Ok(())
    }
}

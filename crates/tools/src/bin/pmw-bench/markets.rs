//! The market-subscription step (issue 45): `plan.market_sessions` sessions, each of an account
//! that follows the `plan.market_count` busiest markets of the run so far (by fills) with a size
//! floor (`filter.min_collateral` = the median fill's collateral so far), on one push leader under
//! the standard fill rate. Reports client-observed detect→push and push's CPU beside the wallet
//! steps; a delivery is owed per fill in those markets at or above the floor, per session.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use pmw_core::UnixMs;
use pmw_sim::Emitted;

use crate::clients::{Collector, Fleet};
use crate::cpu::{Cpu, Used};
use crate::phases::settle;
use crate::setup::{Account, Bench};
use crate::stats::Summary;
use crate::Plan;

/// What the step measured.
pub struct MarketStep {
    pub sessions: usize,
    pub live: usize,
    pub failed: usize,
    pub markets: usize,
    /// The size floor, in USDC (6 decimals).
    pub floor: String,
    /// Fills of the window in the followed markets at or above the floor.
    pub matched: usize,
    pub fills: usize,
    pub delivered: usize,
    pub expected: usize,
    pub lat: Option<Summary>,
    pub cpu: Used,
    pub secs: f64,
}

impl MarketStep {
    /// Push CPU per delivered frame.
    pub fn push_us_per_frame(&self) -> Option<f64> {
        (self.delivered > 0).then(|| self.cpu.push * 1e6 / self.delivered as f64)
    }
}

/// The `n` busiest markets among `fills` (their tokens, by condition id), busiest first.
fn busiest(b: &Bench, fills: &[Emitted], n: usize) -> Vec<(String, Vec<String>)> {
    let markets = &b.sim.config().markets;
    let mut count: BTreeMap<usize, usize> = BTreeMap::new();
    for f in fills {
        if let Some(i) = markets
            .iter()
            .position(|m| m.token_ids.contains(&f.token_id))
        {
            *count.entry(i).or_default() += 1;
        }
    }
    let mut order: Vec<usize> = (0..markets.len()).collect();
    order.sort_by_key(|i| std::cmp::Reverse(count.get(i).copied().unwrap_or(0)));
    order
        .into_iter()
        .take(n)
        .map(|i| {
            let m = &markets[i];
            let tokens = m.token_ids.iter().map(|t| t.to_string()).collect();
            (m.condition_id.to_string(), tokens)
        })
        .collect()
}

/// Run the step (see the module doc).
pub async fn step(b: &mut Bench, plan: &Plan) -> anyhow::Result<MarketStep> {
    let so_far: Vec<Emitted> = b
        .sim
        .emitted()
        .iter()
        .filter(|e| !e.orphaned)
        .cloned()
        .collect();
    let followed = busiest(b, &so_far, plan.market_count);
    let floor_units =
        crate::stats::median_u64(&so_far.iter().map(|e| e.collateral).collect::<Vec<_>>());
    let floor = pmw_core::filter::format_micro(u128::from(floor_units));
    let accounts = b
        .market_accounts(plan.market_sessions, &followed, &floor)
        .await?;
    let tokens: BTreeSet<String> = followed.iter().flat_map(|(_, t)| t.clone()).collect();
    let push = b.start_push(None).await?;
    let ws = Arc::new(Collector::default());
    let mut fleet = Fleet::new(push.addr, ws.clone());
    let failed = fleet.grow(plan.market_sessions, &accounts).await;
    eprintln!(
        "  {} sessions open ({failed} failed), each following {} markets with min_collateral {floor}",
        fleet.live(),
        followed.len()
    );
    let live_pid = b.live.as_ref().map(|l| l.pid);
    let cpu_before = Cpu::sample(push.svc.pid, live_pid, &b.backends().await?);
    let run = b
        .run_sim(plan.matches_per_block, plan.fanout_window)
        .await?;
    b.wait_pushed(run.upto, Duration::from_secs(60)).await?;
    settle(&[&ws], Duration::from_secs(30)).await;
    let cpu = Cpu::sample(push.svc.pid, live_pid, &b.backends().await?).since(&cpu_before);
    let matched = run
        .fills
        .iter()
        .filter(|f| tokens.contains(&f.token_id.to_string()) && f.collateral >= floor_units)
        .count();
    let lat_v = ws.window(run.after, run.upto);
    let live = fleet.live();
    fleet.clear().await;
    push.svc.stop().await?;
    b.drop_market_accounts(&accounts).await?;
    let step = MarketStep {
        sessions: plan.market_sessions,
        live,
        failed,
        markets: followed.len(),
        floor,
        matched,
        fills: run.fills.len(),
        delivered: lat_v.len(),
        expected: matched * live,
        lat: Summary::of(&lat_v),
        cpu,
        secs: run.secs,
    };
    eprintln!(
        "    p99 {:?} ms over {} of {} deliveries; push cpu {:.1} s",
        step.lat.map(|s| s.p99),
        step.delivered,
        step.expected,
        step.cpu.push
    );
    Ok(step)
}

impl Bench {
    /// `n` accounts (one API key each, no wallets) following `markets` (condition id, tokens)
    /// with filter `min_collateral` = `floor`, written straight to Postgres as the API stores them.
    pub async fn market_accounts(
        &mut self,
        n: usize,
        markets: &[(String, Vec<String>)],
        floor: &str,
    ) -> anyhow::Result<Vec<Account>> {
        let now = UnixMs::now().0;
        let filter = serde_json::json!({"min_collateral": floor}).to_string();
        let tx = self.pg.transaction().await?;
        let mut out = Vec::with_capacity(n);
        for k in 0..n {
            let (id, key) =
                crate::setup::account_with_key(&tx, &format!("bench market {k}"), now).await?;
            for (condition, tokens) in markets {
                tx.execute(
                    "INSERT INTO market_subscriptions (account_id, kind, market, conditions, tokens, filter, created_ms, updated_ms) \
                     VALUES ($1, 'condition', $2, ARRAY[$2], $3, $4::text::jsonb, $5, $5)",
                    &[&id, condition, tokens, &filter, &now],
                )
                .await?;
            }
            out.push(Account {
                id,
                key,
                wallets: Vec::new(),
            });
        }
        tx.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
            .await?;
        tx.commit().await?;
        Ok(out)
    }

    /// Disable the step's accounts (later steps do not deliver to them).
    pub async fn drop_market_accounts(&self, accounts: &[Account]) -> anyhow::Result<()> {
        let ids: Vec<i64> = accounts.iter().map(|a| a.id).collect();
        self.pg
            .execute(
                "UPDATE accounts SET disabled_ms = $2 WHERE id = ANY($1)",
                &[&ids, &UnixMs::now().0],
            )
            .await?;
        self.pg
            .execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
            .await?;
        Ok(())
    }
}

/// The step's section of the report, beside the wallet sessions of the fan-out step with as many
/// sessions and the throughput step at the same fill rate.
pub fn render(o: &mut String, r: &crate::report::Report) {
    use crate::report::p;
    use crate::stats::ms;
    use std::fmt::Write;
    let m = &r.markets;
    let pl = &r.plan;
    let _ = writeln!(o, "## Market subscriptions (one push process)\n");
    let _ = writeln!(o, "{} sessions (one account each, no wallets) each follow the {} busiest markets of the run so far (by fills) with `filter.min_collateral` = {} USDC (the median fill's collateral so far), on a fresh pmw-push; {} matches per block for {:?}. A frame is owed per fill in those markets at or above the floor, per open session. Beside it, sessions following wallets ({} each) at the same rate: the pmw latency window, the fan-out step with as many sessions (latency) and the throughput step at {} matches per block (CPU), where the run has them.\n", m.sessions, m.markets, m.floor, pl.matches_per_block, pl.fanout_window, pl.per_account, pl.matches_per_block);
    let _ = writeln!(o, "| sessions follow | sessions open | fills matched / in the window | delivered / owed | p50 | p99 | push CPU | push µs per frame |\n|---|---|---|---|---|---|---|---|");
    let _ = writeln!(
        o,
        "| {} busiest markets, ≥ {} USDC | {} of {} ({} failed to connect) | {} / {} in {:.0} s | {} / {} | {} | {} | {:.1} s | {} |",
        m.markets,
        m.floor,
        m.live,
        m.sessions,
        m.failed,
        m.matched,
        m.fills,
        m.secs,
        m.delivered,
        m.expected,
        ms(p(&m.lat, |s| s.p50)),
        ms(p(&m.lat, |s| s.p99)),
        m.cpu.push,
        m.push_us_per_frame()
            .map_or("–".into(), |v| format!("{v:.0}"))
    );
    let w = &r.pmw;
    let _ = writeln!(
        o,
        "| {} wallets (the pmw latency window, webhooks attached) | {} | {} fills | {} / {} | {} | {} | | |",
        pl.per_account,
        w.clients,
        w.fills,
        w.ws.as_ref().map_or(0, |s| s.n),
        w.ws_expected,
        ms(p(&w.ws, |s| s.p50)),
        ms(p(&w.ws, |s| s.p99)),
    );
    if let Some(s) = r.fanout.steps.iter().find(|s| s.sessions == m.sessions) {
        let _ = writeln!(
            o,
            "| {} wallets (fan-out step) | {} of {} | | {} / {} | {} | {} | | |",
            pl.per_account,
            s.live,
            s.sessions,
            s.delivered,
            s.expected,
            ms(p(&s.lat, |s| s.p50)),
            ms(p(&s.lat, |s| s.p99)),
        );
    }
    if let Some(s) = r
        .rates
        .iter()
        .find(|s| s.matches_per_block == pl.matches_per_block)
    {
        let _ = writeln!(
            o,
            "| {} wallets (throughput step, {} matches/block, webhooks attached) | {} of {} | {} / {} | {} / {} | {} | {} | {:.1} s | {} |",
            pl.per_account,
            s.matches_per_block,
            s.ws_open,
            pl.ws_clients,
            s.matched,
            s.fills,
            s.ws_frames,
            s.ws_expected,
            ms(p(&s.lat, |s| s.p50)),
            ms(p(&s.lat, |s| s.p99)),
            s.cpu.push,
            s.push_us_per_delivery().map_or("–".into(), |v| format!("{v:.0}"))
        );
    }
    let _ = writeln!(o);
}

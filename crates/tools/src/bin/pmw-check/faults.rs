//! The world the checker drives (the drill stack, its private Postgres/ClickHouse, the checked
//! and churn subscribers) and how each scheduled fault is done to it. A fault never panics the
//! run: whatever goes wrong becomes the fault's note in the report.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use pmw_sim::{ReorgPlan, ReplayOrder};
use pmw_testkit::{repo_root, PrivateStack};
use pmw_tools::harness::Drill;
use serde_json::Value;

use crate::hooks::Hook;
use crate::schedule::{Fault, Kind};
use crate::ws::{now_ms, WsClient};

/// An account with fixed subscriptions for the whole run: its client and endpoint are checked.
pub struct Checked {
    pub key: String,
    /// Lowercase hex, no 0x.
    pub wallets: Vec<String>,
    pub client: WsClient,
    pub hook: Hook,
    pub endpoint: i64,
}

/// An account whose subscriptions, endpoints and keys churn (checked for phantom, duplicate
/// and order breaches only).
pub struct Churn {
    pub client: WsClient,
    pub hook: Hook,
    pub endpoints: Mutex<Vec<i64>>,
    /// Endpoint id → its receiver path (`/hook/<n>`).
    pub paths: Mutex<HashMap<i64, String>>,
    /// (receiver path, from ms, to ms) of every time nothing was sent to one of its endpoints:
    /// deleted (to `i64::MAX`) or disabled until re-enabled. Disabling expires what is pending
    /// and a deleted endpoint gets nothing more (README), so the retract of a trade it was sent
    /// may never come: [`excused_orphan`].
    pub paused: Mutex<Vec<(String, i64, i64)>>,
    /// Wallet indexes followed now.
    pub follows: Mutex<Vec<usize>>,
}

pub struct World {
    pub d: Drill,
    pub stack: std::sync::Arc<PrivateStack>,
    /// The services' stack environment (Postgres and, in edge mode, NATS: the private stack's,
    /// or in multi-host mode the hosts').
    pub stack_env: pmw_testkit::StackEnv,
    pub site: String,
    pub http: reqwest::Client,
    pub wallets: Vec<String>,
    pub checked: Vec<Checked>,
    pub churn: Vec<Churn>,
    pub start_block: u64,
    /// Numbers the churn endpoints' URLs (`/hook/<n>`).
    pub endpoint_seq: std::sync::atomic::AtomicUsize,
    pub locks: HashMap<&'static str, tokio::sync::Mutex<()>>,
    /// (ms, the orphaned blocks' hashes, `0x…`) of every reorg done.
    pub reorgs: Mutex<Vec<(i64, Vec<String>)>>,
    /// Held by a NATS node fault while its node is down and catching up (one at a time).
    pub nats_lock: tokio::sync::Mutex<()>,
    /// Multi-host mode: the Postgres HA stack on its hosts.
    pub ha: Option<std::sync::Arc<pmw_tools::ha_hosts::HaHosts>>,
    /// Multi-host mode: what each host fault measured.
    pub host_figures: Mutex<Vec<crate::host_faults::Figures>>,
    /// With the pending tier on: the checker's own watch of the chain's pool.
    pub pending: Option<std::sync::Arc<crate::pending::ChainWatch>>,
}

/// How long after a reorg its retracts may still be on their way to an endpoint: a first attempt
/// the receiver holds past the sender's 10 s timeout, the retry 5 s (±20%) later, and the
/// webhook lane's own lag.
pub const RETRACT_GRACE_MS: i64 = 20_000;

/// Whether an orphan (a trade of a block in `hash`) held by the endpoint at `path` may lack its
/// retract by design: a reorg orphaned its block at R, and nothing was sent to that endpoint at
/// some time between R and its retract's deadline (deleted or disabled then, or before and
/// still). The deadline is R + [`RETRACT_GRACE_MS`], moved to an outage's end + the grace while
/// an outage that holds up webhooks (`outages`: began, ended ms) is under way before it: a run
/// once deleted an endpoint 20.9 s after a reorg whose retract waited out a push leader's
/// SIGSTOP and the kill of its successor.
pub fn excused_orphan(
    path: &str,
    hash: &str,
    paused: &[(String, i64, i64)],
    reorgs: &[(i64, Vec<String>)],
    outages: &[(i64, i64)],
) -> bool {
    reorgs
        .iter()
        .filter(|(_, blocks)| blocks.iter().any(|b| b == hash))
        .any(|&(r, _)| {
            let due = retract_deadline(r, outages);
            paused
                .iter()
                .any(|(p, from, to)| p == path && *from < due && *to > r)
        })
}

/// When a retract owed from a reorg at `r` is due at the latest: [`RETRACT_GRACE_MS`] after `r`,
/// or after the end of the last outage under way before that (outages chain).
pub fn retract_deadline(r: i64, outages: &[(i64, i64)]) -> i64 {
    let mut due = r + RETRACT_GRACE_MS;
    loop {
        let later = outages
            .iter()
            .filter(|(began, ended)| {
                *began <= due && *ended + RETRACT_GRACE_MS > due && *ended >= r
            })
            .map(|(_, ended)| ended + RETRACT_GRACE_MS)
            .max();
        match later {
            Some(l) => due = l,
            None => return due,
        }
    }
}

/// What one fault did.
#[derive(Clone, Debug)]
pub struct Done {
    pub fault: Fault,
    pub start_ms: i64,
    pub end_ms: i64,
    /// When the fault itself began and ended (the kill, the stop and the SIGCONT or takeover,
    /// the store down and answering again, …), as the fault's arm marked them; recovery is
    /// measured from `ended_ms`.
    pub began_ms: i64,
    pub ended_ms: i64,
    pub note: String,
    /// It struck with no warm standby ready ([`Marks::was_cold`]).
    pub cold: bool,
    /// It was injected: it succeeded, or its arm marked its start before it failed. A fault
    /// that failed before striking (a switchover refused by an unhealthy cluster) darkened
    /// nothing, so it opens no window that could excuse another's silence.
    pub struck: bool,
}

#[cfg(test)]
impl Done {
    /// A fault of `kind` that ran (and whose arm marked it) from `start` to `end` ms, and
    /// succeeded (a deploy's exit status 0).
    pub fn test(kind: Kind, start: i64, end: i64) -> Done {
        Done {
            fault: Fault { at_s: 0, kind },
            start_ms: start,
            end_ms: end,
            began_ms: start,
            ended_ms: end,
            note: "exit status: 0".into(),
            cold: false,
            struck: true,
        }
    }
}

/// The instants a fault's arm marks while it runs (0: not marked; the task's own start and
/// end stand in).
#[derive(Default)]
pub struct Marks {
    began: AtomicI64,
    ended: AtomicI64,
    cold: std::sync::atomic::AtomicBool,
}

impl Marks {
    pub fn begin(&self) {
        self.began.store(now_ms(), Relaxed);
    }

    pub fn end(&self) {
        self.ended.store(now_ms(), Relaxed);
    }

    fn end_at(&self, ms: i64) {
        self.ended.store(ms, Relaxed);
    }

    /// The fault struck with no warm standby to take over (its host down, or itself still
    /// restarting): what it killed must come back cold ([`crate::availability::judged_kind`]).
    fn cold(&self) {
        self.cold.store(true, Relaxed);
    }

    pub fn was_cold(&self) -> bool {
        self.cold.load(Relaxed)
    }

    /// The arm marked the fault's start.
    pub fn began(&self) -> bool {
        self.began.load(Relaxed) > 0
    }

    /// (began, ended), defaulting to the task's start and end.
    pub fn get(&self, start_ms: i64, end_ms: i64) -> (i64, i64) {
        let or = |v: i64, d: i64| if v > 0 { v } else { d };
        (
            or(self.began.load(Relaxed), start_ms),
            or(self.ended.load(Relaxed), end_ms),
        )
    }
}

/// Send `sig` to `pid`; whether it was delivered.
pub fn kill(pid: i64, sig: &str) -> bool {
    pid > 0
        && std::process::Command::new("kill")
            .args([format!("-{sig}"), pid.to_string()])
            .status()
            .is_ok_and(|s| s.success())
}

impl World {
    /// A call to the API through Caddy, retried while the API or its store is down: for 30 s,
    /// beyond the longest failover budget (a host freeze or partition of the primary's host,
    /// 20 s), so a churn step done during a failover waits it out rather than failing.
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        key: &str,
        body: Value,
    ) -> anyhow::Result<Value> {
        let mut last = String::new();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            let m = reqwest::Method::from_bytes(method.as_bytes())?;
            let mut req = self
                .http
                .request(m, format!("http://{}{path}", self.site))
                .bearer_auth(key)
                .timeout(Duration::from_secs(5));
            if !body.is_null() {
                req = req.json(&body);
            }
            match req.send().await {
                Ok(r) if r.status().is_success() => {
                    return Ok(r.json().await.unwrap_or(Value::Null));
                }
                Ok(r) if r.status().is_client_error() && r.status() != 429 => {
                    bail!(
                        "{method} {path}: {} {}",
                        r.status(),
                        r.text().await.unwrap_or_default()
                    );
                }
                Ok(r) => last = format!("{}", r.status()),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        bail!("{method} {path}: {last}")
    }

    /// Whether the push instance that is not `leader_app` waits as a live standby (a standby
    /// heartbeat in the last 3 s from a running process).
    async fn standby_ready(&self, leader_app: &str) -> bool {
        let other = if leader_app.ends_with("-a") {
            "push-b"
        } else {
            "push-a"
        };
        self.d
            .push_beat(other)
            .await
            .is_some_and(|(role, pid, beat_ms)| {
                role == "standby"
                    && now_ms() - beat_ms < 3_000
                    && std::path::Path::new(&format!("/proc/{pid}")).exists()
            })
    }

    /// The push leader's pm2 app and live pid (waits up to 20 s for one, e.g. after a kill).
    async fn leader_pid(&self) -> anyhow::Result<(String, i64)> {
        let mut last = anyhow::anyhow!("no leader");
        for _ in 0..40 {
            match self.leader_once().await {
                Ok((app, pid))
                    if pid > 0 && std::path::Path::new(&format!("/proc/{pid}")).exists() =>
                {
                    return Ok((app, pid))
                }
                Ok((app, pid)) => last = anyhow::anyhow!("{app} pid {pid} is not running"),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(last)
    }

    async fn leader_once(&self) -> anyhow::Result<(String, i64)> {
        let app = self.leader_app().await?;
        let pm2 = &self.d.pm2;
        let pid = tokio::task::block_in_place(|| pm2.apps())
            .into_iter()
            .find(|a| a.name == app)
            .map_or(0, |a| a.pid);
        Ok((app, pid))
    }

    /// The pm2 app `push_epoch` names as the leader.
    async fn pg(&self) -> anyhow::Result<tokio_postgres::Client> {
        let url = self
            .d
            .env
            .iter()
            .find(|(k, _)| k == "PMW_POSTGRES_URL")
            .context("PMW_POSTGRES_URL")?
            .1
            .clone();
        let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        tokio::spawn(conn);
        Ok(c)
    }

    async fn leader_app(&self) -> anyhow::Result<String> {
        leader_of(&self.pg().await?).await
    }

    /// Watch `push_epoch` for up to `within`: when another instance than `app` became leader
    /// (the standby's takeover of a frozen leader), or `None`. One connection, opened again
    /// only when it fails (a Postgres restart may overlap).
    async fn takeover_within(&self, app: &str, within: Duration) -> Option<i64> {
        let until = tokio::time::Instant::now() + within;
        let mut pg = None;
        while tokio::time::Instant::now() < until {
            if pg.is_none() {
                pg = self.pg().await.ok();
            }
            if let Some(c) = &pg {
                match leader_of(c).await {
                    Ok(now) if now != app => {
                        let at = now_ms();
                        tokio::time::sleep_until(until).await;
                        return Some(at);
                    }
                    Ok(_) => {}
                    Err(_) => pg = None,
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }

    /// A pm2 command, tried again (pm2 refuses while it is restarting the app itself).
    async fn pm2(&self, args: &[&str]) -> anyhow::Result<()> {
        let mut err = String::new();
        for _ in 0..5 {
            let out = tokio::task::block_in_place(|| self.d.pm2.run(args));
            if out.status.success() {
                return Ok(());
            }
            err = String::from_utf8_lossy(&out.stderr).into_owned();
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        bail!("pm2 {args:?}: {err}")
    }

    async fn stack(&self, args: &'static [&'static str]) -> anyhow::Result<()> {
        let s = self.stack.clone();
        tokio::task::spawn_blocking(move || s.run(args))
            .await
            .map_err(|e| anyhow::anyhow!("scripts/stack {args:?} failed: {e}"))
    }

    /// Run one fault; its note says what happened.
    pub async fn run(&self, f: &Fault, m: &Marks) -> anyhow::Result<String> {
        if f.kind.closes_sockets() {
            return self.run_edge(f, m).await;
        }
        if f.kind.is_host() {
            return self.run_host(&f.kind, m).await;
        }
        match &f.kind {
            Kind::Reorg { depth, mode } => self.reorg(*depth, *mode).await,
            Kind::LeaderKill9
            | Kind::LeaderStop { .. }
            | Kind::Deploy
            | Kind::LiveRestart
            | Kind::ClickHouseStop { .. }
            | Kind::PostgresRestart => self.run_process(&f.kind, m).await,
            Kind::RpcCut { .. } | Kind::ProviderCut { .. } | Kind::ProviderLag { .. } => {
                self.run_rpc(&f.kind, m).await
            }
            k => self.run_churn(k, m).await,
        }
    }

    /// A reorg of `depth` blocks (`mode` 0: fills re-mined in place, 1: dropped, 2: moved into
    /// the last new block), unless it would cross the start block.
    async fn reorg(&self, depth: u64, mode: u8) -> anyhow::Result<String> {
        let head = self.d.sim.rpc().latest_block().await?.number.0;
        if head.saturating_sub(depth) <= self.start_block {
            return Ok("skipped: would cross the start block".into());
        }
        let o = self
            .d
            .sim
            .reorg_with(ReorgPlan {
                depth,
                new_matches_per_block: u32::from(mode != 0),
                replay_orphaned: mode != 1,
                replay_order: if mode == 2 {
                    ReplayOrder::LastBlock
                } else {
                    ReplayOrder::Same
                },
            })
            .await?;
        self.reorgs.lock().unwrap().push((
            now_ms(),
            o.orphaned_blocks.iter().map(|h| h.to_string()).collect(),
        ));
        Ok(format!(
            "{} → {}: {} fills orphaned, {} added",
            o.old_head.number,
            o.new_head.number,
            o.orphaned.len(),
            o.added.len()
        ))
    }

    /// A fault to a process: the push leader killed or frozen, a deploy, a restart of live or
    /// Postgres, ClickHouse down for a while.
    async fn run_process(&self, kind: &Kind, m: &Marks) -> anyhow::Result<String> {
        let secs = |s: u64| tokio::time::sleep(Duration::from_secs(s));
        Ok(match kind {
            Kind::LeaderKill9 => {
                let (app, pid) = self.leader_pid().await?;
                let standby = self.standby_ready(&app).await;
                if !standby {
                    m.cold();
                }
                m.begin();
                let killed = kill(pid, "KILL");
                m.end();
                let cold = if standby {
                    ""
                } else {
                    "; no standby ready (no fresh standby heartbeat: its host down, Postgres \
                     failing over, or it is restarting): a cold restart"
                };
                format!("{app} pid {pid}: {killed}{cold}")
            }
            Kind::LeaderStop { secs: s } => {
                let (app, pid) = self.leader_pid().await?;
                m.begin();
                let stopped = kill(pid, "STOP");
                let takeover = self.takeover_within(&app, Duration::from_secs(*s)).await;
                let cont = kill(pid, "CONT");
                let cont_ms = now_ms();
                m.end_at(takeover.map_or(cont_ms, |t| t.min(cont_ms)));
                let took = takeover.map_or("no takeover".into(), |t| {
                    format!("takeover after {} ms", t - m.get(0, 0).0)
                });
                format!("{app} pid {pid}: stop {stopped}, {took}, cont {cont}")
            }
            Kind::Deploy => {
                m.begin();
                m.end();
                let out = tokio::process::Command::new(repo_root().join("scripts/deploy/push"))
                    .arg("--no-build")
                    .envs(self.d.env.iter().cloned())
                    .env("PM2_HOME", self.d.pm2.home.path())
                    .env("PMW_CADDY_URL", format!("http://{}", self.site))
                    .env("PMW_DEPLOY_KEY", &self.checked[0].key)
                    .output()
                    .await?;
                let err = String::from_utf8_lossy(&out.stderr);
                let tail = err.lines().last().unwrap_or_default().to_string();
                format!("{}: {tail}", out.status)
            }
            Kind::LiveRestart => {
                m.begin();
                self.pm2(&["restart", "pmw-live"]).await?;
                m.end();
                "restarted".into()
            }
            Kind::ClickHouseStop { secs: s } => {
                m.begin();
                self.stack(&["down", "ch"]).await?;
                secs(*s).await;
                self.stack(&["up", "ch"]).await?;
                m.end();
                "down, up".into()
            }
            Kind::PostgresRestart => {
                m.begin();
                self.stack(&["pg-ctl", "restart", "-m", "fast"]).await?;
                m.end();
                "restarted (fast)".into()
            }
            k => bail!("{k} is not a process fault"),
        })
    }

    /// A fault to the RPC: every provider's WebSocket cut, one provider cut or lagging.
    async fn run_rpc(&self, kind: &Kind, m: &Marks) -> anyhow::Result<String> {
        let secs = |s: u64| tokio::time::sleep(Duration::from_secs(s));
        Ok(match kind {
            Kind::RpcCut { secs: s } => {
                // Every provider's WebSocket (their HTTP stays up, as with one provider).
                let mut ws: Vec<&pmw_testkit::TcpProxy> =
                    self.d.providers.iter().map(|p| &p.ws).collect();
                ws.extend(self.d.rpc_proxy.as_ref());
                anyhow::ensure!(!ws.is_empty(), "no rpc proxy");
                m.begin();
                ws.iter().for_each(|p| p.cut());
                secs(*s).await;
                ws.iter().for_each(|p| p.restore());
                m.end();
                "cut, restored".into()
            }
            Kind::ProviderCut { provider, secs: s } => {
                let p = self.d.providers.get(*provider).context("rpc provider")?;
                m.begin();
                p.ws.cut();
                p.http.cut();
                secs(*s).await;
                p.ws.restore();
                p.http.restore();
                m.end();
                format!("{} cut, restored", p.name)
            }
            Kind::ProviderLag {
                provider,
                ms,
                secs: s,
            } => {
                let p = self.d.providers.get(*provider).context("rpc provider")?;
                let delay = Duration::from_millis(*ms);
                m.begin();
                p.ws.set_delay(delay);
                p.http.set_delay(delay);
                secs(*s).await;
                p.ws.set_delay(Duration::ZERO);
                p.http.set_delay(Duration::ZERO);
                m.end();
                format!("{} delayed, then on time", p.name)
            }
            k => bail!("{k} is not an RPC fault"),
        })
    }
}

/// The pm2 app of the push leader on record.
async fn leader_of(c: &tokio_postgres::Client) -> anyhow::Result<String> {
    let leader: String = c
        .query_one("SELECT leader FROM push_epoch WHERE slot = 0", &[])
        .await?
        .get(0);
    Ok(format!("pmw-{leader}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_under_way_moves_the_retracts_deadline() {
        let reorgs = vec![(100_000, vec!["0xaa".to_string()])];
        let deleted = vec![("/hook/1".to_string(), 120_900, i64::MAX)];
        // Deleted 20.9 s after the reorg: outside the grace, unless push was down in between
        // (a SIGSTOP from 3 s to 22 s after it, chained to a kill at 15 s lasting 10 s).
        assert!(!excused_orphan("/hook/1", "0xaa", &deleted, &reorgs, &[]));
        let outages = [(103_000, 122_000), (115_000, 125_000)];
        assert!(excused_orphan(
            "/hook/1", "0xaa", &deleted, &reorgs, &outages
        ));
        assert_eq!(retract_deadline(100_000, &outages), 145_000);
        // An outage over before the reorg, or begun after the deadline, moves nothing.
        assert_eq!(retract_deadline(100_000, &[(50_000, 90_000)]), 120_000);
        assert_eq!(retract_deadline(100_000, &[(121_000, 130_000)]), 120_000);
    }

    #[test]
    fn an_orphan_is_excused_only_on_an_endpoint_paused_while_its_retract_was_owed() {
        let reorgs = vec![(100_000, vec!["0xaa".to_string()])];
        let at = |from: i64, to: i64| vec![("/hook/1".to_string(), from, to)];
        // Deleted 1 s before the reorg, or 12 s after it (within the grace): excused.
        assert!(excused_orphan(
            "/hook/1",
            "0xaa",
            &at(99_000, i64::MAX),
            &reorgs,
            &[]
        ));
        assert!(excused_orphan(
            "/hook/1",
            "0xaa",
            &at(112_000, i64::MAX),
            &reorgs,
            &[]
        ));
        // Disabled 12 s after the reorg for 5 s: excused; disabled and re-enabled before it: not.
        assert!(excused_orphan(
            "/hook/1",
            "0xaa",
            &at(112_000, 117_000),
            &reorgs,
            &[]
        ));
        assert!(!excused_orphan(
            "/hook/1",
            "0xaa",
            &at(90_000, 95_000),
            &reorgs,
            &[]
        ));
        // Paused long after the grace, another endpoint, or a block no reorg orphaned: not.
        assert!(!excused_orphan(
            "/hook/1",
            "0xaa",
            &at(130_000, i64::MAX),
            &reorgs,
            &[]
        ));
        assert!(!excused_orphan(
            "/hook/2",
            "0xaa",
            &at(99_000, i64::MAX),
            &reorgs,
            &[]
        ));
        assert!(!excused_orphan(
            "/hook/1",
            "0xbb",
            &at(99_000, i64::MAX),
            &reorgs,
            &[]
        ));
    }
}

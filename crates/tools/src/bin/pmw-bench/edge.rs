//! Edge mode at scale: one push leader publishing each WebSocket round to a private NATS
//! JetStream stream and several pmw-edge child processes serving `/v1/ws` from it, with the
//! sessions spread round-robin over the edges' own addresses. Owns the edge-mode fan-out steps
//! (client-observed latency, and the edges' summed `VmRSS` per session; their clients live in one
//! worker process per edge, see `worker`) and starts the cluster the edge-mode throughput steps
//! run against.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmw_session::bus::{Bus, BusAccess, BusConfig};

use crate::clients::Collector;
use crate::phases::{step, Census, Step};
use crate::setup::{Account, Bench, Push};
use crate::worker::{Remote, State};
use crate::Plan;

/// A fresh private stream on the stack's NATS cluster, created before its leader and edges start
/// (a busy cluster can take longer to create one than a service's first request waits) and
/// deleted at the end.
pub struct PrivateStream {
    bus: Bus,
    /// Push's settings for it (`PMW_PUSH_NATS_*`, push's identity).
    pub env: Vec<(String, String)>,
    /// An edge's (`PMW_EDGE_NATS_*`, the edges' identity).
    pub edge_env: Vec<(String, String)>,
}

impl PrivateStream {
    pub async fn create() -> anyhow::Result<PrivateStream> {
        let tag = format!("{:08x}", rand::random::<u32>());
        let (stream, prefix) = (format!("PMW_BENCH_{tag}"), format!("pmwbench{tag}"));
        let urls = pmw_testkit::nats_urls().to_string();
        let role = pmw_testkit::nats_role;
        let op = role("operator");
        let config = BusConfig::named(&urls, &stream, &prefix).with_access(BusAccess::new(
            &op.user,
            &op.password,
            op.ca.clone(),
        ));
        let bus = Bus::connect(config, "pmw-bench").await?;
        let mut tries = 0;
        while let Err(e) = pmw_session::bus::stream::ensure(&bus).await {
            tries += 1;
            if tries == 5 {
                return Err(e.into());
            }
            eprintln!("  warning: {e}; creating the stream again");
        }
        // A frame signing key pair of the bench's own (push signs, the edges verify).
        let (secret, public) = pmw_session::bus::sign::generate("bench")?;
        let at = |service: &str| {
            vec![
                (format!("PMW_{service}_NATS_URLS"), urls.clone()),
                (format!("PMW_{service}_NATS_STREAM"), stream.clone()),
                (format!("PMW_{service}_NATS_PREFIX"), prefix.clone()),
                ("PMW_BUS_VERIFY_KEYS".to_string(), public.clone()),
            ]
        };
        let mut env = at("PUSH");
        env.extend(role("push").env("PUSH"));
        env.push(("PMW_BUS_SIGNING_KEY".into(), secret));
        let mut edge_env = at("EDGE");
        edge_env.extend(role("edge").env("EDGE"));
        Ok(PrivateStream { bus, env, edge_env })
    }

    /// Delete the stream (its services stopped first); a failure is a warning.
    pub async fn delete(self) {
        if let Err(e) = self.bus.js.delete_stream(&self.bus.config.stream).await {
            eprintln!("  warning: delete stream {}: {e}", self.bus.config.stream);
        }
    }
}

/// A push leader publishing to NATS and `n` edges on its stream, each ready.
pub struct Cluster {
    pub push: Push,
    pub edges: Vec<Push>,
    stream: PrivateStream,
}

impl Cluster {
    pub async fn start(b: &mut Bench, n: usize) -> anyhow::Result<Cluster> {
        let stream = PrivateStream::create().await?;
        let push = b.start_push_with(None, stream.env.clone()).await?;
        let mut edges = Vec::with_capacity(n);
        for _ in 0..n {
            edges.push(start_edge(b, &stream.edge_env).await?);
        }
        Ok(Cluster {
            push,
            edges,
            stream,
        })
    }

    /// The edges' WebSocket addresses.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.edges.iter().map(|e| e.addr).collect()
    }

    /// Each edge's `VmRSS`, KiB.
    pub fn rss(&self) -> Vec<Option<u64>> {
        self.edges.iter().map(|e| e.svc.rss_kib()).collect()
    }

    /// Stop the edges, then the leader (a non-zero exit is a warning); delete the stream.
    pub async fn stop(self) -> anyhow::Result<()> {
        for svc in self.edges.into_iter().map(|e| e.svc).chain([self.push.svc]) {
            let name = svc.name.clone();
            let code = svc.stop().await?;
            if code != 0 {
                eprintln!("  warning: {name} exited {code}");
            }
        }
        self.stream.delete().await;
        Ok(())
    }
}

/// An edge, started up to three times: one that exits on a transient broker error (75, a
/// JetStream request timing out on a busy machine) would be restarted by pm2 in production.
async fn start_edge(b: &mut Bench, bus: &[(String, String)]) -> anyhow::Result<Push> {
    let mut tries = 0;
    loop {
        tries += 1;
        match b.start_edge(bus).await {
            Ok(e) => return Ok(e),
            Err(e) if tries < 3 => eprintln!("  warning: {e:#}; starting it again"),
            Err(e) => return Err(e),
        }
    }
}

/// One edge-mode fan-out step: the window, and each edge's RSS with the sessions open and idle.
pub struct EdgeStep {
    pub step: Step,
    pub rss_kib: Vec<Option<u64>>,
}

impl EdgeStep {
    /// The edges' summed RSS (KiB), when every edge's was read.
    pub fn total_kib(&self) -> Option<u64> {
        self.rss_kib.iter().copied().sum()
    }

    /// Summed RSS ÷ open sessions (KiB per session, the edges' baseline included).
    pub fn kib_per_session(&self) -> Option<f64> {
        Some(self.total_kib()? as f64 / self.step.live.max(1) as f64)
    }
}

pub struct EdgeFanOut {
    /// Each edge's RSS once ready, before any session.
    pub rss0_kib: Vec<Option<u64>>,
    pub steps: Vec<EdgeStep>,
}

impl EdgeFanOut {
    /// The largest step that held every session with p99 within budget.
    pub fn capacity(&self) -> Option<usize> {
        self.steps
            .iter()
            .filter(|s| s.step.ok)
            .map(|s| s.step.sessions)
            .max()
    }

    pub fn rss0_total(&self) -> Option<u64> {
        self.rss0_kib.iter().copied().sum()
    }

    /// (summed RSS at the step − summed RSS with none) ÷ open sessions.
    pub fn net_kib_per_session(&self, s: &EdgeStep) -> Option<f64> {
        let grown = s.total_kib()? as f64 - self.rss0_total()? as f64;
        Some(grown / s.step.live.max(1) as f64)
    }

    /// Per edge: (RSS at the step − its RSS with none) ÷ its share of the open sessions.
    pub fn net_kib_per_edge(&self, s: &EdgeStep) -> Vec<Option<f64>> {
        let share = s.step.live as f64 / self.rss0_kib.len().max(1) as f64;
        s.rss_kib
            .iter()
            .zip(&self.rss0_kib)
            .map(|(r, r0)| Some((r.as_ref()? - r0.as_ref()?) as f64 / share.max(1.0)))
            .collect()
    }
}

/// Step the sessions spread over `plan.edges` edges up, as the single-process fan-out does: a
/// step holds when every session stays open and the client-observed p99 is within budget; one
/// over budget with every session open is measured once more; stepping stops at the first that
/// does not hold.
pub async fn fanout(b: &mut Bench, plan: &Plan, ws: &Arc<Collector>) -> anyhow::Result<EdgeFanOut> {
    let cluster = Cluster::start(b, plan.edges).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss0_kib = cluster.rss();
    let mut fleet = Workers::start(&cluster.addrs(), &b.ws_accounts, ws, &b.logs).await?;
    let mut steps = Vec::new();
    for &n in &plan.edge_steps {
        let started = Instant::now();
        let failed = fleet.grow(n).await?;
        let open = fleet.census().await?;
        eprintln!(
            "  {n} sessions over {} edges: {} open, {failed} failed, connected in {:.1} s",
            plan.edges,
            open.live,
            started.elapsed().as_secs_f64()
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        let rss_kib = cluster.rss();
        let step = step(b, plan, ws, &mut fleet, n).await?;
        let ok = step.ok;
        let step = EdgeStep {
            step: Step {
                failed,
                rss_kib: rss_kib.iter().copied().sum(),
                ..step
            },
            rss_kib,
        };
        eprintln!(
            "    edges' RSS {:?} KiB: {:.1} KiB per session",
            step.rss_kib,
            step.kib_per_session().unwrap_or(f64::NAN)
        );
        steps.push(step);
        if !ok {
            eprintln!("    over budget or sessions lost: stopping");
            break;
        }
    }
    fleet.stop().await?;
    cluster.stop().await?;
    Ok(EdgeFanOut { rss0_kib, steps })
}

/// The fan-out's clients: one worker process per edge, client `j` of the fleet on edge
/// `j mod edges` with account `j mod accounts` (the single-process fleet's assignment).
struct Workers(Vec<Remote>);

impl Workers {
    async fn start(
        addrs: &[SocketAddr],
        accounts: &[Account],
        ws: &Arc<Collector>,
        logs: &std::path::Path,
    ) -> anyhow::Result<Workers> {
        let k = addrs.len();
        let mut v = Vec::with_capacity(k);
        for (w, addr) in addrs.iter().enumerate() {
            // The worker's client i is the fleet's client i·k + w.
            let mine: Vec<Account> = (0..accounts.len())
                .map(|i| accounts[(i * k + w) % accounts.len()].clone())
                .collect();
            let log = logs.join(format!("bench-clients-{w}.log"));
            v.push(Remote::spawn(*addr, &mine, ws.clone(), &log).await?);
        }
        Ok(Workers(v))
    }

    /// Grow the fleet to `n` sessions in all (evenly over the workers); how many new ones failed.
    async fn grow(&mut self, n: usize) -> anyhow::Result<usize> {
        let k = self.0.len();
        let grows = self
            .0
            .iter_mut()
            .enumerate()
            .map(|(w, r)| r.grow((n + k - 1 - w) / k));
        let mut failed = 0;
        for r in futures::future::join_all(grows).await {
            failed += r?;
        }
        Ok(failed)
    }

    async fn stop(self) -> anyhow::Result<()> {
        for r in self.0 {
            r.stop().await?;
        }
        Ok(())
    }
}

impl Census for Workers {
    /// Every worker's state, summed.
    async fn census(&mut self) -> anyhow::Result<State> {
        let mut all = State::default();
        for r in &mut self.0 {
            let st = r.state().await?;
            all.live += st.live;
            all.failed += st.failed;
            for (w, n) in st.followers {
                *all.followers.entry(w).or_default() += n;
            }
        }
        Ok(all)
    }
}

//! The edge-mode faults the checker does (`--edges N`): an edge killed, frozen or redeployed,
//! a NATS node killed (one that does not lead the stream, or the one that does) and restarted.
//! NATS faults run one at a time (two nodes down is a lost quorum, which the design does not
//! claim to survive), and each waits until the restarted node has caught up.

use std::time::Duration;

use anyhow::Context;
use pmw_session::bus::{Bus, BusAccess, BusConfig};
use pmw_testkit::repo_root;

use crate::faults::{kill, Marks, World};
use crate::schedule::{Fault, Kind};

impl World {
    fn env_var(&self, key: &str) -> anyhow::Result<String> {
        self.d
            .env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .with_context(|| format!("{key} is not in the drill's environment"))
    }

    /// The live pid of `pmw-edge-<edge>` (waits up to 20 s, e.g. while pm2 restarts it).
    async fn edge_pid(&self, edge: usize) -> anyhow::Result<i64> {
        let name = format!("pmw-edge-{edge}");
        for _ in 0..40 {
            let pm2 = &self.d.pm2;
            let pid = tokio::task::block_in_place(|| pm2.apps())
                .into_iter()
                .find(|a| a.name == name && a.status == "online")
                .map_or(0, |a| a.pid);
            if pid > 0 && std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Ok(pid);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        anyhow::bail!("{name} is not running")
    }

    /// The stream's replicas as JetStream reports them: (leader node, every replica current).
    async fn stream_state(&self) -> anyhow::Result<(usize, bool)> {
        let op = self.stack_env.nats_role("operator");
        let cfg = BusConfig::named(
            self.stack_env.get("PMW_NATS_URLS"),
            &self.env_var("PMW_PUSH_NATS_STREAM")?,
            &self.env_var("PMW_PUSH_NATS_PREFIX")?,
        )
        .with_access(BusAccess::new(&op.user, &op.password, op.ca.clone()));
        let bus = tokio::time::timeout(Duration::from_secs(5), Bus::connect(cfg, "pmw-check"))
            .await
            .context("connect to NATS")??;
        let info = tokio::time::timeout(Duration::from_secs(5), async {
            let stream = bus.js.get_stream(&bus.config.stream).await?;
            anyhow::Ok(stream.get_info().await?)
        })
        .await
        .context("stream info: no answer in 5 s")?
        .context("stream info")?;
        let cluster = info.cluster.context("the stream reports no cluster")?;
        let node = |name: &str| -> Option<usize> { name.strip_prefix("pmw-n")?.parse().ok() };
        let leader = cluster
            .leader
            .as_deref()
            .and_then(node)
            .context("the stream has no leader")?;
        let current = cluster.replicas.len() == 2 && cluster.replicas.iter().all(|r| r.current);
        Ok((leader, current))
    }

    /// Kill NATS node `node` (SIGKILL), restart it after `secs`, and wait (up to 60 s) for the
    /// stream's three replicas to be current again. Returns the note.
    async fn nats_down_up(&self, node: usize, secs: u64, m: &Marks) -> anyhow::Result<String> {
        m.begin();
        match &self.ha {
            // Multi-host mode: the node on host `node`, its host up.
            Some(ha) => {
                let nats = ha.nats().context("no nats on the hosts")?;
                nats.kill_node(node).await?;
            }
            None => {
                let stack = self.stack.clone();
                tokio::task::spawn_blocking(move || stack.nats_kill(node))
                    .await
                    .context("kill the nats node")?;
            }
        }
        tokio::time::sleep(Duration::from_secs(secs)).await;
        match &self.ha {
            Some(ha) => {
                let nats = ha.nats().context("no nats on the hosts")?;
                nats.start_node(&ha.hosts, node)?;
            }
            None => {
                let stack = self.stack.clone();
                tokio::task::spawn_blocking(move || stack.run(&["up", "nats"]))
                    .await
                    .context("scripts/stack up nats")?;
            }
        }
        m.end();
        let t0 = tokio::time::Instant::now();
        let mut last = String::from("no answer");
        while t0.elapsed() < Duration::from_secs(60) {
            match self.stream_state().await {
                Ok((leader, true)) => {
                    return Ok(format!(
                        "n{node} killed, back after {secs} s; replicas current {} ms later (leader n{leader})",
                        t0.elapsed().as_millis()
                    ))
                }
                Ok((leader, false)) => last = format!("leader n{leader}, a replica behind"),
                Err(e) => last = format!("{e:#}"),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        anyhow::bail!("n{node} back, but the stream's replicas are not current after 60 s: {last}")
    }

    /// Run one edge-mode fault; its note says what happened.
    pub async fn run_edge(&self, f: &Fault, m: &Marks) -> anyhow::Result<String> {
        Ok(match f.kind {
            Kind::EdgeKill9 { edge } => {
                let pid = self.edge_pid(edge).await?;
                m.begin();
                let killed = kill(pid, "KILL");
                m.end();
                format!("pmw-edge-{edge} pid {pid}: {killed}")
            }
            Kind::EdgeStop { edge, secs } => {
                let pid = self.edge_pid(edge).await?;
                m.begin();
                let stopped = kill(pid, "STOP");
                // Its clients' recovery runs from the freeze: they notice the silence (no
                // heartbeat) and resume on another edge, which Caddy's health check picks.
                m.end();
                tokio::time::sleep(Duration::from_secs(secs)).await;
                let cont = kill(pid, "CONT");
                format!("pmw-edge-{edge} pid {pid}: stop {stopped}, cont {cont}")
            }
            Kind::EdgeDeploy => {
                m.begin();
                m.end();
                let out = tokio::process::Command::new(repo_root().join("scripts/deploy/edge"))
                    .arg("--no-build")
                    .envs(self.d.env.iter().cloned())
                    .env("PM2_HOME", self.d.pm2.home.path())
                    .output()
                    .await?;
                let err = String::from_utf8_lossy(&out.stderr);
                let tail = err.lines().last().unwrap_or_default().to_string();
                format!("{}: {tail}", out.status)
            }
            Kind::NatsKill { secs } => {
                let _one = self.nats_lock.lock().await;
                let (leader, _) = self.stream_state().await?;
                // The first node after the leader (1-3, wrapping): a follower of the stream.
                let node = leader % 3 + 1;
                self.nats_down_up(node, secs, m).await?
            }
            Kind::NatsLeaderKill { secs } => {
                let _one = self.nats_lock.lock().await;
                let (leader, _) = self.stream_state().await?;
                self.nats_down_up(leader, secs, m).await?
            }
            _ => anyhow::bail!("not an edge-mode fault: {}", f.kind),
        })
    }
}

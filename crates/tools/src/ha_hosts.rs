//! The Postgres HA stack spread over simulated hosts ([`pmw_testkit::Hosts`]): three network
//! namespaces, an etcd member on each and a Patroni/Postgres 15 member on the first two, from the
//! production templates in deploy/patroni/ (the same ttl/loop_wait/retry_timeout and synchronous
//! mode as `scripts/stack up ha`), each member reached by its host's address. The multi-host
//! checker (`pmw-check --hosts 3`) runs the services on it and fails hosts whole; this module
//! owns starting the members, (re)starting a host's share, and reading who is primary.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context};
use pmw_testkit::{eventually_every, repo_root, Host, Hosts, StackEnv};
use tokio_postgres::NoTls;

use crate::ha_nats::HostNats;

/// Ports inside every host's namespace (each host has a port space of its own).
pub const ETCD_PORT: u16 = 2379;
pub const ETCD_PEER_PORT: u16 = 2380;
pub const PG_PORT: u16 = 5432;
pub const REST_PORT: u16 = 8008;
/// The hosts holding a Postgres member (1-based); every host holds an etcd member.
pub const PG_HOSTS: [usize; 2] = [1, 2];
/// The Patroni scope of the cluster.
const SCOPE: &str = "pmw-hosts";

/// A Patroni member as its REST API's `/cluster` lists it.
#[derive(Debug, Clone)]
pub struct Member {
    /// `pg1`, `pg2`: the member on host 1, 2.
    pub name: String,
    /// `leader`, `sync_standby`, `replica`.
    pub role: String,
    /// `running`, `streaming`, `stopped`, …
    pub state: String,
}

impl Member {
    /// The host (1-based) this member runs on.
    pub fn host(&self) -> usize {
        self.name.trim_start_matches("pg").parse().unwrap_or(0)
    }
}

/// The HA stack on three hosts; dropping it kills every member and removes the hosts and the
/// state dir.
pub struct HaHosts {
    pub hosts: Hosts,
    dir: PathBuf,
    pg_bin: String,
    /// The etcd process of each host (index 0 = host 1), to tell it from the Patroni side.
    etcd: Mutex<Vec<Option<tokio::process::Child>>>,
    patroni: Mutex<Vec<Option<tokio::process::Child>>>,
    /// Edge mode: a NATS node on each host ([`HaHosts::start_nats`]).
    nats: std::sync::OnceLock<HostNats>,
    http: reqwest::Client,
}

impl HaHosts {
    /// Three hosts with every member started (not yet ready: [`HaHosts::ready`]); `pg_bin`
    /// holds Postgres 15's binaries.
    pub fn start(pg_bin: &str) -> anyhow::Result<HaHosts> {
        sweep_stale_dirs();
        let hosts = Hosts::create(3)?;
        let dir = PathBuf::from(format!("/var/tmp/pmw-hosts-{}", hosts.tag()));
        std::fs::create_dir_all(&dir)?;
        chmod(&dir, 0o755)?;
        let ha = HaHosts {
            hosts,
            dir,
            pg_bin: pg_bin.to_string(),
            etcd: Mutex::new((0..3).map(|_| None).collect()),
            patroni: Mutex::new((0..3).map(|_| None).collect()),
            nats: std::sync::OnceLock::new(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .no_proxy()
                .build()?,
        };
        for i in 1..=3 {
            ha.start_etcd(i)?;
        }
        for i in PG_HOSTS {
            ha.start_patroni(i)?;
        }
        Ok(ha)
    }

    /// Wait for a primary with a synchronous standby (the first bootstrap), then make role
    /// `pmw` and databases `pmw` and `pmwcheck`.
    pub async fn ready(&self) -> anyhow::Result<()> {
        self.wait_healthy(Duration::from_secs(120))
            .await
            .context("the HA cluster on hosts never got a primary with a sync standby")?;
        let admin = self
            .admin(self.primary().await.context("no primary")?)
            .await?;
        for sql in [
            "CREATE ROLE pmw LOGIN SUPERUSER",
            "CREATE DATABASE pmw OWNER pmw",
            "CREATE DATABASE pmwcheck OWNER pmw",
        ] {
            admin.batch_execute(sql).await?;
        }
        Ok(())
    }

    /// The multi-host URL of database `db` (every Postgres member, read-write only).
    pub fn url(&self, db: &str) -> String {
        let hosts: Vec<String> = PG_HOSTS
            .iter()
            .map(|&i| format!("{}:{PG_PORT}", self.hosts.host(i).ip))
            .collect();
        format!(
            "postgres://pmw@{}/{db}?target_session_attrs=read-write&connect_timeout=2",
            hosts.join(",")
        )
    }

    /// The REST APIs of the Postgres members' Patroni, in the order of [`HaHosts::url`]'s hosts
    /// (`PMW_POSTGRES_PATRONI_URLS`).
    pub fn patroni_urls(&self) -> Vec<String> {
        PG_HOSTS
            .iter()
            .map(|&i| format!("http://{}:{REST_PORT}", self.hosts.host(i).ip))
            .collect()
    }

    /// `base` (a stack's environment) with Postgres on these hosts, sessions going only to the
    /// member Patroni names primary.
    pub fn stack_env(&self, base: &StackEnv) -> StackEnv {
        let mut env = base.clone();
        env.vars.insert("PMW_POSTGRES_URL".into(), self.url("pmw"));
        env.vars.insert(
            "PMW_POSTGRES_PATRONI_URLS".into(),
            self.patroni_urls().join(","),
        );
        env
    }

    pub fn host(&self, index: usize) -> &Host {
        self.hosts.host(index)
    }

    /// Edge mode: start a NATS node on every host and wait until each is healthy; a host's
    /// kill takes its node, [`HaHosts::restart`] brings it back.
    pub async fn start_nats(&self) -> anyhow::Result<&HostNats> {
        anyhow::ensure!(self.nats.get().is_none(), "nats already started");
        let nats = HostNats::start(&self.hosts, &self.dir)?;
        let nats = self.nats.get_or_init(|| nats);
        nats.ready(Duration::from_secs(60)).await?;
        Ok(nats)
    }

    /// The hosts' NATS cluster, when edge mode started one.
    pub fn nats(&self) -> Option<&HostNats> {
        self.nats.get()
    }

    /// A superuser connection straight to host `index`'s Postgres, whatever its role.
    pub async fn admin(&self, index: usize) -> anyhow::Result<tokio_postgres::Client> {
        self.connect(index, "postgres", "postgres").await
    }

    /// A connection straight to host `index`'s database `db` as `user`, whatever its role.
    pub async fn connect(
        &self,
        index: usize,
        user: &str,
        db: &str,
    ) -> anyhow::Result<tokio_postgres::Client> {
        let url = format!(
            "postgres://{user}@{}:{PG_PORT}/{db}?connect_timeout=2",
            self.host(index).ip
        );
        let (client, conn) = tokio_postgres::connect(&url, NoTls).await?;
        tokio::spawn(conn);
        Ok(client)
    }

    /// The host whose Postgres takes writes now, if one does (asked of each, 2 s at most).
    pub async fn primary(&self) -> Option<usize> {
        for i in PG_HOSTS {
            let ask = async {
                let c = self.admin(i).await.ok()?;
                let r = c.query_one("SHOW transaction_read_only", &[]).await.ok()?;
                Some(r.get::<_, String>(0) == "off")
            };
            if tokio::time::timeout(Duration::from_secs(2), ask).await == Ok(Some(true)) {
                return Some(i);
            }
        }
        None
    }

    /// Patroni's view of the members, from the first member whose REST API answers.
    pub async fn members(&self) -> Vec<Member> {
        for i in PG_HOSTS {
            let url = format!("http://{}:{REST_PORT}/cluster", self.host(i).ip);
            let Ok(r) = self.http.get(url).send().await else {
                continue;
            };
            let Ok(v) = r.json::<serde_json::Value>().await else {
                continue;
            };
            return v["members"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| Member {
                    name: m["name"].as_str().unwrap_or("").into(),
                    role: m["role"].as_str().unwrap_or("").into(),
                    state: m["state"].as_str().unwrap_or("").into(),
                })
                .collect();
        }
        Vec::new()
    }

    /// Whether both members run, one leading and the other its synchronous standby (Patroni's
    /// `/sync` key), and the leader takes writes with that standby streaming.
    pub async fn healthy(&self) -> bool {
        let m = self.members().await;
        let leader = m
            .iter()
            .find(|m| m.role == "leader" && m.state == "running");
        let sync = m.iter().any(|m| {
            m.role == "sync_standby" && matches!(m.state.as_str(), "running" | "streaming")
        });
        let Some(l) = leader.filter(|_| sync) else {
            return false;
        };
        let streaming = async {
            let c = self.admin(l.host()).await.ok()?;
            let r = c
                .query_one(
                    "SELECT NOT pg_is_in_recovery() AND EXISTS (SELECT 1 FROM pg_stat_replication \
                     WHERE sync_state = 'sync' AND state = 'streaming')",
                    &[],
                )
                .await
                .ok()?;
            Some(r.get::<_, bool>(0))
        };
        tokio::time::timeout(Duration::from_secs(2), streaming).await == Ok(Some(true))
    }

    /// Wait until [`HaHosts::healthy`]; how long it took.
    pub async fn wait_healthy(&self, within: Duration) -> anyhow::Result<Duration> {
        let t0 = std::time::Instant::now();
        if eventually_every(within, Duration::from_millis(250), || self.healthy()).await {
            Ok(t0.elapsed())
        } else {
            bail!("not healthy within {within:?}: {:?}", self.members().await)
        }
    }

    /// Ask Patroni to hand the primary role from host `from` to host `to`.
    pub async fn switchover(&self, from: usize, to: usize) -> anyhow::Result<()> {
        let url = format!("http://{}:{REST_PORT}/switchover", self.host(from).ip);
        let body =
            serde_json::json!({"leader": format!("pg{from}"), "candidate": format!("pg{to}")});
        let r = self
            .http
            .post(url)
            .timeout(Duration::from_secs(30))
            .json(&body)
            .send()
            .await?;
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        anyhow::ensure!(status.is_success(), "switchover refused: {status} {text}");
        Ok(())
    }

    /// Start what host `index` holds that is not running (after a host kill: its etcd member,
    /// and its Patroni member, which rejoins by itself), and let its services start again
    /// (their launchers wait while the host is down: [`HaHosts::down_marker`]).
    pub fn restart(&self, index: usize) -> anyhow::Result<()> {
        if !running(&self.etcd, index) {
            self.start_etcd(index)?;
        }
        if PG_HOSTS.contains(&index) && !running(&self.patroni, index) {
            self.start_patroni(index)?;
        }
        if let Some(nats) = self.nats.get() {
            nats.start_node(&self.hosts, index)?;
        }
        match std::fs::remove_file(self.down_marker(index)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// The file that exists while host `index` is down (killed, not back yet): the launcher of
    /// a service placed on it waits until it is gone, as a machine that is off serves nothing
    /// (`crate::placed`).
    pub fn down_marker(&self, index: usize) -> PathBuf {
        self.dir.join(format!("down{index}"))
    }

    /// SIGKILL host `index`'s Patroni and Postgres, and nothing else of it (its etcd member
    /// and the services placed on it stay): the Postgres member lost, the host up.
    pub fn kill_postgres(&self, index: usize) -> anyhow::Result<usize> {
        let victims: Vec<String> = self
            .host(index)
            .pids()
            .into_iter()
            .filter(|p| {
                let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline);
                // Patroni (python3 …/patroni), the postmaster (…/bin/postgres -D …) and
                // its children (titled `postgres: …`).
                cmdline.contains("patroni")
                    || cmdline.contains("/bin/postgres")
                    || cmdline.starts_with("postgres")
            })
            .map(|p| p.to_string())
            .collect();
        if victims.is_empty() {
            bail!("host {index} runs no postgres member");
        }
        let _ = std::process::Command::new("kill")
            .arg("-KILL")
            .args(&victims)
            .stderr(Stdio::null())
            .status();
        reap(&self.patroni, index);
        Ok(victims.len())
    }

    /// SIGKILL every process of host `index` (the machine lost): its members and its
    /// services, which stay down until [`HaHosts::restart`].
    pub fn kill_host(&self, index: usize) -> anyhow::Result<()> {
        std::fs::write(self.down_marker(index), b"")?;
        self.host(index).kill()?;
        reap(&self.etcd, index);
        reap(&self.patroni, index);
        if let Some(nats) = self.nats.get() {
            nats.reap(index);
        }
        Ok(())
    }

    fn start_etcd(&self, index: usize) -> anyhow::Result<()> {
        let ip = self.host(index).ip;
        let cluster: Vec<String> = self
            .hosts
            .iter()
            .map(|h| format!("e{}=http://{}:{ETCD_PEER_PORT}", h.index, h.ip))
            .collect();
        let data = self.dir.join(format!("etcd{index}"));
        // A member restarted on its data dir rejoins as itself; a fresh one bootstraps.
        let state = if data.join("member").exists() {
            "existing"
        } else {
            "new"
        };
        std::fs::create_dir_all(&data)?;
        chmod(&data, 0o700)?;
        let config = self.render(
            "etcd.yml",
            &format!("etcd{index}.yml"),
            &[
                ("NAME", format!("e{index}")),
                ("DATA_DIR", data.display().to_string()),
                ("CLIENT_URL", format!("http://{ip}:{ETCD_PORT}")),
                ("PEER_URL", format!("http://{ip}:{ETCD_PEER_PORT}")),
                ("INITIAL_CLUSTER", cluster.join(",")),
                ("TOKEN", SCOPE.into()),
            ],
        )?;
        let text = std::fs::read_to_string(&config)?.replace(
            "initial-cluster-state: new",
            &format!("initial-cluster-state: {state}"),
        );
        std::fs::write(&config, text)?;
        let mut cmd = self.host(index).command(Path::new("/usr/bin/etcd"));
        cmd.arg("--config-file").arg(&config);
        let child = self.spawn(cmd, &format!("etcd{index}"))?;
        self.etcd.lock().unwrap()[index - 1] = Some(child);
        Ok(())
    }

    fn start_patroni(&self, index: usize) -> anyhow::Result<()> {
        let ip = self.host(index).ip;
        let etcd: Vec<String> = self
            .hosts
            .iter()
            .map(|h| format!("{}:{ETCD_PORT}", h.ip))
            .collect();
        let (data, run, sock) = (
            self.dir.join(format!("pg{index}")),
            self.dir.join(format!("run{index}")),
            self.dir.join(format!("sock{index}")),
        );
        for (d, mode) in [(&data, 0o700), (&run, 0o700), (&sock, 0o755)] {
            std::fs::create_dir_all(d)?;
            chmod(d, mode)?;
            chown_postgres(d)?;
        }
        let config = self.render(
            "patroni.yml",
            &format!("pg{index}.yml"),
            &[
                ("SCOPE", SCOPE.into()),
                ("NAME", format!("pg{index}")),
                ("REST", format!("{ip}:{REST_PORT}")),
                ("ETCD_HOSTS", etcd.join(",")),
                ("MAX_CONNECTIONS", "300".into()),
                ("AUTH", "trust".into()),
                ("PG_LISTEN", format!("{ip}:{PG_PORT}")),
                ("DATA_DIR", data.display().to_string()),
                ("BIN_DIR", self.pg_bin.clone()),
                ("PGPASS", run.join("pgpass").display().to_string()),
                ("SUPERUSER_PASSWORD", "dev".into()),
                ("REPLICATION_PASSWORD", "dev".into()),
                ("SOCKET_DIR", sock.display().to_string()),
            ],
        )?;
        // The template trusts loopback only: here the members and the services meet on the
        // hosts' bridge.
        let net = format!("{}/24", self.hosts.gateway());
        let text = std::fs::read_to_string(&config)?.replace("127.0.0.1/32", &net);
        std::fs::write(&config, text)?;
        chmod(&config, 0o644)?;
        let mut cmd = self.host(index).command(Path::new("setpriv"));
        cmd.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "env",
        ])
        .arg(format!("HOME={}", run.display()))
        .arg("/usr/bin/patroni")
        .arg(&config);
        let child = self.spawn(cmd, &format!("patroni{index}"))?;
        self.patroni.lock().unwrap()[index - 1] = Some(child);
        Ok(())
    }

    /// `deploy/patroni/<template>` filled with `values` into the state dir as `name`.
    fn render(
        &self,
        template: &str,
        name: &str,
        values: &[(&str, String)],
    ) -> anyhow::Result<PathBuf> {
        let path = repo_root().join("deploy/patroni").join(template);
        let mut text = std::fs::read_to_string(&path)?;
        for (k, v) in values {
            text = text.replace(&format!("@{k}@"), v);
        }
        let out = self.dir.join(name);
        std::fs::write(&out, text)?;
        Ok(out)
    }

    fn spawn(
        &self,
        mut cmd: tokio::process::Command,
        log: &str,
    ) -> anyhow::Result<tokio::process::Child> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{log}.log")))?;
        cmd.stdout(file.try_clone()?).stderr(file);
        Ok(cmd.spawn()?)
    }

    /// The last `lines` lines of each member's log (for a failed run).
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for name in ["etcd1", "etcd2", "etcd3", "patroni1", "patroni2"] {
            out += &log_tail(&self.dir.join(format!("{name}.log")), name, lines);
        }
        if let Some(nats) = self.nats.get() {
            out += &nats.log_tails(lines);
        }
        out
    }
}

impl HaHosts {
    /// Every member killed, the hosts and (unless `PMW_DRILL_KEEP_LOGS` is set) the state dir
    /// removed, as dropping does: for a checker stopped by a signal.
    pub fn teardown(&self) {
        if let Some(nats) = self.nats.get() {
            nats.stop();
        }
        self.hosts.teardown();
        if std::env::var_os("PMW_DRILL_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for HaHosts {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// The last `lines` lines of the log at `path`, under a `---- name` header (empty when absent).
pub(crate) fn log_tail(path: &Path, name: &str, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let mut out = format!("---- {name}\n");
    for l in &all[all.len().saturating_sub(lines)..] {
        out += l;
        out.push('\n');
    }
    out
}

/// Whether the child of host `index` in `set` still runs.
fn running(set: &Mutex<Vec<Option<tokio::process::Child>>>, index: usize) -> bool {
    let mut set = set.lock().unwrap();
    match set[index - 1].as_mut() {
        Some(c) => matches!(c.try_wait(), Ok(None)),
        None => false,
    }
}

/// Forget (and reap) the killed child of host `index` in `set`.
fn reap(set: &Mutex<Vec<Option<tokio::process::Child>>>, index: usize) {
    if let Some(mut c) = set.lock().unwrap()[index - 1].take() {
        let _ = c.start_kill();
        let _ = c.try_wait();
    }
}

fn chmod(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", path.display()))
}

fn chown_postgres(path: &Path) -> anyhow::Result<()> {
    let ok = std::process::Command::new("chown")
        .arg("postgres:postgres")
        .arg(path)
        .status()?
        .success();
    anyhow::ensure!(ok, "chown postgres {}", path.display());
    Ok(())
}

/// Removes the state dirs of earlier runs that were killed before their drop (each holds two
/// Postgres data dirs, 0.5–1 GB): a `/var/tmp/pmw-hosts-<tag>` whose bridge `pmwb<tag>` is gone.
fn sweep_stale_dirs() {
    let Ok(dirs) = std::fs::read_dir("/var/tmp") else {
        return;
    };
    for d in dirs.flatten() {
        let name = d.file_name().to_string_lossy().to_string();
        let Some(tag) = name.strip_prefix("pmw-hosts-") else {
            continue;
        };
        if !Path::new(&format!("/sys/class/net/pmwb{tag}")).exists() {
            match std::fs::remove_dir_all(d.path()) {
                Ok(()) => println!("removed {name}: a killed run's state"),
                Err(e) => println!("could not remove {name}: {e}"),
            }
        }
    }
}

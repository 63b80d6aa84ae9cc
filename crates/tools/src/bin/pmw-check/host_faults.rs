//! Multi-host mode's faults (`--hosts 3`, issue 44): the Postgres HA stack on three simulated
//! hosts ([`HaHosts`]) failed whole or member by member, one host fault at a time, evenly spread
//! over the run. Beyond the oracle every fault is judged by: the writes acknowledged before it
//! (a probe row, the ledger, the checked endpoints' delivered records, push's cursor) are all on
//! the new primary; a write tried on an old primary that is cut off or frozen is never
//! acknowledged (a single writer); the old primary rejoins by itself. Each fault records its time
//! to writable (the first probe write acknowledged through the multi-host URL) and to the first
//! delivery after it.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use pmw_tools::ha_hosts::HaHosts;
use rand::Rng;

use crate::availability::Stream;
use crate::faults::{Done, Marks, World};
use crate::schedule::{Fault, Kind};
use crate::ws::now_ms;

/// The `--host-faults` tokens, one per kind.
pub const TOKENS: [&str; 7] = [
    "kill",
    "partition",
    "freeze",
    "primary-kill",
    "switchover",
    "standby-lost",
    "etcd-lost",
];

/// How long a fault waits for writes, and then for the old primary to rejoin.
const WRITABLE_WITHIN: Duration = Duration::from_secs(60);
const REJOIN_WITHIN: Duration = Duration::from_secs(90);
/// Spacing of host faults (one at a time; each takes its outage plus a rejoin).
const SLOT_S: u64 = 45;

/// The host faults of a run over `span` s: the `only` kinds (all when empty) in turn, from a
/// seeded start, evenly spaced (at least one of each), their outages drawn from the seed.
pub fn plan(rng: &mut rand::rngs::StdRng, span: u64, only: &[String]) -> Vec<Fault> {
    let kinds: Vec<&str> = TOKENS
        .iter()
        .copied()
        .filter(|t| only.is_empty() || only.iter().any(|o| o == t))
        .collect();
    if kinds.is_empty() {
        return Vec::new();
    }
    let (lo, hi) = (15, span.saturating_sub(30).max(16));
    let n = (((hi - lo) / SLOT_S) as usize).max(kinds.len());
    let step = (hi - lo) / n as u64;
    let first = rng.gen_range(0..kinds.len());
    (0..n)
        .map(|i| Fault {
            at_s: lo + i as u64 * step,
            kind: make(kinds[(first + i) % kinds.len()], rng),
        })
        .collect()
}

fn make(token: &str, r: &mut rand::rngs::StdRng) -> Kind {
    match token {
        "kill" => Kind::HostKill {
            secs: r.gen_range(5..=20),
        },
        "partition" => Kind::HostPartition {
            secs: r.gen_range(15..=25),
        },
        "freeze" => Kind::HostFreeze {
            secs: r.gen_range(15..=25),
        },
        "primary-kill" => Kind::PrimaryKill {
            secs: r.gen_range(5..=15),
        },
        "switchover" => Kind::Switchover,
        "standby-lost" => Kind::StandbyLost {
            secs: r.gen_range(5..=20),
        },
        _ => Kind::EtcdLost {
            secs: r.gen_range(5..=20),
        },
    }
}

/// What one host fault measured.
#[derive(Clone, Debug)]
pub struct Figures {
    pub at_ms: i64,
    pub kind: &'static str,
    pub writable_ms: i64,
    pub rejoin_ms: i64,
}

/// What was acknowledged on the primary just before a fault.
struct Acked {
    probe: i64,
    ledger_seq: i64,
    ledger_rows: i64,
    delivered: i64,
    cursor: (i64, i64, i64),
}

/// The probe table (in database `pmwcheck`, beside the services' own).
pub async fn prepare(ha: &HaHosts) -> anyhow::Result<()> {
    let c = client(ha, "pmwcheck").await?;
    c.batch_execute("CREATE TABLE acked (id bigint PRIMARY KEY, at_ms bigint NOT NULL)")
        .await?;
    Ok(())
}

/// A connection to `db` on whichever host takes writes now (the multi-host URL).
async fn client(ha: &HaHosts, db: &str) -> anyhow::Result<tokio_postgres::Client> {
    // Host by host with a bounded handshake, only to the member Patroni names primary, as the
    // services connect (a frozen host's kernel still accepts the TCP connection).
    let cfg: tokio_postgres::Config = ha.url(db).parse()?;
    let patroni = pmw_core::pg::patroni::Patroni::new(ha.patroni_urls());
    let connect = pmw_core::pg::follow::connect(&cfg, &patroni);
    let (c, conn) = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .context("connect: no answer within 5 s")??;
    tokio::spawn(conn);
    Ok(c)
}

/// One probe write through the multi-host URL, acknowledged within 3 s or refused.
async fn probe(ha: &HaHosts, id: i64) -> anyhow::Result<()> {
    let write = async {
        let c = client(ha, "pmwcheck").await?;
        c.execute(
            "INSERT INTO acked VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
            &[&id, &now_ms()],
        )
        .await?;
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(3), write)
        .await
        .context("no answer within 3 s")?
}

/// Probe writes from `since` until one is acknowledged: ms from `since` to writable.
async fn writable(ha: &HaHosts, id: i64, since: Instant) -> anyhow::Result<i64> {
    let mut last = String::new();
    while since.elapsed() < WRITABLE_WITHIN {
        match probe(ha, id).await {
            Ok(()) => return Ok(since.elapsed().as_millis() as i64),
            Err(e) => last = format!("{e:#}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("not writable within {WRITABLE_WITHIN:?}: {last}")
}

impl World {
    fn ha(&self) -> anyhow::Result<&HaHosts> {
        self.ha.as_deref().context("not multi-host mode")
    }

    /// What the primary has acknowledged now: a probe row written and the services' state.
    async fn acked(&self, ha: &HaHosts, id: i64) -> anyhow::Result<Acked> {
        probe(ha, id).await.context("probe before the fault")?;
        let c = client(ha, &self.d.db.name).await?;
        let ledger = c
            .query_one("SELECT coalesce(max(seq), 0), count(*) FROM ledger", &[])
            .await?;
        let cursor = c
            .query_opt(
                "SELECT block_number, log_index::bigint, reorg_id FROM push_cursor WHERE slot = 0",
                &[],
            )
            .await?
            .map_or((0, 0, 0), |r| (r.get(0), r.get(1), r.get(2)));
        Ok(Acked {
            probe: id,
            ledger_seq: ledger.get(0),
            ledger_rows: ledger.get(1),
            delivered: self.delivered(&c).await?,
            cursor,
        })
    }

    /// The checked endpoints' delivered records (never deleted while the run lasts).
    async fn delivered(&self, c: &tokio_postgres::Client) -> anyhow::Result<i64> {
        let ids: Vec<i64> = self.checked.iter().map(|c| c.endpoint).collect();
        let r = c
            .query_one(
                "SELECT count(*) FROM webhook_deliveries \
                 WHERE state = 'delivered' AND endpoint_id = ANY($1)",
                &[&ids],
            )
            .await?;
        Ok(r.get(0))
    }

    /// Every write of `a` is on the primary now; what was checked.
    async fn still_acked(&self, ha: &HaHosts, a: &Acked) -> anyhow::Result<String> {
        let probes = client(ha, "pmwcheck").await?;
        let held = probes
            .query_opt("SELECT 1 FROM acked WHERE id = $1", &[&a.probe])
            .await?;
        ensure!(
            held.is_some(),
            "LOST: acknowledged probe {} is gone",
            a.probe
        );
        let c = client(ha, &self.d.db.name).await?;
        let rows: i64 = c
            .query_one(
                "SELECT count(*) FROM ledger WHERE seq <= $1",
                &[&a.ledger_seq],
            )
            .await?
            .get(0);
        ensure!(
            rows >= a.ledger_rows,
            "LOST: ledger rows up to seq {}: {rows} of {}",
            a.ledger_seq,
            a.ledger_rows
        );
        let delivered = self.delivered(&c).await?;
        ensure!(
            delivered >= a.delivered,
            "LOST: delivered records {delivered} < {}",
            a.delivered
        );
        let cursor: (i64, i64, i64) = c
            .query_opt(
                "SELECT block_number, log_index::bigint, reorg_id FROM push_cursor WHERE slot = 0",
                &[],
            )
            .await?
            .map_or((0, 0, 0), |r| (r.get(0), r.get(1), r.get(2)));
        let moved_on = cursor.2 > a.cursor.2 || (cursor.0, cursor.1) >= (a.cursor.0, a.cursor.1);
        ensure!(
            moved_on,
            "LOST: push cursor {cursor:?} behind the acknowledged {:?}",
            a.cursor
        );
        Ok(format!(
            "kept: probe, {} ledger rows, {} delivered",
            a.ledger_rows, a.delivered
        ))
    }

    /// One host fault, judged; its note.
    pub async fn run_host(&self, kind: &Kind, m: &Marks) -> anyhow::Result<String> {
        let ha = self.ha()?;
        ha.wait_healthy(Duration::from_secs(60))
            .await
            .context("not healthy before the fault")?;
        let primary = ha.primary().await.context("no primary")?;
        let id = now_ms();
        let before = self.acked(ha, id).await?;
        let mut note = format!("primary h{primary}");
        let t0 = Instant::now();
        m.begin();
        m.end();
        let at_ms = now_ms();
        let (down, old_primary, secs) = inject(ha, kind, primary).await?;
        let writable_ms = writable(ha, id + 1, t0).await;
        let now = ha.primary().await;
        let _ = write!(note, " → {now:?}");
        if let Ok(ms) = &writable_ms {
            let _ = write!(note, ", writable after {ms} ms");
        }
        let kept = match &writable_ms {
            Ok(_) => self.still_acked(ha, &before).await,
            Err(_) => Ok(String::new()),
        };
        let outage = Duration::from_secs(secs).saturating_sub(t0.elapsed());
        let refused = match old_primary {
            Some(old) => Some(old_primary_refuses(ha, old, -id, outage).await),
            None => {
                tokio::time::sleep(outage).await;
                None
            }
        };
        match kind {
            Kind::HostFreeze { .. } => ha.host(primary).thaw()?,
            Kind::HostPartition { .. } => ha.hosts.heal(primary)?,
            _ => {}
        }
        if let Some(h) = down {
            ha.restart(h)?;
        }
        let rejoin = ha.wait_healthy(REJOIN_WITHIN).await;
        let writable_ms = writable_ms?;
        let _ = write!(note, "; {}", kept?);
        if let Some(r) = refused {
            let _ = write!(note, "; {}", r?);
        }
        let rejoin = rejoin.context("the old member did not rejoin by itself")?;
        if old_primary.is_some() {
            let c = client(ha, "pmwcheck").await?;
            let leaked = c
                .query_opt("SELECT 1 FROM acked WHERE id = $1", &[&-id])
                .await?;
            ensure!(
                leaked.is_none(),
                "TWO WRITERS: the cut-off old primary's write reached the new primary"
            );
        }
        let _ = write!(note, "; rejoined after {} ms", rejoin.as_millis());
        self.host_figures.lock().unwrap().push(Figures {
            at_ms,
            kind: kind.name(),
            writable_ms,
            rejoin_ms: rejoin.as_millis() as i64,
        });
        Ok(note)
    }
}

/// Do `kind` to the cluster whose primary is on host `primary`: the host whose processes come
/// back after the outage, the old primary a write is tried on while it is cut off or frozen (a
/// single writer), and the outage in seconds.
async fn inject(
    ha: &HaHosts,
    kind: &Kind,
    primary: usize,
) -> anyhow::Result<(Option<usize>, Option<usize>, u64)> {
    let standby = 3 - primary;
    Ok(match kind {
        Kind::HostKill { secs } => {
            ha.kill_host(primary)?;
            (Some(primary), None, *secs)
        }
        Kind::PrimaryKill { secs } => {
            ha.kill_postgres(primary)?;
            (Some(primary), None, *secs)
        }
        Kind::StandbyLost { secs } => {
            ha.kill_host(standby)?;
            (Some(standby), None, *secs)
        }
        Kind::EtcdLost { secs } => {
            ha.kill_host(3)?;
            (Some(3), None, *secs)
        }
        Kind::HostFreeze { secs } => {
            ha.host(primary).freeze()?;
            (None, Some(primary), *secs)
        }
        Kind::HostPartition { secs } => {
            ha.hosts.partition(primary)?;
            (None, Some(primary), *secs)
        }
        Kind::Switchover => {
            ha.switchover(primary, standby).await?;
            (None, None, 0)
        }
        k => bail!("{k} is not a host fault"),
    })
}

/// Write `id` straight on the cut-off or frozen old primary `old` once the new one took over,
/// for at most `outage` (3 s at least): it must never be acknowledged.
async fn old_primary_refuses(
    ha: &HaHosts,
    old: usize,
    id: i64,
    outage: Duration,
) -> anyhow::Result<String> {
    let t0 = Instant::now();
    let attempt = async {
        let c = ha.connect(old, "pmw", "pmwcheck").await?;
        c.execute("INSERT INTO acked VALUES ($1, $2)", &[&id, &now_ms()])
            .await?;
        anyhow::Ok(())
    };
    let limit = outage.max(Duration::from_secs(3));
    let said = match tokio::time::timeout(limit, attempt).await {
        Ok(Ok(())) => bail!("TWO WRITERS: the cut-off old primary h{old} acknowledged a write"),
        Ok(Err(e)) => format!("refused ({})", short(&format!("{e:#}"))),
        Err(_) => format!("unanswered for {} ms", t0.elapsed().as_millis()),
    };
    tokio::time::sleep(outage.saturating_sub(t0.elapsed())).await;
    Ok(format!("old primary write {said}"))
}

fn short(s: &str) -> String {
    s.chars().take(40).collect()
}

/// Time to writable, to the first delivery after the fault (any checked stream) and to the
/// rejoin, per host fault kind: (table, whether any host fault failed).
pub fn table(figures: &[Figures], done: &[Done], streams: &[Stream]) -> (String, bool) {
    let mut out = String::from(
        "| host fault | runs | writable ms (max) | first delivery ms (max) | rejoin ms (max) |\n|---|---|---|---|---|\n",
    );
    let mut kinds: Vec<&str> = figures.iter().map(|f| f.kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    for k in kinds {
        let of: Vec<&Figures> = figures.iter().filter(|f| f.kind == k).collect();
        let first = of
            .iter()
            .filter_map(|f| first_delivery(f.at_ms, streams))
            .max();
        let max = |g: fn(&Figures) -> i64| of.iter().map(|f| g(f)).max().unwrap_or(0);
        let _ = writeln!(
            out,
            "| {k} | {} | {} | {} | {} |",
            of.len(),
            max(|f| f.writable_ms),
            first.map_or("none".into(), |v| v.to_string()),
            max(|f| f.rejoin_ms)
        );
    }
    let failed: Vec<&Done> = done
        .iter()
        .filter(|d| d.fault.kind.is_host())
        .filter(|d| d.note.starts_with("failed") || d.note.starts_with("timed out"))
        .collect();
    for d in &failed {
        let _ = writeln!(
            out,
            "\nFAILED t+{} s {}: {}",
            d.fault.at_s, d.fault.kind, d.note
        );
    }
    (out, !failed.is_empty())
}

/// Ms from `at` to the first delivery, on any checked stream, of a trade detected after `at`.
fn first_delivery(at: i64, streams: &[Stream]) -> Option<i64> {
    streams
        .iter()
        .flat_map(|s| s.deliveries.iter())
        .filter(|&&(d, _)| d >= at)
        .map(|&(_, a)| a - at)
        .min()
}

/// Multi-host mode's hosts, once made: what a signal tears down.
pub static HOSTS: std::sync::Mutex<Option<std::sync::Arc<HaHosts>>> = std::sync::Mutex::new(None);

/// On SIGTERM (`scripts/check`'s time limit) or SIGINT, the multi-host mode's hosts and every
/// member on them are removed before the checker exits (nothing is dropped otherwise). Taken
/// over at start, so a signal during the setup is handled too.
pub fn teardown_on_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return;
    };
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        if let Some(ha) = HOSTS.lock().unwrap().take() {
            println!("signal: removing the hosts");
            ha.teardown();
        }
        std::process::exit(130);
    });
}

#[cfg(test)]
mod tests {
    use crate::schedule::{generate, Kind, Shape};

    fn shape(minutes: u64, hosts: usize, only: &[&str]) -> Shape {
        Shape {
            minutes,
            accounts: 4,
            churn: 2,
            wallets: 6,
            edges: 0,
            hosts,
            host_faults: only.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn multi_host_mode_swaps_the_postgres_restart_for_host_faults_one_slot_apart() {
        let single = generate(3, &shape(30, 0, &[]));
        assert!(single.iter().all(|f| !f.kind.is_host()));
        assert!(single.iter().any(|f| f.kind == Kind::PostgresRestart));
        let multi = generate(3, &shape(30, 3, &[]));
        assert!(multi.iter().all(|f| f.kind != Kind::PostgresRestart));
        let hosts: Vec<_> = multi.iter().filter(|f| f.kind.is_host()).collect();
        for name in [
            "host kill",
            "host freeze",
            "host partition",
            "postgres primary kill",
            "patroni switchover",
            "sync standby lost",
            "etcd member lost",
        ] {
            assert!(hosts.iter().any(|f| f.kind.name() == name), "{name}");
        }
        assert!(hosts.windows(2).all(|w| w[1].at_s - w[0].at_s >= 45));
        assert!(hosts.iter().all(|f| f.kind.lock_name() == "host"));
        assert!(Kind::NAMES.contains(&"host"));
        // The seed's other faults are the same in both modes.
        let rest = |v: &[crate::schedule::Fault]| -> Vec<String> {
            v.iter()
                .filter(|f| !f.kind.is_host() && f.kind != Kind::PostgresRestart)
                .map(|f| format!("{} {}", f.at_s, f.kind))
                .collect()
        };
        assert_eq!(rest(&single), rest(&multi));
    }

    #[test]
    fn a_short_run_does_the_host_faults_asked_for_each_once_inside_the_traffic() {
        let plan = generate(1, &shape(2, 3, &["kill", "partition"]));
        let hosts: Vec<_> = plan.iter().filter(|f| f.kind.is_host()).collect();
        assert_eq!(hosts.len(), 2);
        assert!(hosts
            .iter()
            .any(|f| matches!(f.kind, Kind::HostKill { .. })));
        assert!(hosts
            .iter()
            .any(|f| matches!(f.kind, Kind::HostPartition { .. })));
        assert!(hosts.iter().all(|f| f.at_s >= 15 && f.at_s <= 90));
    }
}

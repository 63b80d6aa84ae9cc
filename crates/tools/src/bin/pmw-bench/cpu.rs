//! CPU time per process, from `/proc/<pid>/stat` (user + system clock ticks): pmw-push and
//! pmw-live (child processes), this process (the load generators: WebSocket clients, webhook
//! receivers, the simulator), and the stack's servers by command name (Postgres and ClickHouse
//! backends, anvil; a reaped child's time counts through its parent's `cutime`/`cstime`). The
//! servers are the shared local stack: on a busy machine their figures include others' load.

use std::sync::OnceLock;

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux when that fails).
fn ticks_per_sec() -> f64 {
    static T: OnceLock<f64> = OnceLock::new();
    *T.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// (command name, utime + stime, cutime + cstime) in ticks, from one `/proc/<pid>/stat` text.
fn parse_stat(text: &str) -> Option<(String, u64, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    // After the command: state is field 3; utime, stime, cutime, cstime are fields 14–17.
    let f: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some((comm, n(11)? + n(12)?, n(13)? + n(14)?))
}

/// CPU seconds a process (all its threads) has used.
pub fn secs(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text).map(|(_, own, _)| own as f64 / ticks_per_sec())
}

/// CPU seconds of every process whose command name starts with one of `prefixes`, their reaped
/// children included, by pid.
pub fn secs_named(prefixes: &[&str]) -> Pids {
    let mut out = Pids::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let pid = e.file_name().to_string_lossy().parse::<u32>();
        if let (Some((comm, own, children)), Ok(pid)) = (parse_stat(&text), pid) {
            if prefixes.iter().any(|p| comm.starts_with(p)) {
                out.insert(pid, (own + children) as f64 / ticks_per_sec());
            }
        }
    }
    out
}

/// CPU seconds by pid.
pub type Pids = std::collections::HashMap<u32, f64>;

/// What the processes of `now` used since `earlier`, per pid: a process that exited in between
/// counts nothing, one that started counts all its time, a counter never goes back (a server
/// restarted by someone else between two samples read as negative seconds before).
fn used(now: &Pids, earlier: &Pids) -> f64 {
    // `+ 0.0`: an empty float sum is -0.0, printed "-0.0".
    now.iter()
        .map(|(p, s)| (s - earlier.get(p).copied().unwrap_or(0.0)).max(0.0))
        .sum::<f64>()
        + 0.0
}

/// CPU seconds used so far by each party of a run.
#[derive(Debug, Clone, Default)]
pub struct Cpu {
    pub push: f64,
    pub live: f64,
    /// This process: the load generators.
    pub generators: f64,
    /// The backends of this run's database, by pid (a backend that exits in between is not
    /// counted: the services keep pooled connections).
    pub backends: Pids,
    /// Every Postgres process of the server (other databases' load included).
    pub postgres: Pids,
    pub clickhouse: Pids,
    pub anvil: Pids,
    /// Edge mode: every pmw-edge process, and the NATS cluster's nodes (by command name).
    pub edges: Pids,
    pub nats: Pids,
}

/// CPU seconds each party used between two samples.
#[derive(Debug, Clone, Default)]
pub struct Used {
    pub push: f64,
    pub live: f64,
    pub generators: f64,
    /// This run's database backends.
    pub run_db: f64,
    pub postgres: f64,
    pub clickhouse: f64,
    pub anvil: f64,
    pub edges: f64,
    pub nats: f64,
}

impl Cpu {
    pub fn sample(push: u32, live: Option<u32>, backends: &[u32]) -> Cpu {
        Cpu {
            push: secs(push).unwrap_or(0.0),
            live: live.and_then(secs).unwrap_or(0.0),
            generators: secs(std::process::id()).unwrap_or(0.0),
            backends: backends
                .iter()
                .filter_map(|p| secs(*p).map(|s| (*p, s)))
                .collect(),
            postgres: secs_named(&["postgres"]),
            clickhouse: secs_named(&["clickhouse"]),
            anvil: secs_named(&["anvil"]),
            edges: secs_named(&["pmw-edge"]),
            nats: secs_named(&["nats-server"]),
        }
    }

    /// What was used between `earlier` and `self`.
    pub fn since(&self, earlier: &Cpu) -> Used {
        Used {
            push: (self.push - earlier.push).max(0.0),
            live: (self.live - earlier.live).max(0.0),
            generators: (self.generators - earlier.generators).max(0.0),
            run_db: used(&self.backends, &earlier.backends),
            postgres: used(&self.postgres, &earlier.postgres),
            clickhouse: used(&self.clickhouse, &earlier.clickhouse),
            anvil: used(&self.anvil, &earlier.anvil),
            edges: used(&self.edges, &earlier.edges),
            nats: used(&self.nats, &earlier.nats),
        }
    }
}

impl Used {
    pub fn total(&self) -> f64 {
        self.push
            + self.live
            + self.generators
            + self.postgres
            + self.clickhouse
            + self.anvil
            + self.edges
            + self.nats
    }

    /// CPU seconds of this run's database backends.
    pub fn run_db(&self) -> f64 {
        self.run_db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        let text =
            "4242 (pmw push) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 75 9 3 20 0 8 0 100 0 0";
        assert_eq!(parse_stat(text), Some(("pmw push".into(), 325, 12)));
        assert_eq!(parse_stat("garbage"), None);
        // This very process has a stat line and a non-negative CPU time.
        assert!(secs(std::process::id()).is_some());
    }

    #[test]
    fn a_process_gone_or_restarted_between_samples_never_counts_negative() {
        let earlier: Pids = [(1, 10.0), (2, 5.0)].into();
        // pid 1 used 2 s, pid 2 exited (its 5 s are not taken back), pid 3 started (1.5 s).
        let now: Pids = [(1, 12.0), (3, 1.5)].into();
        assert_eq!(used(&now, &earlier), 3.5);
        // A reused pid whose counter restarted lower counts nothing rather than a negative.
        let reused: Pids = [(1, 4.0)].into();
        assert_eq!(used(&reused, &earlier), 0.0);
    }
}

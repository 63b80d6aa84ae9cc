//! The fault schedule, generated from `--seed` alone (printed at the start so a failure
//! reproduces): every kind a few times over the run, at random offsets, overlapping freely
//! (faults of one kind run one at a time).

use std::fmt;

use rand::{Rng, SeedableRng};

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// Depth 1–5; mode 0 = fills re-mined in place, 1 = dropped, 2 = moved (all into the last new block).
    Reorg {
        depth: u64,
        mode: u8,
    },
    LeaderKill9,
    LeaderStop {
        secs: u64,
    },
    Deploy,
    LiveRestart,
    ClickHouseStop {
        secs: u64,
    },
    PostgresRestart,
    RpcCut {
        secs: u64,
    },
    /// One of the raced RPC providers (WebSocket and HTTP) unreachable; the other stays.
    ProviderCut {
        provider: usize,
        secs: u64,
    },
    /// One of the raced RPC providers answers and announces `ms` late.
    ProviderLag {
        provider: usize,
        ms: u64,
        secs: u64,
    },
    /// On a churn account.
    EndpointCreate {
        account: usize,
    },
    EndpointDelete {
        account: usize,
    },
    EndpointDisable {
        account: usize,
        secs: u64,
    },
    /// On a checked endpoint (its secret changes; the receiver learns the new one).
    Rotate {
        endpoint: usize,
    },
    SubAdd {
        account: usize,
        wallet: usize,
    },
    SubRemove {
        account: usize,
        wallet: usize,
    },
    KeyRevoke {
        account: usize,
    },
    /// A checked client stops reading.
    SlowConsumer {
        client: usize,
        secs: u64,
    },
    /// Edge mode: `pmw-edge-<edge>` (1-based) killed with SIGKILL (pm2 starts it again).
    EdgeKill9 {
        edge: usize,
    },
    /// Edge mode: `pmw-edge-<edge>` frozen (SIGSTOP), then SIGCONT.
    EdgeStop {
        edge: usize,
        secs: u64,
    },
    /// Edge mode: `scripts/deploy/edge` (every edge drained and restarted, one at a time).
    EdgeDeploy,
    /// Edge mode: a NATS node that does not lead the stream killed (SIGKILL), restarted after
    /// `secs`.
    NatsKill {
        secs: u64,
    },
    /// Edge mode: the NATS node leading the stream killed (SIGKILL), restarted after `secs`.
    NatsLeaderKill {
        secs: u64,
    },
    /// Multi-host mode ([`Kind::is_host`]): every process of the primary's host killed, its
    /// members started again after `secs` (the machine back).
    HostKill {
        secs: u64,
    },
    /// Multi-host mode: every process of the primary's host stopped for `secs` (longer than
    /// Patroni's ttl and the push lease), then thawed.
    HostFreeze {
        secs: u64,
    },
    /// Multi-host mode: the primary's host cut from the other two for `secs` (the checker and
    /// the services still reach it).
    HostPartition {
        secs: u64,
    },
    /// Multi-host mode: the primary's Patroni and Postgres killed (its host stays up), started
    /// again after `secs`.
    PrimaryKill {
        secs: u64,
    },
    /// Multi-host mode: Patroni hands the primary role to the synchronous standby.
    Switchover,
    /// Multi-host mode: the sync standby's host killed whole, back after `secs`.
    StandbyLost {
        secs: u64,
    },
    /// Multi-host mode: the host holding only an etcd member killed, back after `secs`.
    EtcdLost {
        secs: u64,
    },
}

impl Kind {
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Reorg { .. } => "reorg",
            Kind::LeaderKill9 => "leader kill -9",
            Kind::LeaderStop { .. } => "leader SIGSTOP",
            Kind::Deploy => "rolling deploy",
            Kind::LiveRestart => "live restart",
            Kind::ClickHouseStop { .. } => "clickhouse stop",
            Kind::PostgresRestart => "postgres restart",
            Kind::RpcCut { .. } => "rpc ws cut",
            Kind::ProviderCut { .. } => "provider cut",
            Kind::ProviderLag { .. } => "provider lag",
            Kind::EndpointCreate { .. } => "endpoint create",
            Kind::EndpointDelete { .. } => "endpoint delete",
            Kind::EndpointDisable { .. } => "endpoint disable",
            Kind::Rotate { .. } => "secret rotate",
            Kind::SubAdd { .. } => "subscription add",
            Kind::SubRemove { .. } => "subscription remove",
            Kind::KeyRevoke { .. } => "key revoke",
            Kind::SlowConsumer { .. } => "slow consumer",
            Kind::EdgeKill9 { .. } => "edge kill -9",
            Kind::EdgeStop { .. } => "edge SIGSTOP",
            Kind::EdgeDeploy => "edge rolling deploy",
            Kind::NatsKill { .. } => "nats node kill",
            Kind::NatsLeaderKill { .. } => "nats stream leader kill",
            Kind::HostKill { .. } => "host kill",
            Kind::HostFreeze { .. } => "host freeze",
            Kind::HostPartition { .. } => "host partition",
            Kind::PrimaryKill { .. } => "postgres primary kill",
            Kind::Switchover => "patroni switchover",
            Kind::StandbyLost { .. } => "sync standby lost",
            Kind::EtcdLost { .. } => "etcd member lost",
        }
    }

    /// Every kind's name (the checker holds one lock per kind: faults of a kind run one at a
    /// time).
    pub const NAMES: [&'static str; 25] = [
        "reorg",
        "leader kill -9",
        "leader SIGSTOP",
        "rolling deploy",
        "live restart",
        "clickhouse stop",
        "postgres restart",
        "rpc ws cut",
        "provider cut",
        "provider lag",
        "endpoint create",
        "endpoint delete",
        "endpoint disable",
        "secret rotate",
        "subscription add",
        "subscription remove",
        "key revoke",
        "slow consumer",
        "edge kill -9",
        "edge SIGSTOP",
        "edge rolling deploy",
        "nats node kill",
        "nats stream leader kill",
        "host",
        "endpoint",
    ];

    /// The lock a fault of this kind holds while it runs: one per kind, and one for every host
    /// fault together (never two hosts down at once: that is beyond one machine lost).
    pub fn lock_name(&self) -> &'static str {
        match self {
            k if k.is_host() => "host",
            // In multi-host edge mode a host fault takes that host's NATS node: a NATS node
            // fault beside it would be two nodes down (a lost quorum, not claimed).
            Kind::NatsKill { .. } | Kind::NatsLeaderKill { .. } => "host",
            // One account's endpoint list: a disable must not pick the endpoint a delete is
            // removing (its re-enable would meet a 404).
            Kind::EndpointCreate { .. }
            | Kind::EndpointDelete { .. }
            | Kind::EndpointDisable { .. } => "endpoint",
            k => k.name(),
        }
    }

    /// A multi-host fault (a host or a member of the Postgres HA stack).
    pub fn is_host(&self) -> bool {
        matches!(
            self,
            Kind::HostKill { .. }
                | Kind::HostFreeze { .. }
                | Kind::HostPartition { .. }
                | Kind::PrimaryKill { .. }
                | Kind::Switchover
                | Kind::StandbyLost { .. }
                | Kind::EtcdLost { .. }
        )
    }

    /// A host fault that takes a whole host out (killed, frozen or cut off), and with it, in
    /// multi-host edge mode, the edge and the NATS node on it: its clients' sockets may drop.
    pub fn takes_a_host(&self) -> bool {
        matches!(
            self,
            Kind::HostKill { .. }
                | Kind::HostFreeze { .. }
                | Kind::HostPartition { .. }
                | Kind::StandbyLost { .. }
                | Kind::EtcdLost { .. }
        )
    }

    /// A fault that may hold up every webhook delivery while it lasts: the push leader's, or
    /// the store's (Postgres, or a host carrying a share of either).
    pub fn holds_up_webhooks(&self) -> bool {
        self.is_push()
            || self.takes_a_host()
            || matches!(
                self,
                Kind::PostgresRestart | Kind::PrimaryKill { .. } | Kind::Switchover
            )
    }

    /// A fault of the push leader (kill, freeze, deploy): in edge mode it closes no client's
    /// socket.
    pub fn is_push(&self) -> bool {
        matches!(
            self,
            Kind::LeaderKill9 | Kind::LeaderStop { .. } | Kind::Deploy
        )
    }

    /// A fault that may close a client's socket in edge mode (an edge's or the broker's).
    pub fn closes_sockets(&self) -> bool {
        matches!(
            self,
            Kind::EdgeKill9 { .. }
                | Kind::EdgeStop { .. }
                | Kind::EdgeDeploy
                | Kind::NatsKill { .. }
                | Kind::NatsLeaderKill { .. }
        )
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = ["re-mined", "dropped", "moved"];
        match self {
            Kind::Reorg { depth, mode: m } => {
                write!(f, "reorg depth {depth}, fills {}", mode[*m as usize])
            }
            Kind::LeaderStop { secs } => write!(f, "leader SIGSTOP {secs} s"),
            Kind::ClickHouseStop { secs } => write!(f, "clickhouse stop {secs} s"),
            Kind::RpcCut { secs } => write!(f, "rpc ws cut {secs} s"),
            Kind::ProviderCut { provider, secs } => {
                write!(f, "provider cut {secs} s (p{provider})")
            }
            Kind::ProviderLag { provider, ms, secs } => {
                write!(f, "provider lag {ms} ms for {secs} s (p{provider})")
            }
            Kind::EndpointCreate { account } => write!(f, "endpoint create (churn {account})"),
            Kind::EndpointDelete { account } => write!(f, "endpoint delete (churn {account})"),
            Kind::EndpointDisable { account, secs } => {
                write!(f, "endpoint disable {secs} s (churn {account})")
            }
            Kind::Rotate { endpoint } => write!(f, "secret rotate (checked endpoint {endpoint})"),
            Kind::SubAdd { account, wallet } => {
                write!(f, "subscription add wallet {wallet} (churn {account})")
            }
            Kind::SubRemove { account, wallet } => {
                write!(f, "subscription remove wallet {wallet} (churn {account})")
            }
            Kind::KeyRevoke { account } => write!(f, "key revoke (churn {account})"),
            Kind::SlowConsumer { client, secs } => {
                write!(f, "slow consumer {secs} s (checked client {client})")
            }
            Kind::EdgeKill9 { edge } => write!(f, "edge kill -9 (pmw-edge-{edge})"),
            Kind::EdgeStop { edge, secs } => write!(f, "edge SIGSTOP {secs} s (pmw-edge-{edge})"),
            Kind::NatsKill { secs } => write!(f, "nats node kill, back after {secs} s"),
            Kind::NatsLeaderKill { secs } => {
                write!(f, "nats stream leader kill, back after {secs} s")
            }
            Kind::HostKill { secs } => write!(f, "host kill (the primary's), back after {secs} s"),
            Kind::HostFreeze { secs } => write!(f, "host freeze {secs} s (the primary's)"),
            Kind::HostPartition { secs } => {
                write!(f, "host partition {secs} s (the primary's)")
            }
            Kind::PrimaryKill { secs } => {
                write!(f, "postgres primary kill, back after {secs} s")
            }
            Kind::StandbyLost { secs } => write!(f, "sync standby lost, back after {secs} s"),
            Kind::EtcdLost { secs } => write!(f, "etcd member lost, back after {secs} s"),
            k => f.write_str(k.name()),
        }
    }
}

/// RPC providers the checker's live races (`Opts::rpc_providers`). Four, with live's default
/// quorum of 2: two provider faults that overlap still leave two providers to agree on a block.
pub const PROVIDERS: usize = 4;

#[derive(Clone, Debug)]
pub struct Fault {
    /// Seconds after the traffic starts.
    pub at_s: u64,
    pub kind: Kind,
}

/// The run a schedule is drawn for.
pub struct Shape {
    pub minutes: u64,
    /// Checked accounts.
    pub accounts: usize,
    /// Churn accounts.
    pub churn: usize,
    pub wallets: usize,
    /// Edge mode's edges (0: not edge mode).
    pub edges: usize,
    /// Multi-host mode's hosts (0: one host, a single Postgres).
    pub hosts: usize,
    /// Multi-host mode: the host faults to do, by [`crate::host_faults::TOKENS`] token (empty: all).
    pub host_faults: Vec<String>,
}

type Seeded = rand::rngs::StdRng;
/// A kind's rate per three minutes and how to draw one.
type Make = (f64, fn(&mut Seeded, &Shape) -> Kind);

/// `per_3min` faults of each kind per three minutes (at least one each), between 15 s and
/// 20 s before the end; with `edges` > 0 (edge mode) the edges' and the broker's faults too
/// (a seed's other faults are the same in both modes).
pub fn generate(seed: u64, shape: &Shape) -> Vec<Fault> {
    let mut rng = Seeded::seed_from_u64(seed);
    let span = (shape.minutes * 60).max(60);
    let mut out = Vec::new();
    draw(&mut rng, span, &KINDS, shape, &mut out);
    if shape.edges > 0 {
        draw(&mut rng, span, &EDGE_KINDS, shape, &mut out);
    }
    if shape.hosts > 0 {
        // Postgres is the HA cluster: its faults are the host faults.
        out.retain(|f| f.kind != Kind::PostgresRestart);
        out.extend(crate::host_faults::plan(&mut rng, span, &shape.host_faults));
    }
    out.sort_by_key(|f| f.at_s);
    out
}

/// Each of `kinds` at its rate over `span` seconds, at times between 15 s and 20 s before the
/// end, appended to `out`.
fn draw(rng: &mut Seeded, span: u64, kinds: &[Make], shape: &Shape, out: &mut Vec<Fault>) {
    let (lo, hi) = (15, span.saturating_sub(20).max(20));
    let scale = |per_3min: f64| ((per_3min * span as f64 / 180.0).round() as usize).max(1);
    for (rate, make) in kinds {
        for _ in 0..scale(*rate) {
            let at_s = rng.gen_range(lo..=hi);
            out.push(Fault {
                at_s,
                kind: make(rng, shape),
            });
        }
    }
}

/// The faults of every run.
const KINDS: [Make; 18] = [
    (4.0, |r, _| Kind::Reorg {
        depth: r.gen_range(1..=5),
        mode: r.gen_range(0..3),
    }),
    (2.0, |_, _| Kind::LeaderKill9),
    (1.0, |r, _| Kind::LeaderStop {
        secs: r.gen_range(3..=20),
    }),
    (1.0, |_, _| Kind::Deploy),
    (2.0, |_, _| Kind::LiveRestart),
    (1.0, |r, _| Kind::ClickHouseStop {
        secs: r.gen_range(2..=10),
    }),
    (1.0, |_, _| Kind::PostgresRestart),
    (2.0, |r, _| Kind::RpcCut {
        secs: r.gen_range(1..=8),
    }),
    (2.0, |r, _| Kind::ProviderCut {
        provider: r.gen_range(0..PROVIDERS),
        secs: r.gen_range(5..=30),
    }),
    (2.0, |r, _| Kind::ProviderLag {
        provider: r.gen_range(0..PROVIDERS),
        ms: r.gen_range(100..=1_000),
        secs: r.gen_range(5..=30),
    }),
    (2.0, |r, s| Kind::EndpointCreate {
        account: r.gen_range(0..s.churn),
    }),
    (2.0, |r, s| Kind::EndpointDelete {
        account: r.gen_range(0..s.churn),
    }),
    (1.0, |r, s| Kind::EndpointDisable {
        account: r.gen_range(0..s.churn),
        secs: r.gen_range(2..=10),
    }),
    (1.0, |r, s| Kind::Rotate {
        endpoint: r.gen_range(0..s.accounts),
    }),
    (3.0, |r, s| Kind::SubAdd {
        account: r.gen_range(0..s.churn),
        wallet: r.gen_range(0..s.wallets),
    }),
    (3.0, |r, s| Kind::SubRemove {
        account: r.gen_range(0..s.churn),
        wallet: r.gen_range(0..s.wallets),
    }),
    (1.0, |r, s| Kind::KeyRevoke {
        account: r.gen_range(0..s.churn),
    }),
    (2.0, |r, s| Kind::SlowConsumer {
        client: r.gen_range(0..s.accounts),
        secs: r.gen_range(2..=15),
    }),
];

/// Edge mode's faults: the edges' and the broker's.
const EDGE_KINDS: [Make; 5] = [
    (2.0, |r, s| Kind::EdgeKill9 {
        edge: r.gen_range(1..=s.edges),
    }),
    (1.0, |r, s| Kind::EdgeStop {
        edge: r.gen_range(1..=s.edges),
        secs: r.gen_range(3..=15),
    }),
    (1.0, |_, _| Kind::EdgeDeploy),
    (1.0, |r, _| Kind::NatsKill {
        secs: r.gen_range(3..=20),
    }),
    (1.0, |r, _| Kind::NatsLeaderKill {
        secs: r.gen_range(3..=20),
    }),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_mode_adds_the_edge_and_broker_faults_and_keeps_the_rest_of_the_seed() {
        let shape = |edges| Shape {
            minutes: 3,
            accounts: 4,
            churn: 2,
            wallets: 6,
            edges,
            hosts: 0,
            host_faults: Vec::new(),
        };
        let one = generate(7, &shape(0));
        let edge = generate(7, &shape(3));
        let push_side: Vec<String> = edge
            .iter()
            .filter(|f| !f.kind.closes_sockets())
            .map(|f| format!("{} {}", f.at_s, f.kind))
            .collect();
        let single: Vec<String> = one
            .iter()
            .map(|f| format!("{} {}", f.at_s, f.kind))
            .collect();
        assert_eq!(push_side, single);
        assert!(one.iter().all(|f| !f.kind.closes_sockets()));
        for name in [
            "edge kill -9",
            "edge SIGSTOP",
            "edge rolling deploy",
            "nats node kill",
            "nats stream leader kill",
        ] {
            assert!(
                edge.iter().any(|f| f.kind.name() == name),
                "{name} not scheduled"
            );
        }
        assert!(edge.iter().all(|f| Kind::NAMES.contains(&f.kind.name())));
        assert!(edge.iter().all(|f| match f.kind {
            Kind::EdgeKill9 { edge } | Kind::EdgeStop { edge, .. } => (1..=3).contains(&edge),
            _ => true,
        }));
    }

    /// The checker takes `locks[lock_name]` for every fault: a lock missing from `NAMES` panics
    /// the fault's task (endpoint faults once ran nowhere for that reason).
    #[test]
    fn every_scheduled_fault_has_its_lock() {
        for seed in 0..40 {
            for (edges, hosts) in [(0, 0), (3, 0), (0, 3), (3, 3)] {
                let shape = Shape {
                    minutes: 3,
                    accounts: 4,
                    churn: 2,
                    wallets: 6,
                    edges,
                    hosts,
                    host_faults: Vec::new(),
                };
                for f in generate(seed, &shape) {
                    let lock = f.kind.lock_name();
                    assert!(Kind::NAMES.contains(&lock), "{}: no lock {lock}", f.kind);
                }
            }
        }
    }
}

//! The Postgres HA stack as the HA tests drive it (`scripts/stack up ha`: two Patroni members
//! and a 3-member etcd on ports and a state dir of their own, never the shared stack): which
//! member is the primary, a switchover through Patroni's REST API, a member killed whole (its
//! Patroni and its postmaster, SIGKILL), and writes through a pmw pool timed to writable.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pmw_core::config::CoreConfig;
use pmw_core::pg::{self, PgPool};
use pmw_testkit::{eventually, ha_stack_env, StackEnv, TestDb};
use tokio_postgres::NoTls;

use super::liveness::{signal, Frozen};

/// How long a failover may take before a test gives up (Patroni's ttl is 10 s).
pub const FAILOVER_WITHIN: Duration = Duration::from_secs(60);

pub struct Ha {
    pub env: StackEnv,
    dir: PathBuf,
    pub pg_ports: Vec<u16>,
    rest_ports: Vec<u16>,
}

fn ports(s: &str) -> Vec<u16> {
    s.split_whitespace().map(|p| p.parse().unwrap()).collect()
}

impl Ha {
    /// Every member up, a primary with a synchronous standby (`scripts/stack up ha` waits).
    pub fn up() -> Ha {
        let env = ha_stack_env();
        Ha {
            dir: PathBuf::from(env.get("PMW_HA_DIR")),
            pg_ports: ports(env.get("PMW_HA_PG_PORTS")),
            rest_ports: ports(env.get("PMW_HA_REST_PORTS")),
            env,
        }
    }

    /// [`Ha::up`] from a test under way: on a blocking thread, so the runtime's tasks (the
    /// liveness probes among them) keep running. Run inline, the restart stalled them for
    /// seconds, and a probe that then found every answer late took the primary for lost and
    /// ended the test's sessions.
    pub async fn up_again() -> Ha {
        tokio::task::spawn_blocking(Ha::up)
            .await
            .expect("scripts/stack up ha")
    }

    /// A superuser connection to member `i` (0-based), any role.
    pub async fn admin(&self, i: usize) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let url = format!(
            "postgres://postgres@127.0.0.1:{}/postgres?connect_timeout=2",
            self.pg_ports[i]
        );
        let (client, conn) = tokio_postgres::connect(&url, NoTls).await?;
        tokio::spawn(conn);
        Ok(client)
    }

    pub async fn writable(&self, i: usize) -> bool {
        match self.admin(i).await {
            Ok(c) => c
                .query_one("SHOW transaction_read_only", &[])
                .await
                .map(|r| r.get::<_, String>(0) == "off")
                .unwrap_or(false),
            Err(_) => false,
        }
    }

    /// The member that takes writes now (waits for one).
    pub async fn primary(&self) -> usize {
        eventually(FAILOVER_WITHIN, || async {
            for i in 0..self.pg_ports.len() {
                if self.writable(i).await {
                    return Some(i);
                }
            }
            None
        })
        .await
        .expect("a writable primary")
    }

    /// Patroni's view: the member names of each role (`leader`, `sync_standby`, `replica`).
    pub async fn roles(&self) -> Vec<(String, String)> {
        for port in &self.rest_ports {
            let Ok(r) = reqwest::get(format!("http://127.0.0.1:{port}/cluster")).await else {
                continue;
            };
            let Ok(v) = r.json::<serde_json::Value>().await else {
                continue;
            };
            return v["members"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| {
                    (
                        m["name"].as_str().unwrap_or("").to_string(),
                        m["role"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
        }
        Vec::new()
    }

    /// The sum over the members that answer of Patroni's `/metrics` gauge `name` (what
    /// Prometheus' job `patroni` scrapes; a dead member answers nothing).
    pub async fn metric_sum(&self, name: &str) -> f64 {
        let mut sum = 0.0;
        for port in &self.rest_ports {
            let Ok(r) = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await else {
                continue;
            };
            let text = r.text().await.unwrap_or_default();
            sum += text
                .lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>();
        }
        sum
    }

    /// Ask Patroni to hand the primary role from member `from` to member `to` (returns once
    /// Patroni answered; the new primary may still be promoting).
    pub async fn switchover(&self, from: usize, to: usize) {
        let body = serde_json::json!({"leader": format!("pg{}", from + 1), "candidate": format!("pg{}", to + 1)});
        let r = reqwest::Client::new()
            .post(format!(
                "http://127.0.0.1:{}/switchover",
                self.rest_ports[from]
            ))
            .json(&body)
            .send()
            .await
            .expect("patroni rest api");
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        assert!(status.is_success(), "switchover refused: {status} {text}");
    }

    /// SIGKILL member `i` whole: its Patroni, then its postmaster (backends follow it).
    pub fn kill(&self, i: usize) {
        let patroni = self.dir.join(format!("pg{}.pid", i + 1));
        let postmaster = self.dir.join(format!("pg{}/postmaster.pid", i + 1));
        for f in [patroni, postmaster] {
            signal("-KILL", &[pid_in(&f)]);
        }
    }

    /// SIGSTOP member `i`'s Patroni alone (its Postgres runs on): its leader key runs out, and
    /// nothing demotes its Postgres. SIGCONT when the guard drops
    /// ([`Frozen`]).
    pub fn stop_patroni(&self, i: usize) -> Frozen {
        Frozen::stop(vec![pid_in(&self.dir.join(format!("pg{}.pid", i + 1)))])
    }

    /// A configuration of `db` whose URL lists member `first` first (read-write alone picks it
    /// while it takes writes), with Patroni's REST APIs (same order) or without.
    pub fn first_in_url(&self, db: &TestDb, first: usize, patroni: bool) -> CoreConfig {
        let order = [first, 1 - first];
        let hosts: Vec<String> = order
            .iter()
            .map(|&i| format!("127.0.0.1:{}", self.pg_ports[i]))
            .collect();
        let mut cfg = db.cfg.clone();
        cfg.postgres_url = format!("postgres://pmw@{}/{}", hosts.join(","), db.name).into();
        cfg.postgres_patroni_urls = patroni.then(|| {
            order
                .iter()
                .map(|&i| format!("http://127.0.0.1:{}", self.rest_ports[i]))
                .collect::<Vec<_>>()
                .join(",")
        });
        cfg
    }
}

/// The pid on the first line of `f`.
fn pid_in(f: &std::path::Path) -> String {
    std::fs::read_to_string(f)
        .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string()
}

/// One acknowledged write through `pool`: insert `id` into `acked` (again is fine: an attempt
/// given up may have landed), and the port of the server that took it.
pub async fn write(pool: &PgPool, id: i64) -> Result<u16, String> {
    let c = pool.get().await.map_err(|e| e.to_string())?;
    let row = c
        .query_one(
            "INSERT INTO acked (id) VALUES ($1) \
             ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id RETURNING inet_server_port()",
            &[&id],
        )
        .await
        .map_err(|e| pg::describe(&e))?;
    Ok(row.get::<_, i32>(0) as u16)
}

/// Write `id` through `pool` until it is acknowledged: the port that took it and the time from
/// `since` (the fault) to that acknowledgement, the time to writable. An attempt that hangs (a
/// commit waiting for a standby that is gone) is given up after 5 s and counts as refused.
pub async fn write_until_acknowledged(pool: &PgPool, id: i64, since: Instant) -> (u16, Duration) {
    let attempt = || async {
        tokio::time::timeout(Duration::from_secs(5), write(pool, id))
            .await
            .unwrap_or_else(|_| Err("no answer within 5 s".to_string()))
    };
    let port = eventually(FAILOVER_WITHIN, attempt)
        .await
        .unwrap_or_else(|e| panic!("no write acknowledged within {FAILOVER_WITHIN:?}: {e}"));
    (port, since.elapsed())
}

/// The ids of `acked` as the primary has them now.
pub async fn acked_ids(pool: &PgPool) -> Vec<i64> {
    let c = pool.get().await.expect("pool");
    c.query("SELECT id FROM acked ORDER BY id", &[])
        .await
        .expect("read acked")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

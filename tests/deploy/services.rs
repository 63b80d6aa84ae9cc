//! The pmw services under the test's systemd manager: a private database and chain, a stream of
//! its own on the shared NATS cluster for the edge, the environment files the production units
//! read, and what the supervision test observes (a unit's pid, restart count and state; when a
//! restarted service serves again).

use std::time::{Duration, Instant};

use pmw_core::UnixMs;
use pmw_session::bus::{Bus, BusAccess, BusConfig};
use pmw_sim::anvil::Anvil;
use pmw_testkit::{eventually, eventually_every, free_port, TestDb};

use crate::systemd::{write_env, Systemd, UNITS};

/// "Came back" bound: generous, this is not a timing assertion.
pub const WITHIN: Duration = Duration::from_secs(60);

/// A unit as systemd reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    pub pid: i64,
    pub restarts: i64,
    pub active: String,
}

/// The services of `deploy/systemd` running under a real manager.
pub struct Host {
    pub sd: Systemd,
    pub db: TestDb,
    _anvil: Anvil,
    pub api: u16,
    pub stats: u16,
    /// The edge's listen port (`/health`).
    pub edge: u16,
    /// Last: dropped once the manager (and the edge) stopped.
    _stream: EdgeStream,
}

/// The edge's stream on the shared NATS cluster, no other test's (push here does not publish:
/// the edge follows an empty stream, which is enough to serve), made here as push would make it
/// (an edge may not create a stream) and deleted on drop (by the operator).
struct EdgeStream(BusConfig);

impl EdgeStream {
    fn new() -> EdgeStream {
        let tag = format!("{:08x}", rand::random::<u32>());
        let op = pmw_testkit::nats_role("operator");
        let config = BusConfig::named(
            pmw_testkit::nats_urls(),
            &format!("PMW_SD_{tag}"),
            &format!("pmwsd{tag}"),
        )
        .with_access(BusAccess::new(&op.user, &op.password, op.ca.clone()));
        let made = on_the_side(config.clone(), |bus| async move {
            pmw_session::bus::stream::ensure(&bus).await
        });
        assert!(matches!(made, Some(Ok(()))), "the edge's stream: {made:?}");
        EdgeStream(config)
    }

    fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("PMW_EDGE_NATS_URLS".into(), self.0.urls.join(",")),
            ("PMW_EDGE_NATS_STREAM".into(), self.0.stream.clone()),
            ("PMW_EDGE_NATS_PREFIX".into(), self.0.prefix.clone()),
            (
                "PMW_BUS_VERIFY_KEYS".into(),
                pmw_session::bus::sign::generate("deploy").unwrap().1,
            ),
        ];
        env.extend(pmw_testkit::nats_role("edge").env("EDGE"));
        env
    }
}

/// `f` on a bus connected with `config`, on a runtime of its own in a thread of its own (a
/// runtime cannot be blocked on from inside the test's); `None` if it cannot connect.
fn on_the_side<F, T>(config: BusConfig, f: impl FnOnce(Bus) -> F + Send + 'static) -> Option<T>
where
    F: std::future::Future<Output = T>,
    T: Send + 'static,
{
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let bus = Bus::connect(config, "pmw-test").await.ok()?;
            Some(f(bus).await)
        })
    })
    .join()
    .expect("thread")
}

impl Drop for EdgeStream {
    fn drop(&mut self) {
        let stream = self.0.stream.clone();
        let _ = on_the_side(self.0.clone(), |bus| async move {
            let _ = bus.js.delete_stream(&stream).await;
        });
    }
}

impl Host {
    /// Start a manager with the production units and every service; wait until all run.
    pub async fn start() -> Host {
        let sd = Systemd::start();
        sd.install_units();
        let db = TestDb::new().await;
        let anvil = Anvil::spawn_with(&["--block-time", "1"]).await.unwrap();
        let (api, stats, edge) = (free_port(), free_port(), free_port());
        let stream = EdgeStream::new();
        // The broker's CA, where the edge's sandbox (PrivateTmp=) can read it: in production
        // it is a file under /etc/pmw.
        if let Some(ca) = pmw_testkit::nats_role("edge").ca {
            sd.drop_in(
                "pmw-edge@.service",
                "20-nats-ca",
                &format!("[Service]\nBindReadOnlyPaths={}\n", ca.display()),
            );
            sd.ok(&["daemon-reload"]);
        }
        let mut env = db.env();
        env.retain(|(k, _)| !k.starts_with("PMW_RPC"));
        env.extend([
            ("PMW_RPC_WS_URL".to_string(), anvil.ws_url()),
            ("PMW_RPC_HTTP_URL".to_string(), anvil.http_url()),
            ("PMW_LIVE_POLL_INTERVAL_MS".into(), "200".into()),
            ("PMW_GAMMA_URL".into(), "http://127.0.0.1:9".into()),
            ("PMW_PUSH_LOCK_SEGMENT_MS".into(), "1000".into()),
            ("PMW_API_LISTEN".into(), format!("127.0.0.1:{api}")),
        ]);
        env.extend(stream.env());
        write_env(&sd.env_dir().join("pmw.env"), &env);
        for i in ["a", "b"] {
            write_env(
                &sd.env_dir().join(format!("push-{i}.env")),
                &[(
                    "PMW_PUSH_LISTEN".into(),
                    format!("127.0.0.1:{}", free_port()),
                )],
            );
        }
        // The live and stats pairs' a members (the units run without their b members here).
        write_env(
            &sd.env_dir().join("live-a.env"),
            &[(
                "PMW_LIVE_METRICS_ADDR".into(),
                format!("127.0.0.1:{}", free_port()),
            )],
        );
        write_env(
            &sd.env_dir().join("stats-a.env"),
            &[
                ("PMW_STATS_LISTEN".into(), format!("127.0.0.1:{stats}")),
                (
                    "PMW_STATS_METRICS_ADDR".into(),
                    format!("127.0.0.1:{}", free_port()),
                ),
            ],
        );
        write_env(
            &sd.env_dir().join("edge-1.env"),
            &[
                ("PMW_EDGE_LISTEN".into(), format!("127.0.0.1:{edge}")),
                (
                    "PMW_EDGE_METRICS_ADDR".into(),
                    format!("127.0.0.1:{}", free_port()),
                ),
            ],
        );
        let mut start = vec!["start"];
        start.extend(UNITS);
        sd.ok(&start);
        let h = Host {
            sd,
            db,
            _anvil: anvil,
            api,
            stats,
            edge,
            _stream: stream,
        };
        for unit in UNITS {
            let s = h.state(unit);
            assert!(
                s.pid > 0 && s.active == "active",
                "{unit}: {s:?}: {}",
                h.sd.diagnostics()
            );
        }
        h
    }

    pub fn state(&self, unit: &str) -> State {
        let p = self.sd.show(unit);
        let n = |k: &str| p.get(k).and_then(|v| v.parse().ok()).unwrap_or(-1);
        State {
            pid: n("MainPID"),
            restarts: n("NRestarts"),
            active: p.get("ActiveState").cloned().unwrap_or_default(),
        }
    }

    /// Wait until `unit` is `active` (`activating`, `failed`, …).
    pub async fn wait_active(&self, unit: &str, active: &str) -> State {
        let polled = eventually(WITHIN, || async {
            let s = self.state(unit);
            if s.active == active {
                Ok(s)
            } else {
                Err(s)
            }
        })
        .await;
        polled.unwrap_or_else(|s| panic!("{unit} never {active}: {s:?}: {}", self.sd.diagnostics()))
    }

    /// Wait until `unit` runs again under a new pid, restarted by systemd once more.
    pub async fn restarted(&self, unit: &str, before: &State) -> State {
        let polled = eventually_every(WITHIN, Duration::from_millis(20), || async {
            let s = self.state(unit);
            let back = s.pid > 0
                && s.pid != before.pid
                && s.restarts > before.restarts
                && s.active == "active";
            if back {
                Ok(s)
            } else {
                Err(s)
            }
        })
        .await;
        polled.unwrap_or_else(|s| {
            panic!(
                "systemd did not bring {unit} back: {s:?} (before {before:?}): {}",
                self.sd.diagnostics()
            )
        })
    }

    /// The push leader's instance (`push-a`/`push-b`), once there is one.
    pub async fn leader(&self) -> String {
        let leader = eventually_every(WITHIN, Duration::from_millis(100), || async {
            let c = self.db.connect().await;
            c.query_opt("SELECT leader FROM push_epoch WHERE slot = 0", &[])
                .await
                .unwrap()
                .map(|r| r.get::<_, String>(0))
        })
        .await;
        leader.expect("no push leader")
    }

    /// Wait until `unit`'s service, now process `pid`, serves: live ingests, push waits on the
    /// lock as the standby, the API answers `/v1/health`, stats serves its figures, the edge
    /// answers `/health` (it follows the stream and listens).
    pub async fn serving(&self, unit: &str, pid: i64, since_ms: i64) {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let serves = || async {
            let url = match unit {
                "pmw-api.service" => Some(format!("http://127.0.0.1:{}/v1/health", self.api)),
                "pmw-stats@a.service" => {
                    Some(format!("http://127.0.0.1:{}/latency.json", self.stats))
                }
                "pmw-edge@1.service" => Some(format!("http://127.0.0.1:{}/health", self.edge)),
                _ => None,
            };
            match url {
                Some(url) => http.get(url).send().await.is_ok_and(|r| r.status() == 200),
                None => {
                    let (service, instance, state) = match unit {
                        "pmw-live@a.service" => ("pmw-live", "live-a".to_string(), "leader"),
                        push => (
                            "pmw-push",
                            push.trim_end_matches(".service")
                                .replace("pmw-push@", "push-"),
                            "standby",
                        ),
                    };
                    self.db
                        .connect()
                        .await
                        .query_opt(
                            "SELECT 1 FROM heartbeats WHERE service = $1 AND instance = $2 \
                             AND pid = $3 AND beat_ms >= $4 \
                             AND coalesce(state->>'role', state->>'state') = $5",
                            &[&service, &instance, &(pid as i32), &since_ms, &state],
                        )
                        .await
                        .unwrap()
                        .is_some()
                }
            }
        };
        assert!(
            eventually(WITHIN, serves).await,
            "{unit} (pid {pid}) never served again: {}",
            self.sd.diagnostics()
        );
    }

    /// Kill `unit`'s process with `sig`; wait until it runs again and serves. Returns the
    /// figures: kill → the new process runs, kill → it serves.
    pub async fn kill_and_measure(&self, unit: &str, sig: &str) -> String {
        let before = self.state(unit);
        assert_eq!(before.active, "active", "{unit}: {before:?}");
        let since = UnixMs::now().0;
        let t0 = Instant::now();
        pmw_tools::kill(before.pid, sig);
        let after = self.restarted(unit, &before).await;
        let running = t0.elapsed().as_millis();
        self.serving(unit, after.pid, since).await;
        let m = format!(
            "{} SIG{sig}: running {running} ms, serving {} ms",
            unit.trim_end_matches(".service"),
            t0.elapsed().as_millis()
        );
        println!("systemd supervision: {m}");
        m
    }

    /// `unit` stays down for 5 s: not running, no restart.
    pub async fn stays_down(&self, unit: &str) -> State {
        let first = self.state(unit);
        for _ in 0..25 {
            let s = self.state(unit);
            assert!(
                !matches!(s.active.as_str(), "active" | "activating")
                    && s.pid == 0
                    && s.restarts == first.restarts,
                "{unit} must stay down: {s:?}: {}",
                self.sd.diagnostics()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        first
    }
}

//! pm2's restart contract on the production ecosystem (pm2 7.0.4 from tools/pm2, this build):
//! every service killed by a signal comes back with a new pid (kill -9 of each while it is busy
//! under sim traffic, as the OOM killer does it; SIGSEGV, SIGABRT, SIGHUP), and so do exit 0 on
//! its own and exit 75; a killed push leader returns as the standby; `pm2 stop` and exit 78 stay
//! down; the API's pair keeps answering through Caddy while one member is frozen or stopped.
//! The restart times (kill → online under a new pid, and → serving) are printed and written
//! into docs/OPERATIONS.md.

use std::time::{Duration, Instant};

use pmw_core::UnixMs;
use pmw_sim::RunConfig;
use pmw_testkit::{assert_eventually, eventually, eventually_every, repo_root};
use pmw_tools::verdict;
use tokio_util::sync::CancellationToken;

use crate::harness::{exits, signal, App, Drill, Opts};

/// "Came back" bound: generous, this is not a timing assertion.
const BACK_WITHIN: Duration = Duration::from_secs(60);
/// How long a service that must stay down is watched.
const STAYS_DOWN: Duration = Duration::from_secs(5);

/// One restart: what was done, kill → pm2 started the new process, kill → it serves again.
struct Measured {
    what: String,
    online_ms: i64,
    ready_ms: u128,
}

impl std::fmt::Display for Measured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: online {} ms, serving {} ms",
            self.what, self.online_ms, self.ready_ms
        )
    }
}

/// Poll `url` until it answers 200.
async fn http_200(url: &str, within: Duration) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let polled = eventually(within, || async {
        match http.get(url).send().await.map(|r| r.status().as_u16()) {
            Ok(200) => Ok(()),
            other => Err(other),
        }
    })
    .await;
    if let Err(status) = polled {
        panic!("{url} never answered 200: {status:?}");
    }
}

/// Wait until the restarted `app` (pid `back.pid`) serves again: live ingests (a heartbeat of the
/// new pid), push waits on the lock as the standby, the API answers `/v1/health`, stats serves
/// its figures.
async fn serving(d: &Drill, back: &App, since_ms: i64) {
    match back.name.as_str() {
        "pmw-live" => {
            let polled = eventually(BACK_WITHIN, || async {
                let beat =
                    d.db.connect()
                        .await
                        .query_opt(
                            "SELECT pid, beat_ms, coalesce(state->>'state', '') FROM heartbeats \
                         WHERE service = 'pmw-live'",
                            &[],
                        )
                        .await
                        .unwrap()
                        .map(|r| {
                            (
                                r.get::<_, i32>(0),
                                r.get::<_, i64>(1),
                                r.get::<_, String>(2),
                            )
                        });
                let ingesting = beat.as_ref().is_some_and(|(pid, at, state)| {
                    i64::from(*pid) == back.pid && *at >= since_ms && state == "ingesting"
                });
                if ingesting {
                    Ok(())
                } else {
                    Err(beat)
                }
            })
            .await;
            if let Err(beat) = polled {
                panic!("pmw-live never ingested again: {beat:?}");
            }
        }
        "pmw-api" => {
            http_200(
                &format!("http://127.0.0.1:{}/v1/health", d.api_port),
                BACK_WITHIN,
            )
            .await
        }
        "pmw-stats" => {
            http_200(
                &format!("http://127.0.0.1:{}/latency.json", d.stats_port),
                BACK_WITHIN,
            )
            .await
        }
        push => {
            let instance = push.trim_start_matches("pmw-");
            d.wait_push_role(instance, "standby", back.pid, since_ms, BACK_WITHIN)
                .await
        }
    }
}

/// Kill `app` with `sig` (or end it with `how`), then wait until pm2 restarted it and it serves.
async fn kill_and_measure(d: &Drill, app: &str, sig: &str) -> Measured {
    let before = d.pm2.app(app);
    assert_eq!(before.status, "online", "{before:?}");
    let killed_ms = UnixMs::now().0;
    let t0 = Instant::now();
    signal(before.pid, sig);
    let back = d.pm2.wait_back(&before, BACK_WITHIN).await;
    serving(d, &back, killed_ms).await;
    let m = Measured {
        what: format!("{app} SIG{sig}"),
        online_ms: back.started_ms - killed_ms,
        ready_ms: t0.elapsed().as_millis(),
    };
    println!("supervision: {m}");
    m
}

/// The push instance that is not `instance`.
fn other(instance: &str) -> &'static str {
    if instance == "push-a" {
        "push-b"
    } else {
        "push-a"
    }
}

/// pm2's log lines of `app` exiting by signal `sig`.
fn signal_exits(d: &Drill, app: &str, sig: &str) -> usize {
    let log = std::fs::read_to_string(d.pm2.home.path().join("pm2.log")).unwrap_or_default();
    log.lines()
        .filter(|l| {
            l.contains(&format!("App [{app}:")) && l.contains(&format!("via signal [SIG{sig}]"))
        })
        .count()
}

/// Watch `app` for [`STAYS_DOWN`]: never online, no new pid, no restart.
async fn stays_down(d: &Drill, app: &str, restarts: i64) -> App {
    let deadline = Instant::now() + STAYS_DOWN;
    loop {
        let now = d.pm2.app(app);
        assert!(
            now.status != "online" && now.pid == 0 && now.restarts == restarts,
            "{app} must stay down: {now:?}"
        );
        if Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// 20 authenticated API calls through Caddy, 100 ms apart, each given 2 s: (answered, of
/// which 200).
async fn api_through_caddy(d: &Drill) -> (usize, usize) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let (mut answered, mut ok) = (0, 0);
    for _ in 0..20 {
        let r = http
            .get(format!("http://127.0.0.1:{}/v1/me", d.site))
            .bearer_auth(&d.accounts[0].0)
            .send()
            .await;
        if let Ok(r) = r {
            answered += 1;
            ok += usize::from(r.status().as_u16() == 200);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (answered, ok)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pm2_restarts_every_service_killed_by_a_signal_and_keeps_stops_and_78_down() {
    let d = Drill::start_with(Opts {
        apps: Some("pmw-live,pmw-push-a,pmw-push-b,pmw-api,pmw-api-b,pmw-stats"),
        ..Opts::default()
    })
    .await;
    // Busy: trades flow through every kill (the OOM killer strikes a process under load).
    let stop_traffic = CancellationToken::new();
    let traffic = d.sim.spawn(
        RunConfig {
            matches_per_block: 2,
            interval: Duration::from_millis(100),
            count: None,
            duration: Some(Duration::from_secs(600)),
        },
        stop_traffic.clone(),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leader = d.leader().await;
    let standby = other(&leader);
    let mut measured = Vec::new();

    // kill -9 of each service in turn, under load.
    measured.push(kill_and_measure(&d, "pmw-live", "KILL").await);
    measured.push(kill_and_measure(&d, &format!("pmw-{standby}"), "KILL").await);
    measured.push(kill_and_measure(&d, &format!("pmw-{leader}"), "KILL").await);
    assert_eq!(
        d.leader().await,
        standby,
        "the standby took over from the killed leader, which came back as the standby"
    );
    measured.push(kill_and_measure(&d, "pmw-api", "KILL").await);
    measured.push(kill_and_measure(&d, "pmw-stats", "KILL").await);
    // Other signal deaths, and a SIGTERM that did not come from pm2 (exit 0 on its own).
    measured.push(kill_and_measure(&d, "pmw-api", "SEGV").await);
    measured.push(kill_and_measure(&d, "pmw-stats", "ABRT").await);
    measured.push(kill_and_measure(&d, &format!("pmw-{leader}"), "HUP").await);
    measured.push(kill_and_measure(&d, "pmw-live", "TERM").await);
    for (app, sig) in [
        ("pmw-live", "KILL"),
        ("pmw-api", "KILL"),
        ("pmw-api", "SEGV"),
        ("pmw-stats", "ABRT"),
    ] {
        assert!(
            signal_exits(&d, app, sig) >= 1,
            "pm2.log records {app} dying by SIG{sig}"
        );
    }

    // Exit 75: live's lock session terminated; it exits 75 and pm2 restarts it at once.
    let before = d.pm2.app("pmw-live");
    let killed_ms = UnixMs::now().0;
    let t0 = Instant::now();
    let terminated: i64 =
        d.db.connect()
            .await
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'pmw-live:lock' AND datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
    assert_eq!(terminated, 1, "live holds its lock on one session");
    let back = d.pm2.wait_back(&before, BACK_WITHIN).await;
    serving(&d, &back, killed_ms).await;
    let m = Measured {
        what: "pmw-live exit 75 (lock session terminated)".into(),
        online_ms: back.started_ms - killed_ms,
        ready_ms: t0.elapsed().as_millis(),
    };
    println!("supervision: {m}");
    measured.push(m);
    assert!(exits(&d.pm2, "pmw-live", 75) >= 1, "pmw-live exited 75");

    // `pm2 stop` of the standby: it stays stopped, and the missing standby is visible (ready
    // stays 200 and says so; pmwctl status warns).
    let standby_now = other(&d.leader().await);
    let app = format!("pmw-{standby_now}");
    let before = d.pm2.app(&app);
    assert!(d.pm2.run(&["stop", &app]).status.success());
    let polled = eventually_every(BACK_WITHIN, Duration::from_millis(200), || async {
        let r = reqwest::get(format!("http://127.0.0.1:{}/v1/ready", d.api_port))
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.unwrap();
        if status == 200 && body["checks"]["push_standby"]["ok"] == false {
            Ok(body)
        } else {
            Err((status, body))
        }
    })
    .await;
    let ready = polled.unwrap_or_else(|(status, body)| {
        panic!("ready never reported the missing standby: {status} {body}")
    });
    assert!(
        ready["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("no push standby")),
        "{ready}"
    );
    let ctl = std::process::Command::new(repo_root().join("target/debug/pmwctl"))
        .arg("status")
        .envs(d.env.iter().cloned())
        .output()
        .unwrap();
    let ctl = String::from_utf8_lossy(&ctl.stdout);
    assert!(ctl.contains("WARNING       no push standby"), "{ctl}");
    stays_down(&d, &app, before.restarts).await;

    // The API's pair behind Caddy: with pmw-api frozen (SIGSTOP: it still accepts TCP) and
    // then stopped, the API keeps answering through Caddy, from pmw-api-b.
    let api = d.pm2.app("pmw-api");
    signal(api.pid, "STOP");
    // Caddy's health check (every 500 ms, 2 s timeout) notices the frozen member.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let frozen = api_through_caddy(&d).await;
    signal(api.pid, "CONT");
    // `pm2 stop` of the API: stays stopped too.
    let before = d.pm2.app("pmw-api");
    assert!(d.pm2.run(&["stop", "pmw-api"]).status.success());
    let stopped_answers = api_through_caddy(&d).await;
    let stopped = stays_down(&d, "pmw-api", before.restarts).await;
    assert_eq!(stopped.status, "stopped", "{stopped:?}");
    assert!(
        frozen == (20, 20) && stopped_answers == (20, 20),
        "pmw-api-b answers through Caddy while pmw-api is frozen ({frozen:?} of 20 answered, \
         200) and stopped ({stopped_answers:?})"
    );

    // Exit 78: stats started with a broken setting stays down (pm2 says "waiting restart" with
    // pid 0 and exit code 78, and never restarts it).
    assert!(d.pm2.run(&["delete", "pmw-stats"]).status.success());
    let eco = repo_root().join("deploy/pm2/ecosystem.config.js");
    let out = d.pm2.run_env(
        &["start", eco.to_str().unwrap(), "--only", "pmw-stats"],
        &[("PMW_STATS_RETENTION_DAYS", "1")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eventually!(
        BACK_WITHIN,
        d.pm2.app("pmw-stats").exit_code == Some(78),
        "stats never exited 78: {:?}",
        d.pm2.app("pmw-stats")
    );
    let down = stays_down(&d, "pmw-stats", 0).await;
    assert_eq!(exits(&d.pm2, "pmw-stats", 78), 1, "{down:?}");

    stop_traffic.cancel();
    traffic.await.unwrap().unwrap();
    d.drain().await;
    let f = d.figures();
    let list: Vec<String> = measured.iter().map(ToString::to_string).collect();
    let figures = format!(
        "pm2 7.0.4, production ecosystem, debug build, under sim traffic; from the kill to pm2 \
         starting the new process (online) and to it serving (live: ingesting; push: standby \
         heartbeat; api: /v1/health 200; stats: /latency.json 200): {}; `pm2 stop` (standby, \
         api) and exit 78 (stats) stayed down {} s; {f}",
        list.join("; "),
        STAYS_DOWN.as_secs()
    );
    verdict("supervision", "pm2-restarts", &figures);
    f.assert_clean();
}

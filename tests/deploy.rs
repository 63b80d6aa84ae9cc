//! The deployment files are real and consistent: systemd units pass `systemd-analyze verify`
//! (and a broken one does not), encode the exit-code contract and stop timeouts longer than
//! push's round deadline; a real systemd manager (`systemd`) loads them with exactly the
//! restart properties of the contract, and restarts every service that dies by a signal, exits
//! 75 or exits 0 on its own, never gives up during an outage, and keeps a stopped service and a
//! 78 down; the pm2 ecosystem (evaluated by node) encodes the same policy; the Caddyfile
//! validates with the real Caddy; the crates keep the dependency rule (`crates`); the live and
//! stats pairs' rolling deploy restarts the standby first (`pair_deploy`).

#[path = "deploy/caddy_edge.rs"]
mod caddy_edge;
#[path = "deploy/crates.rs"]
mod crates;
#[path = "deploy/hardening.rs"]
mod hardening;
#[path = "deploy/pair_deploy.rs"]
mod pair_deploy;
#[path = "deploy/services.rs"]
mod services;
#[path = "deploy/systemd.rs"]
mod systemd;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    pmw_testkit::repo_root()
}

fn units() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("deploy/systemd"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "service"))
        .collect();
    v.sort();
    v
}

/// Copy the units into `dir`, pointing ExecStart at this build's binaries, instantiating the
/// templates (push, edge) as `@a`. Returns the unit file names to verify.
fn stage(dir: &Path, mutate: impl Fn(String) -> String) -> Vec<String> {
    let bin = root().join("target/debug");
    let mut names = Vec::new();
    for u in units() {
        let text = std::fs::read_to_string(&u)
            .unwrap()
            .replace("/usr/local/lib/pmw/bin", bin.to_str().unwrap());
        let text = mutate(text);
        let name = u
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace("@.service", "@a.service");
        std::fs::write(dir.join(&name), text).unwrap();
        names.push(name);
    }
    names
}

fn verify(dir: &Path, names: &[String]) -> (bool, String) {
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg("--man=no")
        .args(names)
        .current_dir(dir)
        .output()
        .expect("systemd-analyze (Debian systemd) is installed");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && !text.contains(".service:"), text)
}

#[test]
fn systemd_units_verify_and_encode_the_exit_code_contract() {
    let bins = ["pmw-live", "pmw-push", "pmw-api", "pmw-stats", "pmw-edge"];
    for b in bins {
        assert!(
            root().join("target/debug").join(b).exists(),
            "{b} is built (cargo builds workspace binaries for tests)"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let names = stage(dir.path(), |t| t);
    assert_eq!(names.len(), 5, "{names:?}");
    // Live and stats are templates like push: a pair per host kind, each member's instance name
    // and its own environment file (issue 44).
    for kind in ["live", "stats", "push"] {
        let t = std::fs::read_to_string(root().join(format!("deploy/systemd/pmw-{kind}@.service")))
            .unwrap_or_else(|e| panic!("pmw-{kind}@.service: {e}"));
        for line in [
            format!("Environment=PMW_INSTANCE={kind}-%i"),
            format!("EnvironmentFile=/etc/pmw/{kind}-%i.env"),
        ] {
            assert!(t.lines().any(|l| l == line), "pmw-{kind}@ must say {line}");
        }
    }
    let (ok, text) = verify(dir.path(), &names);
    assert!(ok, "systemd-analyze verify: {text}");
    for u in units() {
        let t = std::fs::read_to_string(&u).unwrap();
        assert!(
            t.contains("RestartPreventExitStatus=78"),
            "{u:?} must never restart a 78"
        );
        for line in [
            "Restart=always",
            "RestartSec=200ms",
            "StartLimitIntervalSec=0",
        ] {
            assert!(
                t.lines().any(|l| l == line),
                "{u:?} must say {line}: every exit but a stop and 78 restarts, forever"
            );
        }
        assert!(t.contains("KillSignal=SIGTERM"), "{u:?}");
        let stop: u64 = t
            .lines()
            .find_map(|l| l.strip_prefix("TimeoutStopSec="))
            .unwrap_or_else(|| panic!("{u:?} sets TimeoutStopSec"))
            .parse()
            .unwrap();
        assert!(
            stop > 12,
            "{u:?}: stop timeout {stop}s must exceed push's 10 s round deadline and an edge's \
             drain (10 s for its server, 2 s for its recorder)"
        );
    }

    // The check can fail: a broken unit is reported.
    let broken = tempfile::tempdir().unwrap();
    let names = stage(broken.path(), |t| {
        t.replace("Restart=always", "Restart=sometimes")
            .replace("Type=exec", "Type=bogus")
    });
    let (ok, text) = verify(broken.path(), &names);
    assert!(!ok, "a broken unit must fail verification: {text}");
}

#[test]
fn pm2_ecosystem_encodes_the_same_policy() {
    let script = r#"
        process.env.PMW_BIN_DIR = '/opt/pmw/bin';
        process.env.PMW_EDGES = '2';
        const e = require(process.argv[1]);
        console.log(JSON.stringify(e.apps));
    "#;
    let out = Command::new("node")
        .arg("-e")
        .arg(script)
        .arg(root().join("deploy/pm2/ecosystem.config.js"))
        .output()
        .expect("node is installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let apps: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = apps.iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "pmw-live",
            "pmw-live-b",
            "pmw-push-a",
            "pmw-push-b",
            "pmw-api",
            "pmw-api-b",
            "pmw-stats",
            "pmw-stats-b",
            "pmw-edge-1",
            "pmw-edge-2"
        ]
    );
    assert_ne!(
        apps[8]["env"]["PMW_EDGE_LISTEN"], apps[9]["env"]["PMW_EDGE_LISTEN"],
        "edges listen apart"
    );
    // No singleton: live, the API and stats run as pairs of one binary whose members differ in
    // their instance name, metrics port and (API, stats) listening port (issue 44).
    for (a, b, apart) in [
        (0, 1, &["PMW_INSTANCE", "PMW_LIVE_METRICS_ADDR"][..]),
        (4, 5, &["PMW_INSTANCE", "PMW_API_LISTEN"][..]),
        (
            6,
            7,
            &["PMW_INSTANCE", "PMW_STATS_METRICS_ADDR", "PMW_STATS_LISTEN"][..],
        ),
    ] {
        assert_eq!(
            apps[a]["script"], apps[b]["script"],
            "a pair runs one binary"
        );
        for k in apart {
            let (x, y) = (&apps[a]["env"][k], &apps[b]["env"][k]);
            assert!(x.is_string() && x != y, "{k}: {x} vs {y}");
        }
    }
    for a in &apps {
        let codes: Vec<i64> = a["stop_exit_codes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_i64().unwrap())
            .collect();
        // Only 78: pm2 reports a signal death (kill -9, the OOM killer) as exit code 0, so a 0
        // here would leave a killed service down for good (pm2 never restarts a stop it asked
        // for, whatever the code).
        assert_eq!(codes, [78], "{a}");
        assert_eq!(a["autorestart"], true, "{a}");
        assert_eq!(a["exp_backoff_restart_delay"], 200, "{a}");
        assert!(a["kill_timeout"].as_i64().unwrap() > 10_000, "{a}");
        assert_eq!(a["kill_signal"], "SIGTERM");
        assert!(
            a["script"].as_str().unwrap().starts_with("/opt/pmw/bin/"),
            "{a}"
        );
    }
    assert_ne!(
        apps[2]["env"]["PMW_PUSH_LISTEN"], apps[3]["env"]["PMW_PUSH_LISTEN"],
        "push-a and push-b listen apart"
    );
}

#[test]
fn caddyfile_validates_with_real_caddy() {
    // Both modes: /v1/ws to the push leader (default) and to the edges (PMW_WS_MODE=edge).
    for mode in ["push", "edge"] {
        let out = Command::new("caddy")
            .args(["validate", "--adapter", "caddyfile", "--config"])
            .arg(root().join("caddy/Caddyfile"))
            .env("PMW_SITE", "http://127.0.0.1:18443")
            .env("PMW_WS_MODE", mode)
            .output()
            .expect("caddy (Debian) is installed");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{mode}: {text}");
    }
    let read = |f: &str| std::fs::read_to_string(root().join("caddy").join(f)).unwrap();
    let (caddyfile, push, edge) = (
        read("Caddyfile"),
        read("ws-push.caddy"),
        read("ws-edge.caddy"),
    );
    for (file, text, needle) in [
        ("Caddyfile", &caddyfile, "/v1/ws"),
        ("Caddyfile", &caddyfile, "/latency"),
        (
            "Caddyfile",
            &caddyfile,
            "import ws-{$PMW_WS_MODE:push}.caddy",
        ),
        // The API's pair: both members, the first that answers its health check.
        ("Caddyfile", &caddyfile, "{$PMW_API_B:127.0.0.1:8090}"),
        ("Caddyfile", &caddyfile, "health_uri /v1/health"),
        ("ws-push.caddy", &push, "lb_policy first"),
        ("ws-push.caddy", &push, "lb_try_duration"),
        ("ws-push.caddy", &push, "fail_duration"),
        ("ws-push.caddy", &push, "health_uri /health"),
        ("ws-edge.caddy", &edge, "lb_try_duration"),
        ("ws-edge.caddy", &edge, "health_uri /health"),
    ] {
        assert!(text.contains(needle), "{file} must configure {needle}");
    }
}

#[test]
fn systemd_loads_the_units_with_the_restart_contract() {
    let sd = systemd::Systemd::start();
    sd.install_units();
    for unit in systemd::UNITS {
        let p = sd.show(unit);
        assert_eq!(p["LoadState"], "loaded", "{unit}: {}", sd.diagnostics());
        assert!(
            p["ExecStart"].contains("/target/debug/pmw-"),
            "{unit} runs this build: {}",
            p["ExecStart"]
        );
        let bad = systemd::violations(&p);
        assert!(bad.is_empty(), "{unit} breaks the contract: {bad:?}");
    }
    // The check can fail: the policy this contract replaced (on-failure leaves SIGHUP/SIGTERM
    // deaths and 0 on its own down; a start limit gives up during a long outage) is rejected.
    let api = std::fs::read_to_string(root().join("deploy/systemd/pmw-api.service")).unwrap();
    let old = api
        .replace("Restart=always", "Restart=on-failure")
        .replace("RestartSec=200ms", "RestartSec=1")
        .replace(
            "StartLimitIntervalSec=0",
            "StartLimitIntervalSec=300\nStartLimitBurst=50",
        );
    sd.write_unit("pmw-old.service", &old);
    sd.ok(&["daemon-reload"]);
    let bad = systemd::violations(&sd.show("pmw-old.service"));
    assert_eq!(bad.len(), 3, "{bad:?}");
}

/// systemd recorded a run of `unit` that ended as `exit` (`$SERVICE_RESULT $EXIT_CODE
/// $EXIT_STATUS`); for a signal death, with or without a core dump.
#[track_caller]
fn assert_exit(h: &services::Host, unit: &str, exit: &str) {
    let exits = h.sd.exits(unit);
    let dumped = exit
        .strip_prefix("signal killed ")
        .map(|sig| format!("core-dump dumped {sig}"));
    assert!(
        exits
            .iter()
            .any(|e| e == exit || Some(e) == dumped.as_ref()),
        "systemd never saw {unit} end as {exit:?}: {exits:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_restarts_every_signal_death_and_keeps_stops_and_78_down() {
    let h = services::Host::start().await;
    // Everything serves: live ingests, one push leads and the other waits, API and stats answer.
    for unit in [
        "pmw-live@a.service",
        "pmw-api.service",
        "pmw-stats@a.service",
        "pmw-edge@1.service",
    ] {
        h.serving(unit, h.state(unit).pid, 0).await;
    }
    let leader = h.leader().await;
    let unit_of = |i: &str| format!("pmw-push@{}.service", i.trim_start_matches("push-"));
    let leader_unit = unit_of(&leader);
    let standby_unit = unit_of(if leader == "push-a" {
        "push-b"
    } else {
        "push-a"
    });
    h.serving(&standby_unit, h.state(&standby_unit).pid, 0)
        .await;

    let mut measured = Vec::new();
    for (unit, sig) in [
        ("pmw-live@a.service", "KILL"),
        (standby_unit.as_str(), "KILL"),
        (leader_unit.as_str(), "KILL"),
        ("pmw-api.service", "KILL"),
        ("pmw-stats@a.service", "KILL"),
        ("pmw-edge@1.service", "KILL"),
        ("pmw-api.service", "SEGV"),
        ("pmw-stats@a.service", "ABRT"),
        // SIGHUP (not handled: the process dies of it) and a SIGTERM that systemd did not send
        // (exit 0): Restart=on-failure would count both as clean and leave the service down.
        (leader_unit.as_str(), "HUP"),
        ("pmw-live@a.service", "TERM"),
    ] {
        measured.push(h.kill_and_measure(unit, sig).await);
    }
    assert_eq!(
        h.leader().await,
        standby_unit
            .trim_end_matches(".service")
            .replace("pmw-push@", "push-"),
        "the standby took over from the killed leader"
    );
    assert_exit(&h, "pmw-live@a.service", "signal killed KILL");
    assert_exit(&h, "pmw-api.service", "signal killed SEGV");
    assert_exit(&h, "pmw-stats@a.service", "signal killed ABRT");
    assert_exit(&h, "pmw-edge@1.service", "signal killed KILL");
    // systemd counts these two as clean ends ("success"): restarted only by Restart=always.
    assert_exit(&h, &leader_unit, "success killed HUP");
    assert_exit(&h, "pmw-live@a.service", "success exited 0");

    // 75: live's lock session terminated; it exits 75 and is restarted.
    let unit = "pmw-live@a.service";
    let before = h.state(unit);
    let since = pmw_core::UnixMs::now().0;
    let t = std::time::Instant::now();
    h.db.connect()
        .await
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'pmw-live:lock' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap();
    let after = h.restarted(unit, &before).await;
    h.serving(unit, after.pid, since).await;
    measured.push(format!(
        "pmw-live exit 75: serving {} ms",
        t.elapsed().as_millis()
    ));
    assert_exit(&h, unit, "exit-code exited 75");

    // An outage of any length: every start of the API exits 75 (Postgres unreachable); systemd
    // restarts it past any start limit (the default 5 in 10 s, the old units' 50 in 300 s), and
    // it serves once Postgres is reachable again.
    let unit = "pmw-api.service";
    let outage = h.sd.env_dir().join("api-outage.env");
    systemd::write_env(
        &outage,
        &[(
            "PMW_POSTGRES_URL".into(),
            "postgres://pmw@127.0.0.1:9/none".into(),
        )],
    );
    h.sd.drop_in(
        unit,
        "50-outage",
        &format!("[Service]\nEnvironmentFile={}\n", outage.display()),
    );
    h.sd.ok(&["daemon-reload"]);
    // Not waited for: the new process exits 75 within milliseconds, and a restart job that sees
    // its process exit before the job completes is reported as failed (a race, not a finding).
    h.sd.ok(&["restart", "--no-block", unit]);
    let first = h.state(unit).restarts;
    let restarted = pmw_testkit::eventually(services::WITHIN, || async {
        let s = h.state(unit);
        assert!(
            s.active != "failed",
            "systemd gave up on {unit}: {s:?}: {}",
            h.sd.diagnostics()
        );
        if s.restarts >= first + 55 {
            Ok(())
        } else {
            Err(s)
        }
    })
    .await;
    if let Err(s) = restarted {
        panic!("{unit} not restarted: {s:?}");
    }
    assert_exit(&h, unit, "exit-code exited 75");
    h.sd.remove_drop_in(unit, "50-outage");
    h.sd.ok(&["daemon-reload"]);
    let back = h.wait_active(unit, "active").await;
    h.serving(unit, back.pid, 0).await;

    // `systemctl stop`: a graceful exit 0, and it stays stopped.
    h.sd.ok(&["stop", unit]);
    let down = h.stays_down(unit).await;
    assert_eq!(down.active, "inactive", "{down:?}");

    // An edge's `systemctl stop`: its drain (no new connections, 1012 to every session) ends in
    // a clean 0 well within TimeoutStopSec, never in systemd's SIGKILL, and it stays stopped.
    let unit = "pmw-edge@1.service";
    let t = std::time::Instant::now();
    h.sd.ok(&["stop", unit]);
    let drained = t.elapsed();
    assert_exit(&h, unit, "success exited 0");
    assert!(
        drained < std::time::Duration::from_secs(15),
        "{unit}: stop took {drained:?}"
    );
    let down = h.stays_down(unit).await;
    assert_eq!(down.active, "inactive", "{down:?}");
    measured.push(format!(
        "pmw-edge@1 systemctl stop (drain): exit 0 in {} ms",
        drained.as_millis()
    ));

    // 78: stats with a broken setting exits 78 and is never restarted.
    let unit = "pmw-stats@a.service";
    let bad = h.sd.env_dir().join("stats-bad.env");
    systemd::write_env(&bad, &[("PMW_STATS_RETENTION_DAYS".into(), "1".into())]);
    h.sd.drop_in(
        unit,
        "50-bad",
        &format!("[Service]\nEnvironmentFile={}\n", bad.display()),
    );
    h.sd.ok(&["daemon-reload"]);
    let _ = h.sd.systemctl(&["restart", unit]);
    h.wait_active(unit, "failed").await;
    h.stays_down(unit).await;
    let p = h.sd.show(unit);
    assert_eq!(
        (p["Result"].as_str(), p["ExecMainStatus"].as_str()),
        ("exit-code", "78")
    );
    assert_exit(&h, unit, "exit-code exited 78");

    let figures = format!(
        "systemd 252 (a user manager running the production units), debug build; from the \
         kill to the new process running and to it serving (live: leader heartbeat; push: standby \
         heartbeat; api: /v1/health 200; stats: /latency.json 200; edge: /health 200): {}; 55 restarts in a row \
         during a Postgres outage without giving up; `systemctl stop` and exit 78 stayed down 5 s",
        measured.join("; ")
    );
    println!("systemd supervision: {figures}");
    pmw_tools::record("systemd-restarts", &figures);
}

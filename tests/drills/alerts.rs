//! The alert drill: Debian's Prometheus scrapes the pm2-run services (their private metrics ports
//! and pmw-api's `/metrics`) with `deploy/prometheus/pmw.rules.yml` loaded, every `for:` cut to
//! 2 s and a 1 s scrape/evaluation interval. Three incidents, each must fire its alert in
//! Prometheus's `/api/v1/alerts`: pmw-live stopped (`/v1/ready` 503 naming ingest,
//! `PmwIngestLagging`); push rounds failing (`PmwPushRoundsFailing`); an older build of one
//! service started (`PmwOlderRevision`).

use std::time::{Duration, Instant};

use pmw_testkit::{eventually_every, free_port, repo_root};
use pmw_tools::harness::{Drill, Opts};
use pmw_tools::verdict;
use serde_json::Value;

/// The rules as shipped, with every `for:` set to `for_`.
fn drill_rules(for_: &str) -> String {
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus/pmw.rules.yml"))
        .expect("deploy/prometheus/pmw.rules.yml");
    let mut out = String::new();
    for line in rules.lines() {
        match line.find("for: ") {
            Some(i) if line.trim_start().starts_with("for: ") => {
                out.push_str(&line[..i]);
                out.push_str("for: ");
                out.push_str(for_);
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Prometheus on a free port, scraping `targets` (job, instance, port) every second.
struct Prometheus {
    port: u16,
    _child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    async fn start(targets: &[(&str, &str, u16)]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rules.yml"), drill_rules("2s")).unwrap();
        let mut cfg = String::from(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - rules.yml\nscrape_configs:\n",
        );
        let mut jobs: Vec<&str> = targets.iter().map(|t| t.0).collect();
        jobs.dedup();
        for job in jobs {
            cfg.push_str(&format!(
                "  - job_name: {job}\n    scrape_timeout: 1s\n    static_configs:\n"
            ));
            for (_, instance, port) in targets.iter().filter(|t| t.0 == job) {
                cfg.push_str(&format!(
                    "      - targets: ['127.0.0.1:{port}']\n        labels: {{instance: {instance}}}\n"
                ));
            }
        }
        std::fs::write(dir.path().join("prometheus.yml"), cfg).unwrap();
        let port = free_port();
        let child = tokio::process::Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("prometheus (scripts/install prometheus)");
        let p = Prometheus {
            port,
            _child: child,
            _dir: dir,
        };
        let http = reqwest::Client::new();
        let ready = eventually_every(
            Duration::from_secs(30),
            Duration::from_millis(200),
            || async {
                http.get(format!("http://127.0.0.1:{port}/-/ready"))
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 200)
            },
        )
        .await;
        assert!(ready, "prometheus never became ready");
        p
    }

    /// Every alert now (`/api/v1/alerts`).
    async fn alerts(&self) -> Vec<Value> {
        let url = format!("http://127.0.0.1:{}/api/v1/alerts", self.port);
        let body: Value = match reqwest::get(&url).await {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => Value::Null,
        };
        body["data"]["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Wait until `name` fires with every label of `labels`; the time it took.
    async fn wait_firing(&self, name: &str, labels: &[(&str, &str)], t0: Instant) -> Duration {
        let polled = eventually_every(
            Duration::from_secs(90),
            Duration::from_millis(250),
            || async {
                let alerts = self.alerts().await;
                let firing = alerts.iter().any(|a| {
                    a["state"] == "firing"
                        && a["labels"]["alertname"] == name
                        && labels.iter().all(|(k, v)| a["labels"][*k] == *v)
                });
                if firing {
                    Ok(t0.elapsed())
                } else {
                    Err(alerts)
                }
            },
        )
        .await;
        polled.unwrap_or_else(|alerts| panic!("{name} {labels:?} never fired; alerts: {alerts:#?}"))
    }
}

/// A copy of `bin` whose build revision reads differently: every occurrence of this build's
/// revision string replaced by one of the same length (what a build of another commit carries).
fn older_build(bin: &std::path::Path, to: &std::path::Path) -> String {
    let rev = pmw_core::build_info::REVISION.as_bytes();
    assert!(rev.len() >= 3, "revision {rev:?} too short to patch");
    // The migrations are embedded and checksummed: a migration containing the revision string
    // (e.g. `unknown`, a build without PMW_REVISION) would be patched too and the copy would
    // refuse to start (exit 78), not run as an older build.
    for store in ["postgres", "clickhouse"] {
        for f in std::fs::read_dir(repo_root().join("migrations").join(store)).unwrap() {
            let path = f.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                !text.contains(pmw_core::build_info::REVISION),
                "{} contains the revision string {:?}: reword it",
                path.display(),
                pmw_core::build_info::REVISION
            );
        }
    }
    let old = format!("old{}", "0".repeat(rev.len() - 3));
    let mut bytes = std::fs::read(bin).unwrap();
    let mut n = 0;
    let mut i = 0;
    while i + rev.len() <= bytes.len() {
        if &bytes[i..i + rev.len()] == rev {
            bytes[i..i + rev.len()].copy_from_slice(old.as_bytes());
            n += 1;
            i += rev.len();
        } else {
            i += 1;
        }
    }
    assert!(n > 0, "the revision string is not in {}", bin.display());
    std::fs::write(to, bytes).unwrap();
    let mut perm = std::fs::metadata(to).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(to, perm).unwrap();
    old
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_fire_in_prometheus_for_ingest_push_and_an_older_build() {
    let d = Drill::start_with(Opts {
        apps: Some("pmw-live,pmw-push-a,pmw-push-b,pmw-api"),
        clients: Some(0),
        env: vec![("PMW_API_READY_ROUND_MAX_AGE_MS", "4000")],
        ..Opts::default()
    })
    .await;
    let old_stats_metrics = free_port();
    let mut targets: Vec<(&str, &str, u16)> = vec![("pmw-api", "api", d.api_port)];
    targets.extend(d.metrics_ports.iter().copied());
    targets.push(("pmw-stats", "stats-old", old_stats_metrics));
    let prom = Prometheus::start(&targets).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();

    // 1. pmw-live stopped: /v1/ready 503 naming ingest, and the ingest alert fires.
    let t0 = Instant::now();
    let out = d.pm2.run(&["stop", "pmw-live"]);
    assert!(out.status.success(), "pm2 stop pmw-live");
    let ready_url = format!("http://127.0.0.1:{}/v1/ready", d.api_port);
    let polled = eventually_every(
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            let r = http.get(&ready_url).send().await.unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or_default();
            if status == 503 && body["checks"]["ingest"]["ok"] == false {
                Ok(body["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string())
            } else {
                Err((status, body))
            }
        },
    )
    .await;
    let reason = polled
        .unwrap_or_else(|(status, body)| panic!("/v1/ready never 503 for ingest: {status} {body}"));
    assert!(
        reason.contains("pmw-live"),
        "the reason names ingest: {reason}"
    );
    let ready_503 = t0.elapsed();
    let ingest = prom
        .wait_firing("PmwIngestLagging", &[("check", "ingest")], t0)
        .await;

    // 2. Push rounds fail: the `reorgs` table every round reads first is gone (renamed away in
    // Postgres). Every round fails, idle or not (with pmw-live stopped no block arrives, so a
    // ClickHouse fault would never be read), and nothing else reads it.
    let t1 = Instant::now();
    let pg = d.db.connect().await;
    pg.batch_execute("ALTER TABLE reorgs RENAME TO reorgs_away")
        .await
        .unwrap();
    let push = prom.wait_firing("PmwPushRoundsFailing", &[], t1).await;
    pg.batch_execute("ALTER TABLE reorgs_away RENAME TO reorgs")
        .await
        .unwrap();

    // 3. An older build of pmw-stats starts next to this build's services.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("pmw-stats");
    let old = older_build(&repo_root().join("target/debug/pmw-stats"), &bin);
    let t2 = Instant::now();
    let out = d.pm2.run_env(
        &[
            "start",
            bin.to_str().unwrap(),
            "--name",
            "pmw-stats-old",
            "--interpreter",
            "none",
        ],
        &[
            ("PMW_INSTANCE", "stats-old"),
            ("PMW_STATS_LISTEN", &format!("127.0.0.1:{}", free_port())),
            (
                "PMW_STATS_METRICS_ADDR",
                &format!("127.0.0.1:{old_stats_metrics}"),
            ),
        ],
    );
    assert!(
        out.status.success(),
        "pm2 start the older pmw-stats: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version = prom
        .wait_firing(
            "PmwOlderRevision",
            &[("instance", "stats-old"), ("revision", old.as_str())],
            t2,
        )
        .await;

    let figures = format!(
        "scrape and evaluation every 1 s, every `for:` 2 s: pmw-live stopped → /v1/ready 503 (ingest) after {} ms, PmwIngestLagging firing after {} ms; Postgres reorgs table renamed away → PmwPushRoundsFailing firing after {} ms; an older pmw-stats build started → PmwOlderRevision firing after {} ms",
        ready_503.as_millis(),
        ingest.as_millis(),
        push.as_millis(),
        version.as_millis()
    );
    verdict("alert", "alerts", &figures);
}

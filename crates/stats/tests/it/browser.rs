//! The dashboard in a real headless Chromium (Debian's `chromium`, driven by `playwright-core`
//! from tools/node): headline figures, availability over the time measured (planted samples
//! with a push outage, an ingest gap and unsampled time), the daily bars and the incident with
//! its cause, the first-attempt and eventually-delivered webhook rows and the completeness
//! audit's figures visible and equal to the JSON, charts present, no console error, no request
//! leaving this machine, the page readable at phone width; and a just-started stack (the
//! running sampler) whose headline shows the measured-time figure and the share measured.
//! Screenshots are saved under `artifacts/` (full width and 390 px).

use std::path::Path;
use std::time::Duration;

use crate::common::*;
use pmw_core::UnixMs;
use pmw_testkit::{repo_root, TestDb};
use tokio::process::Command;

const CHROMIUM: &str = "/usr/bin/chromium";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_renders_in_headless_chromium_with_nothing_from_the_internet() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run scripts/install chromium"
    );
    let root = repo_root();
    let modules = root.join("tools/node/node_modules");
    assert!(
        modules.join("playwright-core").exists(),
        "playwright-core is missing: run scripts/install anvil (npm ci in tools/node)"
    );

    let db = TestDb::new().await;
    let now = UnixMs::now();
    // One group per window, each with its own latencies: four different headline figures.
    let mut ingest_rows = Vec::new();
    let mut push_rows = Vec::new();
    let mut b = 0u64;
    for (age, n, base) in [
        (20 * 60_000, 41, 80),
        (6 * HOUR, 31, 140),
        (3 * DAY, 21, 260),
        (12 * DAY, 51, 420),
    ] {
        for i in 0..n {
            b += 1;
            let t = now.0 - age + i * 20_000;
            let lat = base + (i * 37) % 90;
            ingest_rows.push(ingest(b, t, lat / 4, lat / 2));
            push_rows.push(push(b, "ws", t, t + lat));
            // Every third webhook delivered by a retry, 6 s later.
            let mut hook = push(b, "webhook", t, t + 2 * lat + 15);
            if i % 3 == 2 {
                hook.attempt = 2;
                hook.t_push_ms += 6_000;
            }
            push_rows.push(hook);
            push_rows.push(push(b, "ws_final", t, t + 3 * lat + 4_000));
        }
    }
    write(&db, &ingest_rows, &push_rows).await;
    // The completeness audit: through block 5000, 12 blocks (24 s) behind the head; one audited
    // range per window, each with its own figures.
    let pg = db.connect().await;
    pg.batch_execute(&format!(
        "INSERT INTO chain_blocks (block_number, block_hash, parent_hash, block_time_ms, t_detect_ms, backfilled, trade_count) \
         VALUES (5000, '0x1', '0x0', 1000000, 0, false, 0), (5012, '0x2', '0x1', 1024000, 0, false, 0);
         INSERT INTO ingest_cursor (id, block_number, block_hash, updated_ms) VALUES (1, 5012, '0x2', {0});
         INSERT INTO audit_cursor (id, block_number, updated_ms) VALUES (1, 5000, {0});",
        now.0
    ))
    .await
    .unwrap();
    for (i, (age, fills, missing, extra)) in [
        (10 * 60_000, 120, 2, 0),
        (6 * HOUR, 340, 0, 1),
        (3 * DAY, 560, 3, 0),
        (12 * DAY, 780, 0, 0),
    ]
    .into_iter()
    .enumerate()
    {
        let to = 5000 - 100 * i as i64;
        pg.execute(
            "INSERT INTO audit_ranges (from_block, to_block, fills_checked, missing, extra, audited_ms, head_block, to_block_time_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[&(to - 99), &to, &fills, &missing, &extra, &(now.0 - age), &(to + 10), &(now.0 - age - 20_000)],
        )
        .await
        .unwrap();
    }
    let planted = plant_samples(&db, now).await;
    // One snapshot for the whole test: the page and both JSON reads show the same figures. The
    // sampler is off: the planted samples are all there is.
    let no_sampler = pmw_stats::StatsConfig {
        stats_availability_sampler: false,
        ..stats_config(3_600_000)
    };
    let (svc, addr) = start(db.cfg.clone(), no_sampler).await;
    let json = json_after(addr, now.0).await;

    let shot = root.join("artifacts/stats-dashboard.png");
    let phone = root.join("artifacts/stats-dashboard-390px.png");
    let report = browser_check(addr, &shot, &phone).await;

    assert_eq!(report["status"], 200, "{report}");
    assert_eq!(report["mismatches"], serde_json::json!([]), "{report}");
    // The page shows exactly the JSON this test fetched too.
    let figures = json["headline"]["figures"].as_array().unwrap();
    let shown = report["headline"].as_array().unwrap();
    assert_eq!(shown.len(), 4, "{report}");
    for (f, h) in figures.iter().zip(shown) {
        assert_eq!(h["window"], f["window"]);
        assert_eq!(h["visible"], true, "{h}");
        let expect = match f["p50_ms"].as_i64() {
            Some(v) => format!("{v} ms"),
            None => "no data".into(),
        };
        assert_eq!(h["text"], expect.as_str(), "{h}");
    }
    // The `final` stage's row shows, per window, the p50 the JSON has (a number in each).
    let finals = report["final_stage"].as_array().unwrap();
    assert_eq!(finals.len(), 4, "{report}");
    for f in finals {
        let p50 = f["json"]
            .as_i64()
            .unwrap_or_else(|| panic!("final p50 in the JSON: {f}"));
        assert_eq!(f["shown"], format!("{p50} ms").as_str(), "{f}");
    }
    // The audit's figures, per window, as the JSON says and with real numbers.
    let audit = &json["audit"];
    assert_eq!(audit["audited_through_block"], 5000, "{audit}");
    assert_eq!(audit["trail_blocks"], 12, "{audit}");
    assert_eq!(audit["trail_ms"], 24_000, "{audit}");
    assert_eq!(report["audit_now"]["block"], "5000", "{report}");
    assert_eq!(report["audit_now"]["visible"], true, "{report}");
    assert!(
        report["audit_now"]["text"]
            .as_str()
            .unwrap()
            .contains("Audited through block 5000: 12 blocks (24.0 s of block time) behind"),
        "{report}"
    );
    let shown = report["audit"].as_array().unwrap();
    let windows = audit["windows"].as_array().unwrap();
    assert_eq!(shown.len(), 4, "{report}");
    let expected = [(120, 2, 0), (460, 2, 1), (1020, 5, 1), (1800, 5, 1)];
    for ((w, card), (fills, missing, extra)) in windows.iter().zip(shown).zip(expected) {
        assert_eq!(card["window"], w["window"]);
        assert_eq!(card["visible"], true, "{card}");
        assert_eq!(
            (
                w["fills_checked"].as_u64(),
                w["missing"].as_u64(),
                w["extra"].as_u64()
            ),
            (Some(fills), Some(missing), Some(extra)),
            "{w}"
        );
        assert_eq!(card["fills_checked"], fills.to_string().as_str(), "{card}");
        assert_eq!(card["missing"], missing.to_string().as_str(), "{card}");
        assert_eq!(card["extra"], extra.to_string().as_str(), "{card}");
        let text = format!(
            "audited through block {}: {fills} fills checked, {missing} missing, {extra} extra",
            w["audited_through_block"]
        );
        assert_eq!(card["text"], text.as_str(), "{card}");
    }
    assert_eq!(windows[0]["audited_through_block"], 5000);
    assert_eq!(windows[0]["max_trail_blocks"], 10);
    assert_eq!(windows[0]["max_trail_ms"], 20_000);
    check_availability(&report, &planted);
    check_days_and_incident(&report, &json, &planted);
    check_phone(&report, &phone);
    check_webhook_rows(&report, &json);
    let p50s: Vec<_> = figures.iter().map(|f| f["p50_ms"].clone()).collect();
    assert!(
        p50s.iter().all(|v| v.is_i64()),
        "every window has data: {p50s:?}"
    );
    assert!(
        report["svg_count"].as_u64().unwrap() >= 3 && report["svg_visible"] == report["svg_count"],
        "three visible charts: {report}"
    );
    assert_eq!(report["console_errors"], serde_json::json!([]), "{report}");
    assert_eq!(report["page_errors"], serde_json::json!([]), "{report}");
    assert_eq!(report["blocked"], serde_json::json!([]), "{report}");
    let requests = report["requests"].as_array().unwrap();
    assert!(!requests.is_empty(), "requests are recorded");
    for r in requests {
        let u = r.as_str().unwrap();
        let host = u
            .split("://")
            .nth(1)
            .and_then(|rest| rest.split(['/', ':']).next())
            .unwrap_or("");
        assert!(
            host == "127.0.0.1" || host == "localhost",
            "request left the machine: {u}"
        );
    }
    let png = std::fs::read(&shot).expect("screenshot saved");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a real PNG"
    );
    println!("screenshot: {}", shot.display());
    eprintln!("screenshot: {}", shot.display());
    svc.stop().await.unwrap();
}

/// The availability cards: one per window, visible, showing the planned figures (the 1h window:
/// push available 2 061 s of 3 600 s, 57.250 %; unknown 1 500 s, 41.666 %).
fn check_availability(report: &serde_json::Value, planted: &PlantedSamples) {
    let cards = report["availability"].as_array().unwrap();
    let names: Vec<&str> = cards
        .iter()
        .map(|c| c["window"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["1h", "24h", "7d", "30d"], "{report}");
    for c in cards {
        assert_eq!(c["visible"], true, "{c}");
        let push = &c["parts"]["push"];
        let ingest = &c["parts"]["ingest"];
        assert_eq!(push["visible"], true, "{c}");
        assert_eq!(push["gap"], "39.0 s", "{c}");
        assert_eq!(
            push["gap_attr"],
            planted.push_gap_ms.to_string().as_str(),
            "{c}"
        );
        assert_eq!(ingest["gap"], "20.0 s", "{c}");
    }
    // The headline: over the time measured (2 100 s of the hour: 35 min, 58.333 %); the share
    // of the whole window beside it.
    let h = &cards[0];
    assert_eq!(h["parts"]["push"]["share"], "98.142 %", "{h}");
    assert_eq!(h["parts"]["ingest"]["share"], "99.047 %", "{h}");
    assert_eq!(h["parts"]["push"]["window_share"], "57.250 %", "{h}");
    assert_eq!(h["parts"]["ingest"]["window_share"], "57.777 %", "{h}");
    assert_eq!(h["measured"], "measured 35 min of 1 h (58.333 %)", "{h}");
    assert_eq!(h["measured_visible"], true, "{h}");
    assert_eq!(h["coverage"], "partial", "{h}");
    assert!(
        h["partial"]
            .as_str()
            .is_some_and(|p| p.starts_with("partial window: measured since ")),
        "{h}"
    );
    assert_eq!(h["unknown"], "41.666 %", "{h}");
    assert_eq!(
        h["unknown_s"],
        (3_600 - planted.sampled_s).to_string().as_str()
    );
    let push = h["parts"]["push"]["text"].as_str().unwrap();
    assert!(
        push.starts_with("push 98.142 % available over the time measured")
            && push
                .contains("longest gap 39.0 s; longest wait 44.0 s; 57.250 % of the whole window"),
        "{h}"
    );
    assert!(
        h["parts"]["ingest"]["text"]
            .as_str()
            .unwrap()
            .contains("longest gap 20.0 s; most behind 3 blocks"),
        "{h}"
    );
}

/// The daily bars (30, one per UTC day; the planted day orange: 98.142 % of the time measured)
/// with the day's figures as tooltip and as table row; the one incident (push's 39 s run; the
/// 20 s ingest gap is below the threshold) with its recorded cause, a push leader change.
fn check_days_and_incident(
    report: &serde_json::Value,
    json: &serde_json::Value,
    planted: &PlantedSamples,
) {
    let a = &json["availability"];
    assert_eq!(a["incident_threshold_ms"], 30_000, "{a}");
    let day = pmw_core::UnixMs(planted.push_gap_from_ms).to_rfc3339()[..10].to_string();
    // The planted samples (the first 606 s before push's gap, the last 2 399 s after the first)
    // all fall on the gap's day unless the test runs early in a UTC day.
    let first = planted.push_gap_from_ms - 606_000;
    let one_day = pmw_core::UnixMs(first).to_rfc3339()[..10]
        == pmw_core::UnixMs(first + 2_399_000).to_rfc3339()[..10];
    let rows = report["days"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "push and ingest: {report}");
    for row in rows {
        assert_eq!(row["bars"], 30, "{row}");
        assert_eq!(row["visible"], true, "{row}");
        let bar = row["measured"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["day"] == day.as_str())
            .unwrap_or_else(|| panic!("a bar for {day}: {row}"));
        let title = bar["title"].as_str().unwrap();
        if row["part"] == "push" {
            assert!(title.contains("longest gap 39.0 s"), "{bar}");
            if one_day {
                assert_eq!(bar["level"], "major", "{bar}");
                assert!(
                    title.starts_with(&day)
                        && title.ends_with(
                            ": push 98.142 % available over 35 min measured, longest gap 39.0 s"
                        ),
                    "{bar}"
                );
            }
        } else if one_day {
            assert!(title.contains("longest gap 20.0 s"), "{bar}");
        }
    }
    let table = report["day_table"].as_array().unwrap();
    let row = table
        .iter()
        .find(|r| r["day"] == day.as_str())
        .unwrap_or_else(|| panic!("{day} in the table: {report}"));
    assert!(
        row["text"].as_str().unwrap().contains("longest gap 39.0 s"),
        "{row}"
    );
    let incidents = report["incidents"].as_array().unwrap();
    assert_eq!(incidents.len(), 1, "{report}");
    let i = &incidents[0];
    assert_eq!(i["visible"], true, "{i}");
    assert_eq!(
        i["start_ms"],
        planted.push_gap_from_ms.to_string().as_str(),
        "{i}"
    );
    assert_eq!(
        (&i["open"], &i["state"]),
        (&"false".into(), &"resolved".into()),
        "{i}"
    );
    assert_eq!(i["length"], "39.0 s", "{i}");
    assert_eq!(i["late"], "push", "{i}");
    assert_eq!(i["late_text"], "push behind ingest", "{i}");
    assert_eq!(i["causes"], "leader_change", "{i}");
    assert_eq!(i["cause"], "push leader change (epoch 1 → 2)", "{i}");
    let j = &a["incidents"][0];
    assert_eq!(j["length_ms"], 39_000, "{j}");
    assert_eq!(j["open"], false, "{j}");
    assert_eq!(j["causes"][0]["kind"], "leader_change", "{j}");
}

/// At 390 px: nothing wider than the screen, the headline, the bars and the incident visible,
/// the bars drawn across the width; the screenshot saved.
fn check_phone(report: &serde_json::Value, shot: &Path) {
    let p = &report["phone"];
    assert_eq!(p["width"], 390, "{report}");
    let scroll = p["scroll_width"].as_u64().unwrap();
    assert!(scroll <= 390, "wider than the phone: {p}");
    for k in [
        "headline_visible",
        "measured_visible",
        "bars_visible",
        "incident_visible",
    ] {
        assert_eq!(p[k], true, "{k}: {p}");
    }
    assert!(p["bars_box"]["width"].as_f64().unwrap() >= 250.0, "{p}");
    let png = std::fs::read(shot).expect("phone screenshot saved");
    assert!(png.starts_with(b"\x89PNG"), "a real PNG");
    println!("phone screenshot: {}", shot.display());
}

/// The webhook rows: first attempt and eventually delivered in every window, the retried
/// deliveries only in the second (its p99 carries the 6 s retry, the first-attempt one not).
fn check_webhook_rows(report: &serde_json::Value, json: &serde_json::Value) {
    let rows = report["webhook_stages"].as_array().unwrap();
    assert_eq!(rows.len(), 8, "{report}");
    for r in rows {
        assert_eq!(r["visible"], true, "{r}");
        let label = match r["stage"].as_str().unwrap() {
            "detect_push_webhook_first" => "header received → pushed (webhook, first attempt)",
            _ => "header received → pushed (webhook, eventually delivered)",
        };
        assert_eq!(r["label"], label, "{r}");
    }
    for w in json["windows"].as_array().unwrap() {
        let first = &w["stages"]["detect_push_webhook_first"];
        let all = &w["stages"]["detect_push_webhook"];
        let (nf, na) = (
            first["count"].as_u64().unwrap(),
            all["count"].as_u64().unwrap(),
        );
        assert!(nf > 0 && nf < na, "retries are not first attempts: {w}");
        assert!(first["p99_ms"].as_i64().unwrap() < 6_000, "{w}");
        assert!(all["p99_ms"].as_i64().unwrap() >= 6_000, "{w}");
    }
}

/// Run check.cjs against the page at `addr`: screenshots at full width and at 390 px.
async fn browser_check(addr: std::net::SocketAddr, shot: &Path, phone: &Path) -> serde_json::Value {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run scripts/install chromium"
    );
    let modules = repo_root().join("tools/node/node_modules");
    std::fs::create_dir_all(shot.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(shot);
    let _ = std::fs::remove_file(phone);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/check.cjs");
    let url = format!("http://{addr}/latency");
    let out = tokio::time::timeout(
        Duration::from_secs(180),
        Command::new("node")
            .arg(&script)
            .arg(&url)
            .arg(shot)
            .arg(phone)
            .env("PMW_NODE_MODULES", &modules)
            .env("PMW_CHROMIUM", CHROMIUM)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the browser check finishes within 180 s")
    .expect("run node");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "browser check failed:\n{stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("report: {e}\n{stderr}"))
}

/// A just-started stack: Postgres holds a watermark, a push cursor and a fresh pmw-live
/// heartbeat, and the running sampler has measured a few seconds. The headline is the share of
/// the time measured (all of it available), with "measured N s of 1 h" beside it and the window
/// said to be partial, never the few seconds' share of the whole hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_just_started_stack_leads_with_availability_over_the_time_measured() {
    let db = TestDb::new().await;
    let now = UnixMs::now();
    // The heartbeat is dated 10 minutes ahead so that it stays fresh while the test runs.
    db.connect()
        .await
        .batch_execute(&format!(
            "INSERT INTO ingest_cursor (id, block_number, block_hash, updated_ms) VALUES (1, 100, '0x1', {0});
             INSERT INTO push_cursor (slot, block_number, log_index, epoch, updated_ms) VALUES (0, 100, 0, 1, {0});
             INSERT INTO heartbeats (service, instance, pid, started_ms, beat_ms, state) VALUES
               ('pmw-live', 'live-a', 1, {0}, {1}, '{{\"state\": \"ingesting\", \"head\": 100}}');",
            now.0,
            now.0 + 600_000
        ))
        .await
        .unwrap();
    let (svc, addr) = start(db.cfg.clone(), stats_config(500)).await;
    let json = pmw_testkit::eventually_every(
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            let v = json_after(addr, now.0).await;
            (v["availability"]["windows"][0]["sampled_s"].as_u64()? >= 3).then_some(v)
        },
    )
    .await
    .expect("the sampler measured 3 s");
    let w = &json["availability"]["windows"][0];
    assert_eq!(w["push"]["available_share_of_measured"], 1.0, "{w}");
    assert!(
        w["push"]["available_share_of_window"].as_f64().unwrap() < 0.1,
        "{w}"
    );
    assert!(w["sampled_share"].as_f64().unwrap() > 0.0, "{w}");
    assert_eq!(w["coverage"], "partial", "{w}");
    let root = repo_root();
    let report = browser_check(
        addr,
        &root.join("artifacts/stats-dashboard-fresh.png"),
        &root.join("artifacts/stats-dashboard-fresh-390px.png"),
    )
    .await;
    let h = &report["availability"][0];
    assert_eq!(h["window"], "1h", "{report}");
    for part in ["push", "ingest"] {
        assert_eq!(h["parts"][part]["share"], "100.000 %", "{part}: {h}");
        assert_eq!(h["parts"][part]["visible"], true, "{part}: {h}");
    }
    let measured = h["measured"].as_str().unwrap_or_default();
    assert!(
        measured.starts_with("measured ") && measured.contains(" s of 1 h ("),
        "{h}"
    );
    assert_eq!(h["measured_visible"], true, "{h}");
    assert!(
        h["partial"]
            .as_str()
            .is_some_and(|p| p.starts_with("partial window: measured since ")),
        "{h}"
    );
    assert_eq!(report["no_incidents"], "No incidents recorded.", "{report}");
    assert_eq!(report["phone"]["headline_visible"], true, "{report}");
    assert_eq!(report["console_errors"], serde_json::json!([]), "{report}");
    svc.stop().await.unwrap();
}

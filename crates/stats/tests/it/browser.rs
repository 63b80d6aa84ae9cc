//! The dashboard in a real headless Chromium (Debian's `chromium`, driven by `playwright-core`
//! from tools/node): headline figures visible and equal to the JSON, charts present, no console
//! error, no request leaving this machine; a screenshot is saved under `artifacts/`.

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
            push_rows.push(push(b, "webhook", t, t + 2 * lat + 15));
            push_rows.push(push(b, "ws_final", t, t + 3 * lat + 4_000));
        }
    }
    write(&db, &ingest_rows, &push_rows).await;
    // One snapshot for the whole test: the page and both JSON reads show the same figures.
    let (svc, addr) = start(db.cfg.clone(), stats_config(3_600_000)).await;
    let json = json_after(addr, now.0).await;

    let shot = root.join("artifacts/stats-dashboard.png");
    std::fs::create_dir_all(shot.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&shot);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/check.cjs");
    let url = format!("http://{addr}/latency");
    let out = tokio::time::timeout(
        Duration::from_secs(180),
        Command::new("node")
            .arg(&script)
            .arg(&url)
            .arg(&shot)
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
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("report: {e}\n{stderr}"));

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

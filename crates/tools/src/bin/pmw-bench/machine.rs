//! What the numbers were measured on: the machine (CPU model, cores, memory, kernel) and the
//! versions of everything in the path (rustc, pmw's git revision, Postgres, ClickHouse, anvil).

use std::process::Command;

use crate::setup::Bench;

/// `(what, value)` rows for the report.
pub async fn describe(b: &Bench) -> Vec<(String, String)> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let root = pmw_testkit::repo_root();
    let rev = cmd(
        "git",
        &[
            "-C",
            &root.to_string_lossy(),
            "rev-parse",
            "--short=12",
            "HEAD",
        ],
    );
    let dirty = cmd(
        "git",
        &[
            "-C",
            &root.to_string_lossy(),
            "status",
            "--porcelain",
            "--untracked-files=no",
        ],
    );
    let rev = if dirty.is_empty() || dirty == "unknown" {
        rev
    } else {
        format!("{rev} + uncommitted changes")
    };
    let pg = match b.db.pg.get().await {
        Ok(c) => c
            .query_one("SHOW server_version", &[])
            .await
            .map(|r| r.get::<_, String>(0))
            .unwrap_or_else(|_| "unknown".into()),
        Err(_) => "unknown".into(),
    };
    let ch =
        b.db.ch
            .query("SELECT version()")
            .fetch_one::<String>()
            .await
            .unwrap_or_else(|_| "unknown".into());
    let anvil = cmd(
        &pmw_sim::anvil::anvil_binary().to_string_lossy(),
        &["--version"],
    );
    vec![
        ("CPU".into(), format!("{model}, {cores} cores")),
        (
            "memory".into(),
            format!("{:.1} GiB", mem_kib as f64 / 1_048_576.0),
        ),
        ("kernel".into(), format!("Linux {kernel}")),
        ("rustc".into(), cmd("rustc", &["-V"])),
        ("pmw".into(), format!("git {rev}, {}", build())),
        ("PostgreSQL".into(), pg),
        ("ClickHouse".into(), ch),
        (
            "anvil".into(),
            anvil.lines().next().unwrap_or("unknown").to_string(),
        ),
        ("ClickHouse data".into(), ch_data()),
    ]
}

/// Which cargo profile built the binaries (their directory's name).
fn build() -> &'static str {
    match crate::procs::bin_dir() {
        Ok(d) if d.ends_with("release") => "release build",
        _ => "dev (debug) build: figures not representative",
    }
}

/// Where the stack keeps ClickHouse's data (scripts/bench passes it on).
fn ch_data() -> String {
    match std::env::var("PMW_BENCH_CH_DATA") {
        Ok(p) if p.starts_with("/dev/shm") => {
            format!("{p} (tmpfs: in memory, as the dev/test stack runs it)")
        }
        Ok(p) => p,
        Err(_) => "unknown".into(),
    }
}

/// First line of a command's stdout, or `unknown`.
fn cmd(bin: &str, args: &[&str]) -> String {
    Command::new(bin)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The soft limit on open files of this process (children inherit it).
pub fn nofile_limit() -> Option<u64> {
    std::fs::read_to_string("/proc/self/limits")
        .ok()?
        .lines()
        .find(|l| l.starts_with("Max open files"))?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

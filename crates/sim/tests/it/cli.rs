//! The `pmw-sim` binary: `run` against a private anvil writes a report that matches the chain,
//! and `config` prints a world that `--config` reads back.

use std::process::Command;

use pmw_sim::anvil::Anvil;
use pmw_sim::{read_report, SimConfig};

#[tokio::test]
async fn run_emits_matches_and_writes_the_report() {
    let anvil = Anvil::spawn().await.expect("anvil");
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_pmw-sim"))
        .args([
            "--rpc-url",
            &anvil.http_url(),
            "run",
            "--count",
            "5",
            "--matches-per-block",
            "2",
        ])
        .args(["--seed", "3", "--v2-share", "1", "--report"])
        .arg(&report)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["matches"], 5);
    let fills = read_report(&report).unwrap();
    assert_eq!(summary["fills"], fills.len());
    assert!(fills.iter().all(|e| e.version == pmw_sim::Version::V2));
    let matches: std::collections::BTreeSet<_> = fills.iter().map(|e| e.match_id).collect();
    assert_eq!(matches.len(), 5);
    let rpc = pmw_sim::rpc::Rpc::new(&anvil.http_url()).unwrap();
    for e in &fills {
        let r = rpc.receipt(&e.tx_hash).await.unwrap().unwrap();
        assert_eq!(r.block_hash, e.block_hash);
    }
}

#[test]
fn config_round_trips_and_bad_config_exits_78() {
    let out = Command::new(env!("CARGO_BIN_EXE_pmw-sim"))
        .args(["config", "--demo-wallets", "4", "--seed", "77"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let cfg: SimConfig = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((cfg.wallets.len(), cfg.seed), (4, 77));

    let out = Command::new(env!("CARGO_BIN_EXE_pmw-sim"))
        .args(["config", "--demo-wallets", "1"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(78),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

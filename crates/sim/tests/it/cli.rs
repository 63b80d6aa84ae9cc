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

/// `unlisted`: the emitter's code at an address that is no exchange, look-alike matches of the
/// configured wallet there (real `OrderFilled` layout, then `OrdersMatched`), none at the four
/// exchanges; one JSON line per match.
#[tokio::test]
async fn unlisted_emits_look_alike_matches_at_an_address_that_is_no_exchange() {
    let anvil = Anvil::spawn().await.expect("anvil");
    let wallet = "0x00000000000000000000000000000000000a11ce";
    let wallets = format!("{wallet},0x0000000000000000000000000000000000000b0b");
    let out = Command::new(env!("CARGO_BIN_EXE_pmw-sim"))
        .args([
            "--rpc-url",
            &anvil.http_url(),
            "unlisted",
            "--count",
            "2",
            "--abi",
            "1",
        ])
        .args(["--wallets", &wallets])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    let at = pmw_sim::unlisted::DEFAULT_ADDRESS;
    assert!(pmw_sim::Exchange::at(&at).is_none());
    let rpc = pmw_sim::rpc::Rpc::new(&anvil.http_url()).unwrap();
    let v1 = pmw_sim::Version::V1;
    for m in &lines {
        assert_eq!(m["address"], at.to_lower_hex());
        let tx: pmw_sim::B256 = serde_json::from_value(m["tx_hash"].clone()).unwrap();
        let r = rpc.receipt(&tx).await.unwrap().unwrap();
        assert!(
            r.logs.iter().all(|l| l.address == at),
            "only the unlisted emitter logs"
        );
        let fills: Vec<_> = r
            .logs
            .iter()
            .filter(|l| l.topics[0] == v1.order_filled_topic())
            .collect();
        assert_eq!(fills.len(), m["fills"].as_array().unwrap().len());
        assert!(fills
            .iter()
            .all(|l| l.topics.len() == 4 && l.data.0.len() == 5 * 32));
        assert_eq!(r.logs.last().unwrap().topics[0], v1.orders_matched_topic());
        assert_eq!(m["events"].as_u64(), Some(r.logs.len() as u64));
    }
    assert!(lines.iter().any(|m| {
        m["fills"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["maker"] == wallet)
    }));
}

//! `pmwctl decode-log` on hand-written `eth_getLogs` objects (ABI words written out by hand).

use std::io::Write;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_pmwctl");

fn run(stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(BIN)
        .arg("decode-log")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn w(hex: &str) -> String {
    format!("{hex:0>64}")
}

fn v1_buy(emitter: &str) -> String {
    // Maker 0x11…11 buys token 1234 (0x4d2): pays 0.52 collateral for 1.0 share, fee 0.01 shares.
    let data = [w("0"), w("4d2"), w("7ef40"), w("f4240"), w("2710")].concat();
    format!(
        r#"{{"address":"{emitter}","topics":["0xd0a08e8c493f9c94f29311604c9de1b4e8c8d4c06bd0c789af57f2d65bfec0f6","0x{oh}","0x{maker}","0x{taker}"],"data":"0x{data}","blockNumber":"0x4d5e","blockHash":"0x{bh}","transactionHash":"0x{th}","transactionIndex":"0x0","logIndex":"0x7","removed":false}}"#,
        oh = "ab".repeat(32),
        maker = w(&"11".repeat(20)),
        taker = w(&"22".repeat(20)),
        bh = "cd".repeat(32),
        th = "ef".repeat(32),
    )
}

#[test]
fn decodes_a_v1_buy_exactly() {
    let (code, out, err) = run(&v1_buy("0x4bFb41d5B3570DeFd03C39a9A4D8dE6Bd8B8982E"));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["side"], "BUY");
    assert_eq!(v["token_id"], "1234");
    assert_eq!(v["collateral"], "0.52");
    assert_eq!(v["shares"], "1");
    assert_eq!(v["price"], "0.52");
    assert_eq!(v["price_exact"], true);
    assert_eq!(v["fee"], "0.01");
    assert_eq!(v["fee_asset"], "shares");
    assert_eq!(v["maker"], format!("0x{}", "11".repeat(20)));
    assert_eq!(v["taker"], format!("0x{}", "22".repeat(20)));
    assert_eq!(v["exchange_version"], 1);
    assert_eq!(v["block_number"], 0x4d5e);
    assert_eq!(v["cursor"], "000000019806-000007");
}

#[test]
fn refuses_an_unknown_emitter_with_a_clear_error() {
    let (code, out, err) = run(&v1_buy("0x000000000000000000000000000000000000dead"));
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(err.contains("pmwctl decode-log:"), "{err}");
    assert!(
        err.to_lowercase().contains("emitter") || err.contains("allowlist"),
        "{err}"
    );
}

#[test]
fn refuses_bad_json_and_partial_logs() {
    let (code, _, err) = run("{not json");
    assert_eq!(code, 1);
    assert!(err.contains("not JSON"), "{err}");
    let (code, _, err) = run(r#"{"address":"0x4bFb41d5B3570DeFd03C39a9A4D8dE6Bd8B8982E"}"#);
    assert_eq!(code, 1);
    assert!(err.contains("topics") || err.contains("field"), "{err}");
}

//! Shared helpers for pmw-sim's integration tests: a newHeads subscriber over WebSocket, and
//! the event topics exactly as REFERENCES.md lists them.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use pmw_sim::B256;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

/// topic0 values copied from REFERENCES.md ("Polymarket exchange events").
pub const V1_ORDER_FILLED: &str =
    "0xd0a08e8c493f9c94f29311604c9de1b4e8c8d4c06bd0c789af57f2d65bfec0f6";
pub const V1_ORDERS_MATCHED: &str =
    "0x63bf4d16b7fa898ef4c4b2b6d90fd201e9c56313b65638af6088d149d2ce956c";
pub const V2_ORDER_FILLED: &str =
    "0xd543adfd945773f1a62f74f0ee55a5e3b9b1a28262980ba90b1a89f2ea84d8ee";
pub const V2_ORDERS_MATCHED: &str =
    "0x174b3811690657c217184f89418266767c87e4805d09680c39fc9c031c0cab7c";

/// A header as delivered by `eth_subscribe("newHeads")`.
#[derive(Clone, Debug)]
pub struct Head {
    pub number: u64,
    pub hash: B256,
    pub parent_hash: B256,
}

/// Collects newHeads notifications from a WebSocket subscription.
pub struct Heads {
    rx: mpsc::UnboundedReceiver<Head>,
    task: tokio::task::JoinHandle<()>,
}

impl Heads {
    pub async fn subscribe(ws_url: &str) -> Heads {
        let (mut ws, _) = tokio_tungstenite::connect_async(ws_url)
            .await
            .expect("ws connect");
        let req =
            json!({"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": ["newHeads"]});
        ws.send(Message::text(req.to_string()))
            .await
            .expect("subscribe");
        // The subscription id answer comes first.
        loop {
            let msg = ws.next().await.expect("ws open").expect("ws message");
            if let Message::Text(t) = msg {
                let v: Value = serde_json::from_str(&t).unwrap();
                assert!(v["result"].is_string(), "eth_subscribe answered {v}");
                break;
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Some(Ok(msg)) = ws.next().await {
                let Message::Text(t) = msg else { continue };
                let v: Value = serde_json::from_str(&t).unwrap();
                let h = &v["params"]["result"];
                if h.is_null() {
                    continue;
                }
                let head = Head {
                    number: u64::from_str_radix(
                        h["number"].as_str().unwrap().trim_start_matches("0x"),
                        16,
                    )
                    .unwrap(),
                    hash: h["hash"].as_str().unwrap().parse().unwrap(),
                    parent_hash: h["parentHash"].as_str().unwrap().parse().unwrap(),
                };
                if tx.send(head).is_err() {
                    break;
                }
            }
        });
        Heads { rx, task }
    }

    /// The next header, or None after `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<Head> {
        tokio::time::timeout(timeout, self.rx.recv())
            .await
            .ok()
            .flatten()
    }
}

impl Drop for Heads {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// keccak-256 of `s` as 0x-hex, computed here with the sha3 crate.
pub fn keccak_hex(s: &str) -> String {
    use sha3::{Digest, Keccak256};
    format!("0x{}", hex::encode(Keccak256::digest(s.as_bytes())))
}

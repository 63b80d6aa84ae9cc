//! The checker's own watch of anvil's pool, for the pending tier's oracle: every transaction's
//! sender and nonce (`eth_subscribe newPendingTransactions`, then `eth_getTransactionByHash`),
//! so a `replaced` void can be judged after the transaction is gone from the pool.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::oracle::{hex_u64, rpc};

/// The chain as the checker watches it: every pool transaction's sender and nonce (from anvil's
/// `newPendingTransactions` and `eth_getTransactionByHash`), and the head over time.
pub struct ChainWatch {
    /// Transaction hash → (sender, nonce).
    txs: Mutex<HashMap<String, (String, u64)>>,
    http_url: String,
    stop: CancellationToken,
}

impl ChainWatch {
    /// Watch anvil's pool (`ws_url`, `http_url`) until [`ChainWatch::stop`].
    pub fn spawn(ws_url: String, http_url: String) -> Arc<ChainWatch> {
        let stop = CancellationToken::new();
        let watch = Arc::new(ChainWatch {
            txs: Mutex::default(),
            http_url,
            stop: stop.clone(),
        });
        let w = watch.clone();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                if let Err(e) = w.follow_pool(&ws_url, &stop).await {
                    println!("pending oracle: pool subscription ended ({e:#}); again");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        watch
    }

    async fn follow_pool(
        self: &Arc<Self>,
        url: &str,
        stop: &CancellationToken,
    ) -> anyhow::Result<()> {
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await?;
        let sub = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe",
            "params": ["newPendingTransactions"]});
        ws.send(Message::Text(sub.to_string().into())).await?;
        let http = reqwest::Client::new();
        loop {
            let msg = tokio::select! {
                m = ws.next() => m,
                _ = stop.cancelled() => return Ok(()),
            };
            let text = match msg {
                Some(Ok(Message::Text(t))) => t,
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.into()),
                None => anyhow::bail!("eof"),
            };
            let v: Value = serde_json::from_str(&text)?;
            let Some(hash) = v["params"]["result"].as_str() else {
                continue;
            };
            let (me, http, hash) = (self.clone(), http.clone(), hash.to_ascii_lowercase());
            tokio::spawn(async move {
                let got = rpc(
                    &http,
                    &me.http_url,
                    "eth_getTransactionByHash",
                    json!([hash]),
                )
                .await;
                if let Ok(tx) = got {
                    if let (Some(from), Ok(nonce)) = (tx["from"].as_str(), hex_u64(&tx["nonce"])) {
                        let from = from.to_ascii_lowercase();
                        me.txs.lock().unwrap().insert(hash, (from, nonce));
                    }
                }
            });
        }
    }

    /// Stop watching (before the chain goes away).
    pub fn stop(&self) {
        self.stop.cancel();
    }

    pub fn sender(&self, tx: &str) -> Option<(String, u64)> {
        self.txs.lock().unwrap().get(tx).cloned()
    }
}

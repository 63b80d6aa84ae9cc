//! The run's subscribers: the checked and churn accounts with their webhook receivers, the
//! checked accounts' endpoints (made through the API) and every client connected through Caddy;
//! and the apps' extra environment.

use std::time::Duration;

use pmw_testkit::eventually;
use pmw_tools::harness::account;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::faults::{Checked, Churn, World};
use crate::hooks::Hook;
use crate::ws::WsClient;
use crate::{hex, pending, Args, Run};

/// The apps' extra environment: private webhook destinations (the receivers are on loopback),
/// rates for many clients behind one address, and pmw-live's mempool watcher when `pending`.
pub fn drill_env(pending: bool) -> Vec<(&'static str, &'static str)> {
    let mut env = vec![
        ("PMW_API_ALLOW_PRIVATE_WEBHOOKS", "true"),
        ("PMW_PUSH_ALLOW_PRIVATE_WEBHOOKS", "true"),
        ("PMW_API_RATE_PER_SEC", "1000"),
        ("PMW_API_RATE_BURST", "1000"),
        // Every client of the checker is one address behind Caddy.
        ("PMW_API_ANON_RATE_PER_SEC", "1000"),
        ("PMW_API_ANON_RATE_BURST", "1000"),
    ];
    if pending {
        env.extend(pending::live_env());
    }
    env
}

/// The checked accounts: fixed subscriptions, a resuming client and a webhook receiver each.
pub async fn checked_accounts(
    args: &Args,
    run: &Run,
    pg: &tokio_postgres::Client,
    hooks_on: std::net::IpAddr,
) -> Vec<Checked> {
    let wallets = &run.wallets;
    let mut checked = Vec::new();
    for i in 0..args.accounts {
        let mine = vec![wallets[i % 6], wallets[(i + 2) % 6]];
        let (_, key) = account(pg, &format!("check-{i}"), &mine).await;
        let hook = Hook::start(run.seed ^ ((i as u64) << 8), true, hooks_on).await;
        checked.push(Checked {
            wallets: mine.iter().map(hex).collect(),
            client: WsClient::new(&key).with_pending(args.pending_hold_ms > 0),
            hook,
            endpoint: 0,
            key,
        });
    }
    checked
}

/// The churn accounts: one followed wallet to start with, a client and a receiver each.
pub async fn churn_accounts(
    args: &Args,
    run: &Run,
    pg: &tokio_postgres::Client,
    hooks_on: std::net::IpAddr,
) -> Vec<Churn> {
    let wallets = &run.wallets;
    let mut churn = Vec::new();
    for i in 0..args.churn {
        let (_, key) = account(pg, &format!("churn-{i}"), &[wallets[(i + 1) % 6]]).await;
        let hook = Hook::start(run.seed ^ ((1000 + i as u64) << 8), true, hooks_on).await;
        churn.push(Churn {
            client: WsClient::new(&key),
            hook,
            endpoints: Default::default(),
            paths: Default::default(),
            paused: Default::default(),
            follows: std::sync::Mutex::new(vec![(i + 1) % 6]),
        });
    }
    churn
}

/// Each checked account's endpoint, made through the API.
pub async fn with_endpoints(
    w: &World,
    mut checked: Vec<Checked>,
    pending: bool,
) -> anyhow::Result<Vec<Checked>> {
    let events = if pending {
        json!(["trade", "pending"])
    } else {
        json!(["trade"])
    };
    for c in &mut checked {
        let body = json!({"url": c.hook.url(), "events": events});
        let v = w.api("POST", "/v1/webhooks", &c.key, body).await?;
        c.hook.add_secret(v["secret"].as_str().unwrap_or_default());
        c.endpoint = v["id"].as_i64().unwrap_or_default();
    }
    Ok(checked)
}

/// Every client of the world running and connected through Caddy; their stop.
pub async fn connect_clients(w: &World) -> anyhow::Result<CancellationToken> {
    let clients = || {
        w.checked
            .iter()
            .map(|c| &c.client)
            .chain(w.churn.iter().map(|c| &c.client))
    };
    let stop = CancellationToken::new();
    for c in clients() {
        tokio::spawn(c.clone().run(w.site.clone(), stop.clone()));
    }
    let connected = eventually(Duration::from_secs(60), || async {
        clients().all(|c| c.log.lock().unwrap().first_hello_ms.is_some())
    })
    .await;
    anyhow::ensure!(connected, "not every client connected through caddy");
    Ok(stop)
}

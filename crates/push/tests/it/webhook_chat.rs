//! Chat destinations against local Discord, Slack and Telegram receivers that check each
//! service's request shape and play its rate-limit answers: a readable message per trade, one
//! digest carrying every trade held by a rate limit (none dropped, none twice, the delivery
//! records naming the message that carried each), and auto-disable of a dead destination.

use std::collections::HashMap;
use std::time::Duration;

use pmw_core::chat::{ChatKind, ChatTarget};
use pmw_core::message::{stamp, Kind, Market, TradeMessage};
use pmw_core::Cursor;
use pmw_push::webhook::{self, DeliveryKind, NewDelivery, WebhookConfig};
use pmw_testkit::hooks::{ChatReceiver, Play, Service, TELEGRAM_TOKEN};

use crate::webhook_support::{config, eventually, Env};

const WALLET: &str = "0xabcdef0123456789abcdef0123456789abcd0042";

/// A chat endpoint of `service` posting to `rx`, stored as the API stores one.
async fn chat_endpoint(env: &Env, service: Service, rx: &ChatReceiver) -> i64 {
    let target = match service {
        Service::Discord => ChatTarget::new(ChatKind::Discord, Some(&rx.url()), None, None),
        Service::Slack => ChatTarget::new(ChatKind::Slack, Some(&rx.url()), None, None),
        Service::Telegram => ChatTarget::new(
            ChatKind::Telegram,
            None,
            Some(TELEGRAM_TOKEN),
            Some("-1001234567890"),
        ),
    }
    .unwrap();
    let c = env.db.connect().await;
    let shown = target.shown_url();
    let id = pmw_testkit::seed::Endpoint::new(env.account, &shown, &target.stored_text())
        .insert(&c)
        .await;
    let kind = format!("{service:?}").to_lowercase();
    c.execute(
        "UPDATE webhook_endpoints SET kind = $2 WHERE id = $1",
        &[&id, &kind],
    )
    .await
    .unwrap();
    id
}

/// Queue one trade per block for `endpoint` (wallet [`WALLET`], market "Market <block>" when
/// `named`), with the body push renders. Returns the ids.
async fn trades(env: &Env, endpoint: i64, blocks: &[u64], named: bool) -> Vec<String> {
    let items: Vec<NewDelivery> = blocks
        .iter()
        .map(|b| {
            let mut row = pmw_testkit::rows::trade(*b, 0, "0xabcdef0123456789");
            row.maker = WALLET.into();
            row.shares = format!("{b}.5");
            row.collateral = "12.25".into();
            row.price = "0.42".into();
            row.block_time_ms = 1_765_000_000_000;
            let market = named.then(|| Market {
                question: Some(format!("Market {b}?")),
                outcome: Some("Yes".into()),
                slug: Some(format!("market-{b}")),
                event_slug: Some(format!("event-{b}")),
                condition_id: None,
            });
            let body = TradeMessage::from_row(&row, market.as_ref()).to_json();
            let cursor = Cursor::new(*b, 0).unwrap();
            NewDelivery {
                id: webhook::webhook_id(cursor, &row.block_hash, endpoint, DeliveryKind::Trade),
                endpoint_id: endpoint,
                kind: DeliveryKind::Trade,
                cursor,
                payload: stamp(Kind::Trade, &body, 1),
                t_detect_ms: 1_000,
            }
        })
        .collect();
    let mut c = env.db.connect().await;
    let tx = c.transaction().await.unwrap();
    webhook::enqueue(&tx, 1, &items).await.unwrap();
    tx.commit().await.unwrap();
    items.into_iter().map(|i| i.id).collect()
}

/// `(state, message_id)` of each delivery.
async fn records(env: &Env, ids: &[String]) -> Vec<(String, Option<String>)> {
    let c = env.db.connect().await;
    let mut out = Vec::new();
    for id in ids {
        let r = c
            .query_one(
                "SELECT state, message_id FROM webhook_deliveries WHERE id = $1",
                &[id],
            )
            .await
            .unwrap();
        out.push((r.get(0), r.get(1)));
    }
    out
}

async fn all_delivered(env: &Env, ids: &[String]) -> bool {
    records(env, ids)
        .await
        .iter()
        .all(|(s, m)| s == "delivered" && m.is_some())
}

fn cfg_for(rx: &ChatReceiver) -> WebhookConfig {
    WebhookConfig {
        telegram_api: rx.api(),
        ..config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_each_kind_receives_a_readable_message() {
    for service in [Service::Discord, Service::Slack, Service::Telegram] {
        let env = Env::new().await;
        env.db
            .connect()
            .await
            .execute(
                "INSERT INTO subscriptions (account_id, wallet, label, created_ms) VALUES ($1, decode($2, 'hex'), 'Big Whale', 0)",
                &[&env.account, &WALLET[2..].to_string()],
            )
            .await
            .unwrap();
        let rx = ChatReceiver::start(service, vec![Play::Ok]).await;
        let ep = chat_endpoint(&env, service, &rx).await;
        let d = env.dispatcher(1, cfg_for(&rx));
        let named = trades(&env, ep, &[500], true).await;
        assert!(
            eventually(Duration::from_secs(20), || all_delivered(&env, &named)).await,
            "{service:?}"
        );
        let pending = trades(&env, ep, &[501], false).await;
        assert!(
            eventually(Duration::from_secs(20), || all_delivered(&env, &pending)).await,
            "{service:?}"
        );
        d.stop().await.unwrap();
        let hits = rx.hits();
        assert_eq!(hits.len(), 2, "{service:?}: one message per trade");
        for h in &hits {
            assert!(h.violations.is_empty(), "{service:?}: {:?}", h.violations);
            assert!(
                !h.signed,
                "{service:?}: chat posts carry no signature headers"
            );
        }
        let (one, two) = (&hits[0].text, &hits[1].text);
        for part in [
            "BUY",
            "500.5",
            "Yes",
            "0.42",
            "12.25 USDC",
            "Market 500?",
            "Big Whale (0xabcd…0042)",
            "2025-12-06 05:46:40 UTC",
            "https://polymarket.com/event/event-500",
        ] {
            assert!(
                one.contains(part),
                "{service:?}: {part:?} missing from {one}"
            );
        }
        assert!(
            two.contains("market pending") && two.contains("501.5"),
            "{service:?}: {two}"
        );
        if service == Service::Telegram {
            assert_eq!(hits[0].body["chat_id"], "-1001234567890");
            assert_eq!(hits[0].body["parse_mode"], "HTML");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_rate_limited_endpoint_gets_one_digest_with_every_trade() {
    for service in [Service::Discord, Service::Slack, Service::Telegram] {
        let env = Env::new().await;
        // The first message is refused with the service's rate limit (1 s), then all is well.
        let rx = ChatReceiver::start(service, vec![Play::Limit(1.0), Play::Ok]).await;
        let ep = chat_endpoint(&env, service, &rx).await;
        let d = env.dispatcher(1, cfg_for(&rx));
        let mut ids = trades(&env, ep, &[600], true).await;
        assert!(eventually(Duration::from_secs(10), || async { rx.count() >= 1 }).await);
        // Four more while the endpoint is limited: held, never sent one by one.
        ids.extend(trades(&env, ep, &[601, 602, 603, 604], true).await);
        assert!(
            eventually(Duration::from_secs(30), || all_delivered(&env, &ids)).await,
            "{service:?}"
        );
        d.stop().await.unwrap();
        let hits = rx.hits();
        assert_eq!(
            hits.len(),
            2,
            "{service:?}: the refused message, then one digest"
        );
        let digest = &hits[1];
        assert!(digest.violations.is_empty(), "{:?}", digest.violations);
        assert!(
            digest.at_ms - hits[0].at_ms >= 1_000,
            "{service:?}: the wait was honoured"
        );
        for b in 600..=604 {
            assert_eq!(
                digest.text.matches(&format!("Market {b}?")).count(),
                1,
                "{service:?}: trade {b} once in {}",
                digest.text
            );
        }
        // The records: every trade delivered, all by the same message, no attempt counted for
        // the rate limit.
        let recs = records(&env, &ids).await;
        let by_message: HashMap<Option<String>, usize> =
            recs.iter().fold(HashMap::new(), |mut m, (_, id)| {
                *m.entry(id.clone()).or_default() += 1;
                m
            });
        assert_eq!(by_message.len(), 1, "{service:?}: {recs:?}");
        assert_eq!(by_message.values().next(), Some(&5));
        for id in &ids {
            assert_eq!(env.delivery(id).await.attempts, 1, "{service:?}: {id}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_dead_destination_disables_the_endpoint() {
    for service in [Service::Discord, Service::Telegram] {
        let env = Env::new().await;
        let rx = ChatReceiver::start(service, vec![Play::Gone]).await;
        let ep = chat_endpoint(&env, service, &rx).await;
        let d = env.dispatcher(1, cfg_for(&rx));
        let ids = trades(&env, ep, &[700, 701], true).await;
        assert!(
            eventually(Duration::from_secs(20), || async {
                !env.endpoint_state(ep).await.0
            })
            .await,
            "{service:?}: disabled"
        );
        d.stop().await.unwrap();
        let (_, reason) = env.endpoint_state(ep).await;
        let reason = reason.unwrap();
        assert!(reason.contains("the destination is gone"), "{reason}");
        assert!(
            !reason.contains("discordSecretPath") && !reason.contains("AAHsecret"),
            "{reason}"
        );
        for id in &ids {
            assert_eq!(env.delivery(id).await.state, "failed");
        }
    }
}

/// What the process logs, through the production redacting writer.
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture() -> Logs {
        let logs = Logs::default();
        let sink = logs.clone();
        tracing_subscriber::fmt()
            // Everything at debug but tokio_postgres' statement dumps, which would show this
            // test's own plain-text seeding (push never writes a destination).
            .with_env_filter("debug,tokio_postgres=info")
            .with_writer(move || pmw_core::redact::Writer(sink.clone()))
            .try_init()
            .expect("the only subscriber of this test process");
        logs
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_secrets_never_reach_logs_or_stored_errors() {
    let logs = Logs::capture();
    for service in [Service::Discord, Service::Slack, Service::Telegram] {
        let env = Env::new().await;
        // Rate-limited, then gone: every path that logs or stores an error.
        let rx = ChatReceiver::start(service, vec![Play::Limit(1.0), Play::Gone]).await;
        let ep = chat_endpoint(&env, service, &rx).await;
        let d = env.dispatcher(1, cfg_for(&rx));
        let ids = trades(&env, ep, &[800, 801], true).await;
        assert!(
            eventually(Duration::from_secs(20), || async {
                !env.endpoint_state(ep).await.0
            })
            .await,
            "{service:?}: disabled"
        );
        d.stop().await.unwrap();
        let mut stored = vec![env.endpoint_state(ep).await.1.unwrap()];
        for id in &ids {
            stored.extend(env.delivery(id).await.last_error);
        }
        let c = env.db.connect().await;
        let url: String = c
            .query_one("SELECT url FROM webhook_endpoints WHERE id = $1", &[&ep])
            .await
            .unwrap()
            .get(0);
        stored.push(url);
        for s in &stored {
            for secret in [
                "discordSecretPath",
                "slackSecretPath",
                "AAHsecretToken",
                "T0TESTTEAM",
            ] {
                assert!(!s.contains(secret), "{service:?}: {secret} stored in {s}");
            }
        }
    }
    let text = logs.text();
    assert!(
        text.contains("chat endpoint rate limited"),
        "logs captured: {text}"
    );
    assert!(
        text.contains("webhook endpoint disabled"),
        "logs captured: {text}"
    );
    for secret in [
        "discordSecretPath",
        "slackSecretPath",
        "AAHsecretToken",
        "T0TESTTEAM",
        "1234567890/",
    ] {
        assert!(!text.contains(secret), "{secret} logged:\n{text}");
    }
}

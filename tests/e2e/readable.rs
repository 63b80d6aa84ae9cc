//! Readable alerts (issue 45, items 2 and 3) on real traffic: pmw-sim trades on anvil, pmw-live
//! ingests and resolves names from the simulator's Gamma-compatible server, which knows only the
//! first market; pmw-push sends every fill of the followed wallets over the WebSocket, a signed
//! webhook and a Discord, a Slack and a Telegram chat endpoint (local receivers that check each
//! service's request shape). A fill in the known market carries its title, outcome, event slug
//! (and price) everywhere and reads as a card in the chats; a fill in a market never resolved
//! goes out at once without them ("market pending" in the chats), never waiting.

use std::collections::HashMap;
use std::time::Duration;

use pmw_core::chat::{ChatKind, ChatTarget};
use pmw_core::trade::Allowlist;
use pmw_push::webhook::WebhookConfig;
use pmw_testkit::hooks::{ChatReceiver, Play, Receiver, Service, Step, TELEGRAM_TOKEN};
use pmw_testkit::{eventually, eventually_every, ServiceHandle};
use serde_json::Value;

use crate::harness::{connect, Harness};

const WITHIN: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fills_carry_market_names_when_known_and_go_out_without_them_when_not() {
    let mut h = Harness::bare(&[]).await;
    let markets = h.sim.config().markets.clone();
    let known = markets[0].clone();
    // The Gamma-compatible server knows only the first market.
    let (gamma, _gamma) =
        pmw_sim::markets::serve("127.0.0.1:0".parse().unwrap(), vec![known.clone()])
            .await
            .expect("markets server");
    let head = h.sim.rpc().latest_block().await.unwrap().number.0;
    let live = pmw_live::LiveConfig {
        live_start_block: Some(head + 1),
        live_lock_segment_ms: 1_000,
        live_poll_interval_ms: 200,
        gamma_url: format!("http://{gamma}"),
        ..pmw_live::LiveConfig::default()
    };
    let core = h.core();
    h.live = Some(ServiceHandle::spawn(move |stop| {
        pmw_live::run_with(core, live, Allowlist::polymarket(), stop)
    }));
    // Trade until the known market's tokens are resolved (before push starts: its cache then
    // has them from its first read).
    let pg = h.db.connect().await;
    let resolved = eventually_every(WITHIN, Duration::from_millis(300), || async {
        let n: i64 = pg
            .query_one(
                "SELECT count(*) FROM market_names WHERE status = 'resolved'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if n as usize >= known.token_ids.len() {
            return true;
        }
        h.sim.run_matches(2).await.unwrap();
        false
    })
    .await;
    assert!(resolved, "the known market resolved by pmw-live");

    let wallets = h.sim.config().wallets.clone();
    let (account, key) = h.account(&wallets).await;
    let hooks = Receiver::start(vec![Step::status(204)]).await;
    h.endpoint(account, &hooks.url()).await;
    let discord = ChatReceiver::start(Service::Discord, vec![Play::Ok]).await;
    let slack = ChatReceiver::start(Service::Slack, vec![Play::Ok]).await;
    let telegram = ChatReceiver::start(Service::Telegram, vec![Play::Ok]).await;
    let targets = [
        ChatTarget::new(ChatKind::Discord, Some(&discord.url()), None, None),
        ChatTarget::new(ChatKind::Slack, Some(&slack.url()), None, None),
        ChatTarget::new(
            ChatKind::Telegram,
            None,
            Some(TELEGRAM_TOKEN),
            Some("-100777"),
        ),
    ];
    for target in targets {
        let target = target.unwrap();
        let id =
            pmw_testkit::seed::Endpoint::new(account, &target.shown_url(), &target.stored_text())
                .insert(&pg)
                .await;
        pg.execute(
            "UPDATE webhook_endpoints SET kind = $2 WHERE id = $1",
            &[&id, &target.kind.as_str()],
        )
        .await
        .unwrap();
    }
    h.notify().await;
    let hooks_cfg = WebhookConfig {
        allow_private_destinations: true,
        poll_interval: Duration::from_millis(200),
        telegram_api: telegram.api(),
        ..WebhookConfig::default()
    };
    let (_push, addr) =
        crate::harness::start_push(h.core(), "push-a", h.push_config(), hooks_cfg).await;
    let ws = connect(addr, &key, None).await;

    // Trade until fills in the known market and in the others have been pushed.
    let is_known = |f: &Value| {
        known
            .token_ids
            .iter()
            .any(|t| t.to_string() == f["trade"]["token_id"].as_str().unwrap_or(""))
    };
    let frames = || {
        ws.frames()
            .into_iter()
            .filter(|f| f["type"] == "trade")
            .collect::<Vec<Value>>()
    };
    let both = eventually_every(WITHIN, Duration::from_millis(300), || async {
        let f = frames();
        if f.iter().any(is_known) && f.iter().any(|x| !is_known(x)) {
            return true;
        }
        h.sim.run_matches(2).await.unwrap();
        false
    })
    .await;
    assert!(both, "fills in both kinds of market pushed");

    let outcome_of: HashMap<String, String> = known
        .token_ids
        .iter()
        .zip(&known.outcomes)
        .map(|(t, o)| (t.to_string(), o.clone()))
        .collect();
    let check = |what: &str, f: &Value| {
        let token = f["trade"]["token_id"].as_str().unwrap();
        assert!(
            f["trade"]["price"].is_string(),
            "{what}: price always there: {f}"
        );
        if is_known(f) {
            let m = &f["market"];
            assert_eq!(m["question"], known.question.as_str(), "{what}: {f}");
            assert_eq!(m["outcome"], outcome_of[token].as_str(), "{what}: {f}");
            assert_eq!(m["event_slug"], known.slug.as_str(), "{what}: {f}");
        } else {
            assert!(
                f.get("market").is_none(),
                "{what}: no names, no market field: {f}"
            );
        }
    };
    let ws_frames = frames();
    for f in &ws_frames {
        check("websocket", f);
    }
    // The webhook and Discord get the same fills.
    let n = ws_frames.len();
    assert!(
        eventually(WITHIN, || async { hooks.count() >= n }).await,
        "every fill reached the webhook"
    );
    for hit in hooks.hits() {
        check("webhook", &hit.json());
    }
    // Each chat service gets every fill, readable: one line of a card or of a digest each.
    let lines = |d: &ChatReceiver| -> usize {
        d.hits()
            .iter()
            .map(|m| m.text.matches(" shares of ").count() + m.text.matches("\n• ").count())
            .sum()
    };
    for (name, rx) in [
        ("discord", &discord),
        ("slack", &slack),
        ("telegram", &telegram),
    ] {
        assert!(
            eventually(WITHIN, || async { lines(rx) >= n }).await,
            "every fill reached {name}"
        );
        let hits = rx.hits();
        assert!(hits.iter().all(|m| m.violations.is_empty()), "{name}");
        let text: String = hits
            .iter()
            .map(|m| m.text.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(text.contains(&known.question), "{name}: {text}");
        assert!(text.contains("market pending"), "{name}: {text}");
        assert!(
            text.contains(&format!("https://polymarket.com/event/{}", known.slug)),
            "{name}: {text}"
        );
    }
}

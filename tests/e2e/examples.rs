//! The client examples in `examples/` run against a real stack (pmw-live ingesting pmw-sim's
//! trades, pmw-push leading, pmw-api creating the webhook endpoint): each language's WebSocket
//! subscriber receives live trades, stops, and resumes from its stored `resume` position with
//! nothing missed or repeated; its webhook receiver verifies real deliveries with the official
//! Standard Webhooks library and refuses a forged one. The README links each file.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use pmw_api::ApiConfig;
use pmw_core::Cursor;
use pmw_sim::demo_wallets;
use pmw_testkit::{free_port, Http};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::api::{spawn_api, test_config};
use crate::harness::Harness;

const WITHIN: Duration = Duration::from_secs(90);

#[derive(Clone, Copy)]
enum Lang {
    Python,
    Js,
}

fn example(lang: Lang, args: &[&str], env: &[(&str, String)]) -> Child {
    let root = pmw_testkit::repo_root();
    let mut cmd = match lang {
        Lang::Python => {
            let py = root.join("tools/python/.venv/bin/python");
            assert!(py.exists(), "scripts/install python");
            let mut c = Command::new(py);
            c.arg(root.join("examples/python/subscriber.py"));
            c
        }
        Lang::Js => {
            let modules = root.join("tools/examples/node_modules");
            assert!(modules.join("ws").exists(), "scripts/install examples");
            let mut c = Command::new("node");
            c.arg(root.join("examples/js/subscriber.js"))
                .env("NODE_PATH", modules);
            c
        }
    };
    cmd.args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the example")
}

/// Wait for a stderr line containing `what`; the rest of stderr is echoed.
async fn stderr_line(child: &mut Child, what: &str) {
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let found = tokio::time::timeout(WITHIN, async {
        while let Ok(Some(l)) = lines.next_line().await {
            eprintln!("example: {l}");
            if l.contains(what) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "the example never printed {what:?}");
    tokio::spawn(async move {
        while let Ok(Some(l)) = lines.next_line().await {
            eprintln!("example: {l}");
        }
    });
}

/// The example's JSON lines once it exits by itself (successfully).
async fn output(child: Child) -> Vec<Value> {
    let out = tokio::time::timeout(WITHIN, child.wait_with_output())
        .await
        .expect("the example exits after PMW_EXIT_AFTER messages")
        .unwrap();
    assert!(out.status.success(), "example exit: {:?}", out.status);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn cursors(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|v| {
            assert_eq!(v["type"], "trade", "{v}");
            v["cursor"].as_str().unwrap().to_string()
        })
        .collect()
}

async fn run(lang: Lang) {
    let h = Harness::new().await;
    let (_push, push_addr) = h.leader("push-a").await;
    let mine = vec![demo_wallets(6)[0], demo_wallets(6)[3]];
    let (_, key) = h.account(&mine).await;
    let (api_addr, _api) = spawn_api(
        h.core(),
        ApiConfig {
            api_allow_private_webhooks: true,
            ..test_config()
        },
    )
    .await;
    let api = Http::new(api_addr);

    // The webhook receiver, verifying with the official library; a forged request is refused.
    let port = free_port();
    let r = api
        .post(
            "/v1/webhooks",
            &key,
            json!({ "url": format!("http://127.0.0.1:{port}/hook") }),
        )
        .await;
    r.expect(201, None);
    let secret = r.body["secret"].as_str().unwrap().to_string();
    let receiver = example(
        lang,
        &["webhooks", &port.to_string()],
        &[
            ("PMW_WEBHOOK_SECRET", secret),
            ("PMW_EXIT_AFTER", "2".into()),
        ],
    );
    let hook_url = format!("http://127.0.0.1:{port}/hook");
    let forged = loop {
        let sent = reqwest::Client::new()
            .post(&hook_url)
            .header("webhook-id", "msg_forged")
            .header("webhook-timestamp", pmw_core::UnixMs::now().0 / 1000)
            .header(
                "webhook-signature",
                "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            )
            .body(r#"{"type":"trade"}"#)
            .send()
            .await;
        match sent {
            Ok(r) => break r.status().as_u16(),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    assert_eq!(forged, 400, "a forged request is refused");

    // The WebSocket subscriber: live trades, then it stops after 3.
    let dir = tempfile::tempdir().unwrap();
    let resume_file = dir.path().join("resume");
    let env = |n: usize| {
        vec![
            ("PMW_WS_URL", format!("ws://{push_addr}/v1/ws")),
            ("PMW_API_KEY", key.clone()),
            ("PMW_RESUME_FILE", resume_file.display().to_string()),
            ("PMW_EXIT_AFTER", n.to_string()),
        ]
    };
    let mut first = example(lang, &["ws"], &env(3));
    stderr_line(&mut first, "connected").await;
    let mut expected = Vec::new();
    while expected.len() < 6 {
        h.sim.run_matches(12).await.unwrap();
        h.wait_pushed(WITHIN).await;
        expected = h.expected(&mine, Cursor::ORIGIN);
    }
    let expected: Vec<String> = expected.iter().map(Cursor::to_string).collect();
    let got = cursors(&output(first).await);
    assert_eq!(got, expected[..3], "live trades in ledger order");
    let stored = std::fs::read_to_string(&resume_file).unwrap();
    assert!(
        stored.starts_with(&got[2]),
        "resume of the last trade: {stored}"
    );

    // Restarted, it resumes after the stored position: the rest, nothing twice.
    let mut second = example(lang, &["ws"], &env(expected.len() - 3));
    stderr_line(&mut second, "connected").await;
    let rest = cursors(&output(second).await);
    assert_eq!(rest, expected[3..], "resumed with ?since= after {stored}");

    // Two real deliveries verified by the receiver.
    let hooks = output(receiver).await;
    assert_eq!(hooks.len(), 2);
    for m in &hooks {
        assert_eq!(m["type"], "trade", "{m}");
        assert!(expected.contains(&m["cursor"].as_str().unwrap().to_string()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_example_subscribes_resumes_and_verifies() {
    run(Lang::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_example_subscribes_resumes_and_verifies() {
    run(Lang::Js).await;
}

#[test]
fn readme_links_every_example() {
    let root = pmw_testkit::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for file in ["examples/python/subscriber.py", "examples/js/subscriber.js"] {
        assert!(
            PathBuf::from(&root).join(file).is_file(),
            "{file} is missing"
        );
        assert!(
            readme.contains(&format!("]({file})")),
            "README.md must link {file}"
        );
    }
}

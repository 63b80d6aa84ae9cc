//! `pmwctl status` and `pmwctl diag` against a real push leader (in-process): leader and epoch,
//! cursors and lag, last round, webhook backlog by age; the runbook's read interval, listener,
//! xmin holders and hot tables; the push standby, and a warning when there is none.

use std::time::Duration;

use pmw_core::UnixMs;
use pmw_testkit::seed::Endpoint;
use pmw_testkit::{
    assert_eventually, eventually_every, run_bin, workspace_bin, ServiceHandle, TestDb,
};
use serde_json::Value;

async fn ctl(db: &TestDb, args: &[&str]) -> (i32, String, String) {
    let mut env = db.env();
    // No chain here: the RPC head is reported as unknown.
    env.push(("PMW_RPC_HTTP_URL".into(), "http://127.0.0.1:9".into()));
    run_bin(
        &workspace_bin("pmwctl"),
        &env,
        args,
        Duration::from_secs(60),
    )
    .await
}

async fn start_push(db: &TestDb) -> ServiceHandle {
    let push = pmw_push::PushConfig {
        push_listen: "127.0.0.1:0".parse().unwrap(),
        push_lock_segment_ms: 1_000,
        push_fallback_ms: 200,
        ..pmw_push::PushConfig::default()
    };
    crate::harness::start_push(db.cfg.clone(), "push-a", push, Default::default())
        .await
        .0
}

/// The push leader's heartbeat says it led a round while listening, and its push and finality
/// cursors exist.
const LEADER_AFTER_A_ROUND: &str = "SELECT EXISTS (SELECT 1 FROM push_epoch e JOIN heartbeats h \
     ON h.service = 'pmw-push' AND h.instance = e.leader WHERE e.slot = 0 \
     AND h.state->>'role' = 'leader' AND h.state->>'listener' = 'listen' \
     AND (h.state->>'last_round_ms')::bigint > 0) \
     AND EXISTS (SELECT 1 FROM push_cursor WHERE slot = 0) \
     AND EXISTS (SELECT 1 FROM final_cursor WHERE slot = 0)";

async fn seed(db: &TestDb) {
    let c = db.connect().await;
    c.batch_execute(
        "INSERT INTO ingest_cursor (id, block_number, block_hash, updated_ms) VALUES (1, 120, '0xabc', 0);
         INSERT INTO finalized_cursor (id, block_number, block_hash, updated_ms) VALUES (1, 116, '0xdef', 0)",
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_leader_cursors_lag_and_backlog() {
    let db = TestDb::new().await;
    seed(&db).await;
    let push = start_push(&db).await;
    let c = db.connect().await;
    // The leader has beaten after a round, listening, with both its cursors written.
    assert_eventually!(
        Duration::from_secs(30),
        c.query_one(LEADER_AFTER_A_ROUND, &[])
            .await
            .unwrap()
            .get::<_, bool>(0),
        "the push leader never beat after a round"
    );
    // Webhook backlog: pending deliveries of several ages, one failed.
    let now = UnixMs::now().0;
    let acct: i64 = c
        .query_one(
            "INSERT INTO accounts (name, plan, created_ms) VALUES ('a', 'free', 0) RETURNING id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let ep = Endpoint {
        enabled: false,
        ..Endpoint::new(acct, "https://example.com/", "whsec_x")
    }
    .insert(&c)
    .await;
    for (i, (age_ms, state)) in [
        (1_000, "pending"),
        (30_000, "pending"),
        (120_000, "pending"),
        (7_200_000, "pending"),
        (5_000, "failed"),
    ]
    .iter()
    .enumerate()
    {
        c.execute(
            "INSERT INTO webhook_deliveries (id, endpoint_id, kind, block_number, log_index, payload, state, \
               next_attempt_ms, t_detect_ms, created_ms) VALUES ($1, $2, 'trade', 1, $3, '{}', $4, $5, 0, $5)",
            &[&format!("d{i}"), &ep, &(i as i32), state, &(now - age_ms)],
        )
        .await
        .unwrap();
    }

    let (code, out, err) = ctl(&db, &["status", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["leader"]["instance"], "push-a");
    assert_eq!(s["leader"]["epoch"], 1);
    assert_eq!(s["leader"]["role"], "leader");
    assert_eq!(s["leader"]["listener"], "listen");
    assert!(
        s["leader"]["last_round_age_ms"].as_i64().unwrap() < 5_000,
        "{s}"
    );
    assert_eq!(s["ingest"]["block"], 120);
    assert_eq!(
        s["push"]["block"], 120,
        "the first leader starts at the watermark"
    );
    assert_eq!(s["lag_blocks"]["push"], 0);
    assert_eq!(s["finalized"]["block"], 116);
    assert_eq!(s["lag_blocks"]["finalized"], 4);
    assert_eq!(
        s["final_lane"]["block"], 116,
        "the finality lane starts after the finalized block"
    );
    assert_eq!(s["lag_blocks"]["final_lane"], 0);
    assert_eq!(s["push_backlog_trades"], 0);
    assert!(s["chain_head"].is_null() && s["lag_blocks"]["ingest"].is_null());
    assert_eq!(s["webhooks"]["pending"], 4);
    assert_eq!(s["webhooks"]["failed"], 1);
    let counts: Vec<i64> = s["webhooks"]["by_age"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].as_i64().unwrap())
        .collect();
    assert_eq!(counts, [1, 1, 1, 0, 1]);

    let (code, out, _) = ctl(&db, &["status"]).await;
    assert_eq!(code, 0);
    for needle in [
        "push leader   push-a",
        "epoch 1",
        "push cursor   000000000120-",
        "finalized     block 116",
        "final lane    000000000116-999999",
        "4 pending",
        "listener listen",
    ] {
        assert!(out.contains(needle), "{needle:?} missing in:\n{out}");
    }
    push.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diag_runs_the_runbook() {
    let db = TestDb::new().await;
    seed(&db).await;
    let push = start_push(&db).await;
    // Something holding a snapshot: an open repeatable-read transaction that has read.
    let holder = db.connect().await;
    holder.batch_execute("SET application_name = 'xmin-holder'; BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM push_cursor").await.unwrap();

    let (code, out, err) = ctl(&db, &["diag", "--json", "--sample-secs", "3"]).await;
    assert_eq!(code, 0, "{err}");
    let d: Value = serde_json::from_str(&out).unwrap();
    let interval = &d["read_interval"];
    assert!(
        interval["distinct_rounds_seen"].as_u64().unwrap() >= 2,
        "{interval}"
    );
    assert!(
        interval["mean_interval_ms"].as_f64().is_some(),
        "{interval}"
    );
    assert_eq!(d["listener"]["listener"], "listen");
    assert_eq!(d["listener"]["listen_sessions"], 1);
    let holders = d["xmin_holders"].as_array().unwrap();
    assert!(
        holders
            .iter()
            .any(|h| h["application_name"] == "xmin-holder"),
        "{holders:?}"
    );
    let tables: Vec<&str> = d["hot_tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["table"].as_str().unwrap())
        .collect();
    assert_eq!(
        tables,
        [
            "heartbeats",
            "ingest_cursor",
            "push_cursor",
            "push_epoch",
            "webhook_cursor",
            "ws_claims"
        ]
    );
    assert!(d["hot_tables"][0]["total_bytes"].as_i64().unwrap() > 0);

    let (code, out, _) = ctl(&db, &["diag", "--sample-secs", "1"]).await;
    assert_eq!(code, 0);
    for needle in [
        "1. push read interval",
        "2. listener: push waits on LISTEN",
        "3. backend_xmin holders",
        "xmin-holder",
        "ingest_cursor",
    ] {
        assert!(out.contains(needle), "{needle:?} missing in:\n{out}");
    }
    holder.batch_execute("ROLLBACK").await.unwrap();
    push.stop().await.unwrap();
}

/// The warnings of a `pmwctl status --json` about push standbys (the test's in-process services
/// run with or without `PMW_SECRET_KEYS`, as the test's environment has it: a warning of its own).
/// The push standby warnings (the live and stats pairs warn on their own: `pmwctl` tests).
fn standby_warnings(s: &Value) -> Vec<String> {
    s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|w| w.contains("push standby"))
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_standby_and_warns_when_there_is_none() {
    let db = TestDb::new().await;
    seed(&db).await;
    let leader = start_push(&db).await;
    let (code, out, err) = ctl(&db, &["status", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["standbys"], serde_json::json!([]), "{s}");
    let warnings = standby_warnings(&s);
    assert_eq!(warnings.len(), 1, "{s}");
    assert!(warnings[0].contains("no push standby"), "{s}");
    let (_, out, _) = ctl(&db, &["status"]).await;
    assert!(out.contains("push standby  none"), "{out}");
    assert!(out.contains("WARNING       no push standby"), "{out}");

    // A standby waits on the lock: shown with its pid, no warning.
    let mut core = db.cfg.clone();
    core.instance = Some("push-b".into());
    let push = pmw_push::PushConfig {
        push_listen: "127.0.0.1:0".parse().unwrap(),
        push_lock_segment_ms: 1_000,
        ..pmw_push::PushConfig::default()
    };
    let hooks = pmw_push::webhook::WebhookConfig::default();
    let standby =
        ServiceHandle::spawn(move |stop| pmw_push::run_with(core, push, hooks, stop, None));
    let every = Duration::from_millis(200);
    let shown = eventually_every(Duration::from_secs(30), every, || async {
        let (code, out, err) = ctl(&db, &["status", "--json"]).await;
        assert_eq!(code, 0, "{err}");
        let s: Value = serde_json::from_str(&out).unwrap();
        if s["standbys"][0]["fresh"] == true {
            Ok(s)
        } else {
            Err(s)
        }
    })
    .await;
    let s = shown.unwrap_or_else(|s| panic!("no standby shown: {s}"));
    assert_eq!(s["standbys"][0]["instance"], "push-b", "{s}");
    assert_eq!(s["standbys"][0]["pid"], std::process::id(), "{s}");
    assert_eq!(standby_warnings(&s), Vec::<String>::new(), "{s}");
    // It beats while it waits, not once: once it has waited 4 s, its heartbeat is recent.
    let recent = eventually_every(Duration::from_secs(24), every, || async {
        let (_, out, _) = ctl(&db, &["status", "--json"]).await;
        let s: Value = serde_json::from_str(&out).unwrap();
        let b = &s["standbys"][0];
        let waited = b["waiting_age_ms"].as_i64().unwrap() >= 4_000;
        if waited && b["beat_age_ms"].as_i64().unwrap() < 3_000 {
            Ok(())
        } else {
            Err(s)
        }
    })
    .await;
    if let Err(s) = recent {
        panic!("the standby beats every second: {s}");
    }
    let (_, out, _) = ctl(&db, &["status"]).await;
    assert!(out.contains("push standby  push-b (pid "), "{out}");
    assert!(!out.contains("no push standby"), "{out}");

    // The standby stops: the warning is back at once (it says `stopped` on the way out).
    standby.stop().await.unwrap();
    let (_, out, _) = ctl(&db, &["status", "--json"]).await;
    let s: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["standbys"], serde_json::json!([]), "{s}");
    assert_eq!(standby_warnings(&s).len(), 1, "{s}");
    leader.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_audited_watermark_its_trail_and_counts_per_window() {
    let db = TestDb::new().await;
    seed(&db).await;
    let c = db.connect().await;
    let now = UnixMs::now().0;
    // Blocks 100 and 120 recorded 40 s apart; audited through 100; one range 30 min ago (2
    // missing), one 2 days ago (1 extra).
    c.batch_execute(&format!(
        "INSERT INTO chain_blocks (block_number, block_hash, parent_hash, block_time_ms, t_detect_ms, backfilled, trade_count) \
         VALUES (100, '0x64', '0x63', 1000000, 0, false, 0), (120, '0x78', '0x77', 1040000, 0, false, 0);
         INSERT INTO audit_cursor (id, block_number, updated_ms) VALUES (1, 100, {now});
         INSERT INTO audit_ranges (from_block, to_block, fills_checked, missing, extra, audited_ms, head_block, to_block_time_ms) \
         VALUES (91, 100, 17, 2, 0, {}, 110, 1000000), (1, 90, 40, 0, 1, {}, 95, 990000);",
        now - 1_800_000,
        now - 2 * 86_400_000
    ))
    .await
    .unwrap();
    let (code, out, err) = ctl(&db, &["status", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let s: Value = serde_json::from_str(&out).unwrap();
    let a = &s["audit"];
    assert_eq!(a["block"], 100, "{a}");
    assert_eq!(a["trail_blocks"], 20, "{a}");
    assert_eq!(a["trail_ms"], 40_000, "{a}");
    let w = |name: &str| {
        a["windows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["window"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (
            w("1h")["fills_checked"].clone(),
            w("1h")["missing"].clone(),
            w("1h")["extra"].clone()
        ),
        (17.into(), 2.into(), 0.into())
    );
    assert_eq!(
        (
            w("7d")["fills_checked"].clone(),
            w("7d")["missing"].clone(),
            w("7d")["extra"].clone()
        ),
        (57.into(), 2.into(), 1.into())
    );
    let (code, out, _) = ctl(&db, &["status"]).await;
    assert_eq!(code, 0);
    for needle in [
        "audit         through block 100",
        "20 blocks (40.0 s of block time) behind ingest",
        "last 1h   17 fills checked, 2 missing, 0 extra",
        "last 30d  57 fills checked, 2 missing, 1 extra",
    ] {
        assert!(out.contains(needle), "{needle:?} missing in:\n{out}");
    }
}

//! `pmwctl watch` against a real push leader (pmw-sim trading on anvil, pmw-live ingesting,
//! pmw-push in-process on a fixed port): it prints every trade of the followed wallets once, in
//! ledger order, keeps its cursor file, and after the leader restarts (close 1012, refused
//! connections while no leader listens) reconnects and resumes with `since`, missing nothing.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use pmw_core::{Cursor, UnixMs};
use pmw_sim::Emitted;
use pmw_testkit::{
    assert_eventually, bound_within, free_port, observe_for, workspace_bin, ServiceHandle,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;

use crate::harness::{spawn_push, Harness};

const WITHIN: Duration = Duration::from_secs(60);

async fn leader(core: &pmw_core::CoreConfig, instance: &str, port: u16) -> ServiceHandle {
    let push = pmw_push::PushConfig {
        push_listen: SocketAddr::from(([127, 0, 0, 1], port)),
        push_lock_segment_ms: 1_000,
        push_ws_heartbeat_ms: 1_000,
        ..pmw_push::PushConfig::default()
    };
    let (h, rx) = spawn_push(core.clone(), instance, push, Default::default());
    bound_within(rx, WITHIN).await;
    h
}

/// Lines from a child's pipe.
fn lines<R: tokio::io::AsyncRead + Unpin + Send + 'static>(
    r: R,
) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut l = BufReader::new(r).lines();
        while let Ok(Some(line)) = l.next_line().await {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

async fn wait_line(
    rx: &mut mpsc::UnboundedReceiver<String>,
    what: &str,
    seen: &mut Vec<String>,
) -> String {
    loop {
        let line = tokio::time::timeout(WITHIN, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no line containing {what:?}; so far: {seen:#?}"))
            .expect("watch exited");
        seen.push(line.clone());
        if line.contains(what) {
            return line;
        }
    }
}

fn mine(fills: &[Emitted], wallets: &BTreeSet<pmw_core::Address>) -> Vec<Cursor> {
    fills
        .iter()
        .filter(|e| wallets.contains(&e.maker))
        .map(|e| Cursor {
            block: e.block_number,
            log_index: e.log_index as u32,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_trades_and_resumes_after_a_leader_restart() {
    let h = Harness::new().await;
    let (db, sim, core) = (&h.db, &h.sim, h.core());

    // An account following two of the simulator's wallets.
    let wallets: BTreeSet<pmw_core::Address> =
        sim.config().wallets.iter().take(2).copied().collect();
    let mut c = db.connect().await;
    let account = pmw_core::pg::accounts::create_account(&c, "watcher", None, "pro")
        .await
        .unwrap();
    let key = pmw_core::pg::accounts::create_key(&mut c, account.id, "watch")
        .await
        .unwrap()
        .key;
    for w in &wallets {
        c.execute(
            "INSERT INTO subscriptions (account_id, wallet, created_ms) VALUES ($1, $2, $3)",
            &[&account.id, &w.as_bytes().as_slice(), &UnixMs::now().0],
        )
        .await
        .unwrap();
    }

    let port = free_port();
    let push_a = leader(&core, "push-a", port).await;
    let dir = tempfile_dir();
    let cursor_file = dir.join("cursor");
    let mut child = Command::new(workspace_bin("pmwctl"))
        .args([
            "watch",
            "--key",
            &key,
            "--url",
            &format!("ws://127.0.0.1:{port}/v1/ws"),
            "--verbose",
            "--cursor-file",
        ])
        .arg(&cursor_file)
        .envs(db.env())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = lines(child.stdout.take().unwrap());
    let mut err = lines(child.stderr.take().unwrap());
    let mut log = Vec::new();
    wait_line(&mut err, "hello", &mut log).await;

    // Trades while push-a leads.
    let mut expected = mine(&sim.run_matches(4).await.unwrap(), &wallets);
    assert!(
        !expected.is_empty(),
        "the simulator traded the followed wallets"
    );
    let mut printed: Vec<Cursor> = Vec::new();
    while printed.len() < expected.len() {
        let line = wait_line(&mut out, "", &mut log).await;
        printed.push(line.split_whitespace().next().unwrap().parse().unwrap());
    }

    // The leader restarts; trades happen while no leader listens.
    push_a.stop().await.unwrap();
    wait_line(&mut err, "close 1012", &mut log).await;
    expected.extend(mine(&sim.run_matches(4).await.unwrap(), &wallets));
    wait_line(&mut err, "reconnecting", &mut log).await;
    let push_b = leader(&core, "push-b", port).await;
    wait_line(&mut err, "hello", &mut log).await;
    expected.extend(mine(&sim.run_matches(3).await.unwrap(), &wallets));
    while printed.len() < expected.len() {
        let line = wait_line(&mut out, "", &mut log).await;
        printed.push(line.split_whitespace().next().unwrap().parse().unwrap());
    }
    // Negative check: nothing beyond the owed trades is printed within the window.
    observe_for(Duration::from_millis(500)).await;
    while let Ok(line) = out.try_recv() {
        printed.push(line.split_whitespace().next().unwrap().parse().unwrap());
    }
    expected.sort();
    assert_eq!(
        printed, expected,
        "every trade once, in ledger order, across the restart"
    );
    // The file holds the resume position: the last trade's cursor and its block hash prefix.
    let saved = std::fs::read_to_string(&cursor_file).unwrap();
    let (saved, hash) = saved.trim().split_once(':').expect("<cursor>:<hash>");
    assert_eq!(
        saved.parse::<Cursor>().unwrap(),
        *expected.last().unwrap(),
        "the cursor file holds the last trade"
    );
    assert_eq!(hash.len(), 8, "{hash}");
    assert!(
        log.iter().any(|l| l.contains("BUY") || l.contains("SELL")),
        "{log:#?}"
    );

    // SIGTERM: a clean stop.
    let pid = child.id().unwrap();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let status = tokio::time::timeout(WITHIN, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));

    // Trades pushed while no client is connected; a new watch resumes from the cursor file and
    // gets exactly those (replayed by push from `since`).
    let missed = mine(&sim.run_matches(3).await.unwrap(), &wallets);
    assert!(!missed.is_empty());
    let head = sim.rpc().latest_block().await.unwrap().number.0 as i64;
    assert_eventually!(
        WITHIN,
        c.query_one("SELECT block_number FROM push_cursor WHERE slot = 0", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
            >= head,
        "push did not reach {head}"
    );
    let mut again = Command::new(workspace_bin("pmwctl"))
        .args([
            "watch",
            "--key",
            &key,
            "--url",
            &format!("ws://127.0.0.1:{port}/v1/ws"),
            "--cursor-file",
        ])
        .arg(&cursor_file)
        .envs(db.env())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = lines(again.stdout.take().unwrap());
    let mut replayed: Vec<Cursor> = Vec::new();
    while replayed.len() < missed.len() {
        let line = wait_line(&mut out, "", &mut log).await;
        replayed.push(line.split_whitespace().next().unwrap().parse().unwrap());
    }
    // Negative check: nothing more is printed within the window.
    observe_for(Duration::from_millis(300)).await;
    assert!(out.try_recv().is_err(), "nothing printed twice");
    let mut missed = missed;
    missed.sort();
    assert_eq!(replayed, missed);
    let pid = again.id().unwrap();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert_eq!(
        tokio::time::timeout(WITHIN, again.wait())
            .await
            .unwrap()
            .unwrap()
            .code(),
        Some(0)
    );
    push_b.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "pmwctl-watch-{}-{}",
        std::process::id(),
        UnixMs::now().0
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

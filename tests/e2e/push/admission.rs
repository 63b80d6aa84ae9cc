//! Attacks on `/v1/ws` admission: a key revoked between the connect's key check and its session
//! grant must not get a session (no later index change would close it), and a client cannot
//! make the server buffer a large frame.

use std::time::Duration;

use pmw_sim::demo_wallets;
use pmw_testkit::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::WITHIN;
use crate::harness::{change_as_api, closed_with, connect, first_of, key_id, Harness};

/// The race of issue 30 item 7, made deterministic: the grant of the second session waits on a
/// lock of `plans` (which only the grant reads) while the key is revoked and the leader's index
/// applies the revocation (the first session's close proves it); then the grant goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_between_its_check_and_its_grant_gets_no_session() {
    let h = Harness::new().await;
    let (account, key) = h.account(&demo_wallets(1)).await;
    let pg = h.db.connect().await;
    let key_id = key_id(&pg, account).await;
    let (push, addr) = h.leader("push-a").await;
    let mut first = connect(addr, &key, None).await;
    first_of(&mut first, "hello").await;

    let mut locker = h.db.connect().await;
    let lock = locker.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE plans IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let second = connect(addr, &key, None).await;
    let waiting = eventually(WITHIN, || async {
        let n: i64 = pg
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'plans'::regclass",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        n > 0
    })
    .await;
    assert!(waiting, "the second session's grant never waited on plans");

    let revoke = format!("UPDATE api_keys SET revoked_ms = 1 WHERE id = {key_id}");
    change_as_api(&pg, &revoke).await;
    let what = "the first session is closed once the index has the revocation";
    closed_with(first, 1008, WITHIN, what).await;
    lock.rollback().await.unwrap();

    let what = "a session granted after its key was revoked is refused";
    let seen = closed_with(second, 1008, WITHIN, what).await;
    assert!(
        !seen.frames.iter().any(|f| f["type"] == "hello"),
        "the revoked key got a session: {:?}",
        seen.frames
    );
    push.stop().await.unwrap();
}

/// A frame header announcing 4 MiB is refused at once (close 1009, or the connection dropped),
/// without the server waiting for, or buffering, the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_frame_larger_than_the_protocol_needs_is_refused_at_its_header() {
    let h = Harness::new().await;
    let (_, key) = h.account(&demo_wallets(1)).await;
    let (push, addr) = h.leader("push-a").await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let upgrade = format!(
        "GET /v1/ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Authorization: Bearer {key}\r\n\r\n"
    );
    s.write_all(upgrade.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");

    // A masked text frame announcing 4 MiB, then 16 KiB of it, then nothing.
    let mut frame = vec![0x81, 0x80 | 127];
    frame.extend_from_slice(&(4u64 << 20).to_be_bytes());
    frame.extend_from_slice(&[1, 2, 3, 4]);
    frame.extend(std::iter::repeat_n(b'x', 16 * 1024));
    s.write_all(&frame).await.unwrap();

    // Read what the server sends (hello, maybe heartbeats) until it closes: a close frame
    // (opcode 8) or the end of the stream. A server that waits for the rest never does.
    let mut got = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            if let Some(code) = close_code(&got) {
                return Some(code);
            }
        }
    })
    .await
    .expect("the server waited for the rest of a 4 MiB frame");
    if let Some(code) = ended {
        assert_eq!(code, 1009, "closed as too big");
    }
    push.stop().await.unwrap();
}

/// The code of the first close frame in `bytes` (unmasked server frames), if one is complete.
fn close_code(mut bytes: &[u8]) -> Option<u16> {
    while bytes.len() >= 2 {
        let op = bytes[0] & 0x0f;
        let (len, at) = match bytes[1] & 0x7f {
            126 if bytes.len() >= 4 => (u16::from_be_bytes([bytes[2], bytes[3]]) as usize, 4),
            127 if bytes.len() >= 10 => {
                let mut l = [0u8; 8];
                l.copy_from_slice(&bytes[2..10]);
                (u64::from_be_bytes(l) as usize, 10)
            }
            126 | 127 => return None,
            n => (n as usize, 2),
        };
        if bytes.len() < at + len {
            return None;
        }
        if op == 8 && len >= 2 {
            return Some(u16::from_be_bytes([bytes[at], bytes[at + 1]]));
        }
        bytes = &bytes[at + len..];
    }
    None
}

/// A resume position the ledger has not reached (and no reorg could explain) is refused with the
/// reason, not accepted into a session that would wait, silent, forever; one the ledger has
/// reached still resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_position_ahead_of_the_ledger_is_refused_with_the_reason() {
    let mut h = Harness::new().await;
    let (_, key) = h.account(&demo_wallets(1)).await;
    let (push, addr) = h.leader("push-a").await;
    h.start_live().await;
    h.trade(1, Duration::from_millis(300), 2).await;
    h.wait_pushed(WITHIN).await;
    let bogus = "999999999999-000000".parse().unwrap();
    let what = "a session resuming from a position the ledger never reached is refused";
    let seen = closed_with(connect(addr, &key, Some(bogus)).await, 1008, WITHIN, what).await;
    assert!(
        !seen.frames.iter().any(|f| f["type"] == "hello"),
        "{:?}",
        seen.frames
    );
    let mut ok = connect(addr, &key, Some(pmw_core::Cursor::ORIGIN)).await;
    first_of(&mut ok, "hello").await;
    push.stop().await.unwrap();
}

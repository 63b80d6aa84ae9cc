//! WebSocket clients in a child process: this binary run as `pmw-bench --worker ADDR` holds a
//! [`Fleet`] of one server and streams every sample to its parent, which records it in its own
//! [`Collector`]. Edge mode's fan-out needs ~50k client sockets, more than one process may open
//! where the hard open-file limit cannot be raised (20k in the bench's container), so each edge
//! gets its own client process. Owns both ends of the line protocol on the worker's stdin/stdout:
//!
//! - parent → worker: `account KEY WALLET,WALLET…` (client `i` uses the `i mod n`-th),
//!   `grow N` (→ `grown FAILED LIVE`), `state` (→ `state LIVE FAILED`, `follow WALLET N`…,
//!   `end`, after every sample so far was sent), `quit`;
//! - worker → parent, any time: `s BLOCK T_DETECT_MS T_PUSH_MS RECV_US` per received trade.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use pmw_core::Address;
use std::io::{BufRead, Write};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::clients::{Collector, Fleet, Sample};
use crate::setup::Account;

/// The worker: serve the protocol until `quit` or the end of stdin. Stdin and stdout are read
/// and written by a thread each (plain blocking I/O, off the runtime).
pub async fn serve(addr: SocketAddr) -> anyhow::Result<()> {
    let collector = Arc::new(Collector::default());
    let mut fleet = Fleet::new(addr, collector.clone());
    let mut accounts: Vec<Account> = Vec::new();
    let (line_tx, mut lines) = mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    let (out, out_rx) = std::sync::mpsc::channel::<String>();
    let writer = std::thread::spawn(move || {
        let mut o = std::io::stdout().lock();
        for text in out_rx {
            if o.write_all(text.as_bytes())
                .and_then(|_| o.flush())
                .is_err()
            {
                break;
            }
        }
    });
    let mut sent = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        let line = tokio::select! {
            l = lines.recv() => l,
            _ = tick.tick() => {
                sent = flush(&collector, sent, &out);
                continue;
            }
        };
        let Some(line) = line else { break };
        let mut it = line.split_whitespace();
        match it.next() {
            Some("account") => {
                let key = it.next().context("account without a key")?.to_string();
                let wallets = it
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .filter(|w| !w.is_empty())
                    .map(|w| w.parse::<Address>().map_err(|e| anyhow::anyhow!("{e}")))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                accounts.push(Account {
                    id: 0,
                    key,
                    wallets,
                });
            }
            Some("grow") => {
                let n: usize = it.next().context("grow without a count")?.parse()?;
                let failed = fleet.grow(n, &accounts).await;
                sent = flush(&collector, sent, &out);
                let _ = out.send(format!("grown {failed} {}\n", fleet.live()));
            }
            Some("state") => {
                sent = flush(&collector, sent, &out);
                let mut text = format!("state {} {}\n", fleet.live(), fleet.failed);
                for (w, n) in fleet.followers() {
                    text.push_str(&format!("follow {w} {n}\n"));
                }
                text.push_str("end\n");
                let _ = out.send(text);
            }
            Some("quit") => break,
            _ => {}
        }
    }
    fleet.clear().await;
    drop(out);
    let _ = writer.join();
    Ok(())
}

/// Send the samples recorded since `sent`; the new count.
fn flush(c: &Collector, sent: usize, out: &std::sync::mpsc::Sender<String>) -> usize {
    let new = c.since(sent);
    if new.is_empty() {
        return sent;
    }
    let mut text = String::with_capacity(new.len() * 48);
    for s in &new {
        text.push_str(&format!(
            "s {} {} {} {}\n",
            s.block, s.detect_ms, s.push_ms, s.recv_us
        ));
    }
    let _ = out.send(text);
    sent + new.len()
}

/// What a worker reported in answer to `state`.
#[derive(Default)]
pub struct State {
    pub live: usize,
    pub failed: usize,
    pub followers: BTreeMap<Address, usize>,
}

/// The parent's end: one worker process, its samples recorded in `collector` as they arrive.
pub struct Remote {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::UnboundedReceiver<String>,
    reader: JoinHandle<()>,
}

impl Remote {
    /// Start a worker for the server at `addr`, its clients using `accounts` in turn.
    pub async fn spawn(
        addr: SocketAddr,
        accounts: &[Account],
        collector: Arc<Collector>,
        log: &Path,
    ) -> anyhow::Result<Remote> {
        let err =
            std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--worker", &addr.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .context("start a client worker")?;
        let stdin = child.stdin.take().context("worker stdin")?;
        let stdout = child.stdout.take().context("worker stdout")?;
        let (tx, replies) = mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match line.strip_prefix("s ").and_then(parse_sample) {
                    Some(s) => collector.push(s),
                    None => {
                        if tx.send(line).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let mut r = Remote {
            child,
            stdin,
            replies,
            reader,
        };
        let mut text = String::new();
        for a in accounts {
            let ws: Vec<String> = a.wallets.iter().map(|w| w.to_string()).collect();
            text.push_str(&format!("account {} {}\n", a.key, ws.join(",")));
        }
        r.send(&text).await?;
        Ok(r)
    }

    async fn send(&mut self, text: &str) -> anyhow::Result<()> {
        self.stdin.write_all(text.as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    async fn reply(&mut self, within: Duration) -> anyhow::Result<String> {
        match tokio::time::timeout(within, self.replies.recv()).await {
            Ok(Some(l)) => Ok(l),
            Ok(None) => bail!("a client worker exited"),
            Err(_) => bail!("a client worker did not answer within {within:?}"),
        }
    }

    /// Grow to `n` sessions; how many of the new ones failed.
    pub async fn grow(&mut self, n: usize) -> anyhow::Result<usize> {
        self.send(&format!("grow {n}\n")).await?;
        let l = self.reply(Duration::from_secs(900)).await?;
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["grown", failed, _live] => Ok(failed.parse()?),
            _ => bail!("client worker: unexpected answer {l:?}"),
        }
    }

    /// Open sessions, failed connects so far, and followers per wallet; every sample received
    /// before the answer is in the collector when this returns.
    pub async fn state(&mut self) -> anyhow::Result<State> {
        self.send("state\n").await?;
        let mut st = State::default();
        loop {
            let l = self.reply(Duration::from_secs(60)).await?;
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                ["state", live, failed] => {
                    st.live = live.parse()?;
                    st.failed = failed.parse()?;
                }
                ["follow", w, n] => {
                    let w: Address = w.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
                    st.followers.insert(w, n.parse()?);
                }
                ["end"] => return Ok(st),
                _ => bail!("client worker: unexpected answer {l:?}"),
            }
        }
    }

    /// Close every session and end the worker (killed after 30 s).
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let _ = self.send("quit\n").await;
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            self.child.kill().await?;
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.reader).await;
        Ok(())
    }
}

/// `BLOCK T_DETECT_MS T_PUSH_MS RECV_US`.
fn parse_sample(s: &str) -> Option<Sample> {
    let mut it = s.split(' ').map(|v| v.parse::<i64>().ok());
    Some(Sample {
        block: it.next()?? as u64,
        detect_ms: it.next()??,
        push_ms: it.next()??,
        recv_us: it.next()??,
    })
}

//! A TCP proxy a test can break: put it between a service and a real server (e.g. live and
//! anvil's WebSocket), then cut every open connection and refuse new ones for a while, freeze
//! it (connections are accepted and never answered: a hung server), or delay everything the
//! server sends by a set time (a slow provider: its pushed heads and its answers come late).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A running proxy to `target`.
pub struct TcpProxy {
    pub addr: SocketAddr,
    state: Arc<State>,
    stop: CancellationToken,
}

struct State {
    generation: Mutex<CancellationToken>,
    refusing: AtomicBool,
    frozen: AtomicBool,
    accepted: AtomicU64,
    /// Milliseconds every server → client byte is held back.
    delay_ms: AtomicU64,
}

impl TcpProxy {
    pub async fn start(target: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        TcpProxy::serve(listener, target)
    }

    /// A proxy listening on `listen` (e.g. another local address, same port as `target`).
    pub async fn start_on(listen: SocketAddr, target: SocketAddr) -> std::io::Result<TcpProxy> {
        Ok(TcpProxy::serve(TcpListener::bind(listen).await?, target))
    }

    fn serve(listener: TcpListener, target: SocketAddr) -> TcpProxy {
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            generation: Mutex::new(CancellationToken::new()),
            refusing: AtomicBool::new(false),
            frozen: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            delay_ms: AtomicU64::new(0),
        });
        let stop = CancellationToken::new();
        let (st, stp) = (state.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let (inbound, _) = tokio::select! {
                    r = listener.accept() => match r { Ok(c) => c, Err(_) => continue },
                    _ = stp.cancelled() => return,
                };
                if st.refusing.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                st.accepted.fetch_add(1, Ordering::SeqCst);
                let cut = st.generation.lock().unwrap().clone();
                if st.frozen.load(Ordering::SeqCst) {
                    // Hold the connection open, unanswered, until the next cut or thaw.
                    tokio::spawn(async move {
                        cut.cancelled().await;
                        drop(inbound);
                    });
                    continue;
                }
                let st = st.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let (client_r, client_w) = inbound.into_split();
                    let (server_r, server_w) = outbound.into_split();
                    tokio::select! {
                        _ = async { tokio::join!(pump(client_r, server_w, &st, false), pump(server_r, client_w, &st, true)) } => {}
                        _ = cut.cancelled() => {}
                    }
                });
            }
        });
        TcpProxy { addr, state, stop }
    }

    /// Close every open connection now; new ones are refused until [`TcpProxy::restore`].
    pub fn cut(&self) {
        self.state.refusing.store(true, Ordering::SeqCst);
        self.new_generation();
    }

    /// Accept connections again.
    pub fn restore(&self) {
        self.state.refusing.store(false, Ordering::SeqCst);
    }

    /// A hung server: open connections stop forwarding (held open, nothing passes either way)
    /// and new ones are accepted and never answered. A hung server closes nothing: closing here
    /// made a request in flight fail at once, an error rather than a hang.
    pub fn freeze(&self) {
        self.state.frozen.store(true, Ordering::SeqCst);
    }

    /// Forward again; connections held while frozen are closed.
    pub fn thaw(&self) {
        self.state.frozen.store(false, Ordering::SeqCst);
        self.new_generation();
    }

    fn new_generation(&self) {
        let mut g = self.state.generation.lock().unwrap();
        g.cancel();
        *g = CancellationToken::new();
    }

    /// Hold back everything the server sends for `d` from now on (open connections included:
    /// a subscription's pushes come late too). `Duration::ZERO` forwards at once again.
    pub fn set_delay(&self, d: Duration) {
        self.state
            .delay_ms
            .store(d.as_millis() as u64, Ordering::SeqCst);
    }

    /// Connections accepted (and forwarded) so far.
    pub fn accepted(&self) -> u64 {
        self.state.accepted.load(Ordering::SeqCst)
    }
}

/// Copy `from` to `to` until either ends; with `delayed`, each chunk is written its delay after
/// it was read (order kept), the delay read from the state as the chunk arrives. While the proxy
/// is frozen nothing is written (the connection's cut, at thaw, closes it).
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, st: &State, delayed: bool) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let ms = if delayed {
                st.delay_ms.load(Ordering::SeqCst)
            } else {
                0
            };
            let due = Instant::now() + Duration::from_millis(ms);
            if tx.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let hold_while_frozen = || async {
        if st.frozen.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    };
    let write = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            hold_while_frozen().await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        hold_while_frozen().await;
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.stop.cancel();
        self.state.generation.lock().unwrap().cancel();
    }
}

//! A TCP proxy a test can break: put it between a service and a real server (e.g. live and
//! anvil's WebSocket), then cut every open connection and refuse new ones for a while, or freeze
//! it (connections are accepted and never answered: a hung server).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
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
}

impl TcpProxy {
    pub async fn start(target: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            generation: Mutex::new(CancellationToken::new()),
            refusing: AtomicBool::new(false),
            frozen: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
        });
        let stop = CancellationToken::new();
        let (st, stp) = (state.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let (mut inbound, _) = tokio::select! {
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
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
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

    /// A hung server: close every open connection, then accept new ones and never answer them.
    pub fn freeze(&self) {
        self.state.frozen.store(true, Ordering::SeqCst);
        self.new_generation();
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

    /// Connections accepted (and forwarded) so far.
    pub fn accepted(&self) -> u64 {
        self.state.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.stop.cancel();
        self.state.generation.lock().unwrap().cancel();
    }
}

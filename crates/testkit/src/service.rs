//! Running a service in-process: its `run` future on the test runtime with its own shutdown token,
//! optionally waiting for the address it reports once it serves.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use pmw_core::ServiceError;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A service running in-process.
pub struct ServiceHandle {
    pub shutdown: CancellationToken,
    join: JoinHandle<Result<(), ServiceError>>,
}

impl ServiceHandle {
    /// Spawn `run(shutdown)`.
    pub fn spawn<F, Fut>(run: F) -> ServiceHandle
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = Result<(), ServiceError>> + Send + 'static,
    {
        let shutdown = CancellationToken::new();
        let service = run(shutdown.clone());
        // A service that returns on its own with an error says so at once (a test waiting for
        // its address otherwise only sees the sender dropped).
        let join = tokio::spawn(async move {
            let out = service.await;
            if let Err(e) = &out {
                eprintln!("service returned an error: {e}");
            }
            out
        });
        ServiceHandle { shutdown, join }
    }

    /// Spawn `run(shutdown, bound)`, a service that sends its address on `bound` once it serves
    /// (a leader: once it leads); returns the receiver of that address.
    pub fn spawn_bound<F, Fut>(run: F) -> (ServiceHandle, oneshot::Receiver<SocketAddr>)
    where
        F: FnOnce(CancellationToken, oneshot::Sender<SocketAddr>) -> Fut,
        Fut: Future<Output = Result<(), ServiceError>> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        (ServiceHandle::spawn(move |stop| run(stop, tx)), rx)
    }

    /// [`ServiceHandle::spawn_bound`], then wait (at most `within`) for the address.
    pub async fn start_bound<F, Fut>(within: Duration, run: F) -> (ServiceHandle, SocketAddr)
    where
        F: FnOnce(CancellationToken, oneshot::Sender<SocketAddr>) -> Fut,
        Fut: Future<Output = Result<(), ServiceError>> + Send + 'static,
    {
        let (handle, rx) = ServiceHandle::spawn_bound(run);
        (handle, bound_within(rx, within).await)
    }

    /// Whether the service has returned.
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }

    /// Cancel and wait for the outcome.
    pub async fn stop(self) -> Result<(), ServiceError> {
        self.shutdown.cancel();
        self.join.await.expect("service task panicked")
    }

    /// Wait for the service to return by itself.
    pub async fn join(self) -> Result<(), ServiceError> {
        self.join.await.expect("service task panicked")
    }
}

/// The address a service reports on `rx`, within `within`.
pub async fn bound_within(rx: oneshot::Receiver<SocketAddr>, within: Duration) -> SocketAddr {
    tokio::time::timeout(within, rx)
        .await
        .unwrap_or_else(|_| panic!("the service serves within {within:?}"))
        .expect("the service reports its address")
}

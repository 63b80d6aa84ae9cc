//! Running a service in-process: its `run` future on the test runtime with its own shutdown token.

use std::future::Future;

use pmw_core::ServiceError;
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
        let join = tokio::spawn(run(shutdown.clone()));
        ServiceHandle { shutdown, join }
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

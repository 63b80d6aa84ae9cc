//! Webhook receivers: one real HTTP server (axum) per endpoint on its own 127.0.0.1 port, each
//! answering 204 at once and recording receive time minus the body's `t_detect_ms` in the
//! shared [`Collector`]. Signatures are not checked here (the push tests verify them with the
//! official library); the receivers are as cheap as a receiver can be, so the figure is push's.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use tokio::task::JoinHandle;

use crate::clients::{now_us, Collector};

/// Running receivers; they stop when this is dropped.
pub struct Receivers {
    pub urls: Vec<String>,
    tasks: Vec<JoinHandle<()>>,
}

impl Receivers {
    /// Start `n` receivers recording into `collector`.
    pub async fn start(n: usize, collector: Arc<Collector>) -> anyhow::Result<Receivers> {
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(collector);
        let mut urls = Vec::with_capacity(n);
        let mut tasks = Vec::with_capacity(n);
        for _ in 0..n {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            urls.push(format!("http://{}/hook", listener.local_addr()?));
            let app = app.clone();
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }));
        }
        Ok(Receivers { urls, tasks })
    }
}

impl Drop for Receivers {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn receive(State(c): State<Arc<Collector>>, body: Bytes) -> StatusCode {
    let recv = now_us();
    if let Ok(text) = std::str::from_utf8(&body) {
        c.record(text, recv);
    }
    StatusCode::NO_CONTENT
}

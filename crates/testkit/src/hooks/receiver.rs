//! A scripted webhook receiver: a real axum HTTP server on 127.0.0.1:0 that records every request
//! (as it arrives, before answering) and answers with the step of that request's number (the last
//! step repeats, or the steps cycle), optionally after a delay or after the test releases a gate
//! permit.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::sync::Semaphore;

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Hit {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub user_agent: String,
    pub body: Vec<u8>,
    pub at: Instant,
    /// Wall clock of arrival (ms).
    pub at_ms: i64,
}

impl Hit {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("json body")
    }
}

/// The answer to one request.
#[derive(Debug, Clone)]
pub struct Step {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub delay: Duration,
}

impl Step {
    pub fn status(status: u16) -> Step {
        Step {
            status,
            headers: vec![],
            delay: Duration::ZERO,
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Step {
        self.headers.push((name, value.into()));
        self
    }

    pub fn delay(mut self, d: Duration) -> Step {
        self.delay = d;
        self
    }
}

struct Inner {
    steps: Vec<Step>,
    hits: Mutex<Vec<Hit>>,
    gate: Option<Arc<Semaphore>>,
    cycle: bool,
}

/// A running receiver (stopped when dropped).
pub struct Receiver {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start(steps: Vec<Step>) -> Receiver {
        Receiver::spawn(steps, None, false).await
    }

    /// Request `n` is answered with step `n % steps.len()`: the script repeats forever.
    pub async fn cycling(steps: Vec<Step>) -> Receiver {
        Receiver::spawn(steps, None, true).await
    }

    /// Every request waits for a permit from [`Receiver::release`] before it is answered.
    pub async fn gated(steps: Vec<Step>) -> Receiver {
        Receiver::spawn(steps, Some(Arc::new(Semaphore::new(0))), false).await
    }

    async fn spawn(steps: Vec<Step>, gate: Option<Arc<Semaphore>>, cycle: bool) -> Receiver {
        assert!(!steps.is_empty());
        let inner = Arc::new(Inner {
            steps,
            hits: Mutex::new(Vec::new()),
            gate,
            cycle,
        });
        let app = Router::new().fallback(handle).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { addr, inner, task }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.addr.port())
    }

    pub fn release(&self, n: usize) {
        self.inner
            .gate
            .as_ref()
            .expect("gated receiver")
            .add_permits(n);
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.inner.hits.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.inner.hits.lock().unwrap().len()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let n = {
        let mut hits = inner.hits.lock().unwrap();
        hits.push(Hit {
            id: h("webhook-id"),
            timestamp: h("webhook-timestamp"),
            signature: h("webhook-signature"),
            user_agent: h("user-agent"),
            body: body.to_vec(),
            at: Instant::now(),
            at_ms: pmw_core::UnixMs::now().as_i64(),
        });
        hits.len() - 1
    };
    let step = if inner.cycle {
        inner.steps[n % inner.steps.len()].clone()
    } else {
        inner.steps[n.min(inner.steps.len() - 1)].clone()
    };
    if let Some(gate) = &inner.gate {
        gate.acquire().await.unwrap().forget();
    }
    if !step.delay.is_zero() {
        tokio::time::sleep(step.delay).await;
    }
    let mut out = HeaderMap::new();
    for (name, value) in &step.headers {
        out.insert(
            HeaderName::from_static(name),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    (StatusCode::from_u16(step.status).unwrap(), out).into_response()
}

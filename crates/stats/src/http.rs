//! The HTTP side: `GET /latency` (the page) and `GET /latency.json` (the same figures plus
//! `diagnostics`), served from the in-memory snapshot on a loopback listener.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use pmw_core::UnixMs;

use crate::page::{self, Freshness};
use crate::snapshot::Snapshot;

/// A snapshot older than this many refresh intervals is flagged as stale.
const STALE_AFTER_INTERVALS: u64 = 3;

/// Content-Security-Policy of the page: nothing may be loaded from anywhere.
pub const PAGE_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; \
base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The JSON body: the snapshot and how fresh it is.
#[derive(serde::Serialize)]
struct Served<'a> {
    #[serde(flatten)]
    snapshot: &'a Snapshot,
    stale: bool,
    refresh_interval_ms: u64,
    last_refresh_error: Option<String>,
}

#[derive(Default)]
struct Inner {
    snapshot: Option<Arc<Snapshot>>,
    /// The page of `snapshot`, rendered once per refresh.
    page: Option<Arc<String>>,
    last_error: Option<String>,
}

/// The state shared by the refresh loop and the handlers.
pub struct Shared {
    inner: Mutex<Inner>,
    refresh_interval_ms: u64,
}

impl Shared {
    pub fn new(refresh_interval_ms: u64) -> Arc<Shared> {
        Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            refresh_interval_ms,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publish a new snapshot (and clear the last error).
    pub fn publish(&self, snapshot: Snapshot) {
        let fresh = Freshness {
            refresh_interval_ms: self.refresh_interval_ms,
            ..Freshness::default()
        };
        let html = page::render(&snapshot, &fresh);
        let mut g = self.lock();
        g.snapshot = Some(Arc::new(snapshot));
        g.page = Some(Arc::new(html));
        g.last_error = None;
    }

    /// Record a failed refresh; the last good snapshot stays.
    pub fn failed(&self, error: String) {
        self.lock().last_error = Some(error);
    }

    pub fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.lock().snapshot.clone()
    }

    fn freshness(&self, s: &Snapshot, last_error: Option<String>) -> Freshness {
        let age = UnixMs::now().0.saturating_sub(s.generated_at_ms);
        Freshness {
            stale: age > (self.refresh_interval_ms * STALE_AFTER_INTERVALS) as i64,
            refresh_interval_ms: self.refresh_interval_ms,
            last_error,
        }
    }
}

/// The router of the stats service.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        // For Caddy's active health check: only the pair's leader binds, a frozen one does not
        // answer (Caddy then sends the dashboard to the other member).
        .route("/health", get(|| async { "ok" }))
        .route("/latency", get(page_handler))
        .route("/latency.json", get(json_handler))
        .with_state(shared)
}

fn with_headers(mut r: Response, content_type: &'static str, csp: bool) -> Response {
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if csp {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(PAGE_CSP),
        );
    }
    r
}

async fn page_handler(State(shared): State<Arc<Shared>>) -> Response {
    let (snapshot, cached, last_error) = {
        let g = shared.lock();
        (g.snapshot.clone(), g.page.clone(), g.last_error.clone())
    };
    let ct = "text/html; charset=utf-8";
    let Some(s) = snapshot else {
        let r = (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "5")],
            page::pending(last_error.as_deref()),
        )
            .into_response();
        return with_headers(r, ct, true);
    };
    let fresh = shared.freshness(&s, last_error);
    let body = match cached {
        Some(html) if !fresh.stale && fresh.last_error.is_none() => (*html).clone(),
        _ => page::render(&s, &fresh),
    };
    with_headers((StatusCode::OK, body).into_response(), ct, true)
}

async fn json_handler(State(shared): State<Arc<Shared>>) -> Response {
    let (snapshot, last_error) = {
        let g = shared.lock();
        (g.snapshot.clone(), g.last_error.clone())
    };
    let ct = "application/json";
    let Some(s) = snapshot else {
        let body = serde_json::json!({"error": {
            "code": "not_ready",
            "message": "latency figures are being computed",
        }});
        let r = (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "5")],
            body.to_string(),
        )
            .into_response();
        return with_headers(r, ct, false);
    };
    let fresh = shared.freshness(&s, last_error);
    let served = Served {
        snapshot: &s,
        stale: fresh.stale,
        refresh_interval_ms: fresh.refresh_interval_ms,
        last_refresh_error: fresh.last_error,
    };
    let body = match serde_json::to_string(&served) {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(error = %e, "snapshot serialisation failed");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    };
    with_headers((StatusCode::OK, body).into_response(), ct, false)
}

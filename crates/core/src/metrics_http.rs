//! The private `/metrics` port of the services that have no HTTP server of their own (pmw-live,
//! both pmw-push instances, pmw-stats): an axum router on a loopback address, `GET /metrics` →
//! the Prometheus text exposition, any other path 404, any other method 405 ([`start`]). The
//! recorder it renders is [`crate::metrics`]'s.

use std::net::SocketAddr;

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The exposition's content type (Prometheus text format 0.0.4).
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Bind `addr` and serve `/metrics` until `shutdown`. Returns the bound address (port 0 picks a
/// free one).
pub async fn serve(addr: SocketAddr, shutdown: CancellationToken) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        let served = axum::serve(listener, router())
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "metrics server stopped");
        }
    });
    Ok(bound)
}

/// Everything a service does for its metrics port: install the recorder, set
/// `pmw_build_info{service,version,revision} 1`, serve `/metrics` on `addr`. A port that cannot
/// be bound is logged (`metrics not served`) and never stops the service: the scrape then fails
/// and `up == 0` says so. `None` then, else the bound address.
pub async fn start(
    service: &str,
    addr: SocketAddr,
    shutdown: &CancellationToken,
) -> Option<SocketAddr> {
    crate::metrics::install();
    crate::metrics::build_info(service);
    match serve(addr, shutdown.child_token()).await {
        Ok(bound) => {
            tracing::info!(%bound, "metrics served at /metrics");
            Some(bound)
        }
        Err(e) => {
            tracing::error!(%addr, error = %e, "metrics not served: cannot bind");
            None
        }
    }
}

fn router() -> Router {
    Router::new()
        .route("/metrics", get(exposition))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found\n") })
}

async fn exposition() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, EXPOSITION)],
        crate::metrics::render(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn request(addr: SocketAddr, method: &str, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let head = format!("{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        s.write_all(head.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_metrics_with_build_info_and_404_elsewhere() {
        let stop = CancellationToken::new();
        let addr = start("pmw-unit", "127.0.0.1:0".parse().unwrap(), &stop)
            .await
            .expect("bound");
        metrics::counter!("pmw_unit_served_total").increment(3);
        let text = request(addr, "GET", "/metrics").await;
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(
            text.contains(&format!("content-type: {EXPOSITION}")),
            "{text}"
        );
        assert!(text.contains("pmw_unit_served_total 3"), "{text}");
        let info = format!(
            r#"pmw_build_info{{service="pmw-unit",version="{}",revision="{}"}} 1"#,
            crate::build_info::VERSION,
            crate::build_info::REVISION
        );
        assert!(text.contains(&info), "{text}");
        assert!(request(addr, "GET", "/other")
            .await
            .starts_with("HTTP/1.1 404"));
        assert!(request(addr, "POST", "/metrics")
            .await
            .starts_with("HTTP/1.1 405"));
        // A port in use is reported, not fatal.
        assert_eq!(start("pmw-unit", addr, &stop).await, None);
        stop.cancel();
    }
}

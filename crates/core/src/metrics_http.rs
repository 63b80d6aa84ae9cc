//! The private `/metrics` port of the services that have no HTTP server of their own (pmw-live,
//! both pmw-push instances, pmw-stats): a minimal HTTP/1.1 responder on a loopback address,
//! `GET /metrics` → the Prometheus text exposition, anything else 404, one request per
//! connection. Re-exported as [`crate::metrics::serve`] and [`crate::metrics::start`].

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The largest request head read; anything longer is answered 400.
const MAX_HEAD: usize = 8 * 1024;
/// A client that does not finish its request (or read the answer) within this is dropped.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Bind `addr` and serve `/metrics` until `shutdown`. Returns the bound address (port 0 picks a
/// free one).
pub async fn serve(addr: SocketAddr, shutdown: CancellationToken) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let conn = tokio::select! {
                _ = shutdown.cancelled() => return,
                c = listener.accept() => c,
            };
            match conn {
                Ok((stream, _)) => {
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(IO_TIMEOUT, answer(stream)).await;
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
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

async fn answer(mut stream: TcpStream) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return respond(&mut stream, "400 Bad Request", "text/plain", "too long\n").await;
        }
    }
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let mut parts = std::str::from_utf8(line).unwrap_or_default().split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => {
            let body = crate::metrics::render();
            respond(
                &mut stream,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
            )
            .await
        }
        ("GET", _) => respond(&mut stream, "404 Not Found", "text/plain", "not found\n").await,
        _ => {
            respond(
                &mut stream,
                "405 Method Not Allowed",
                "text/plain",
                "GET only\n",
            )
            .await
        }
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
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
        let text = get(addr, "/metrics").await;
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("pmw_unit_served_total 3"), "{text}");
        let info = format!(
            r#"pmw_build_info{{service="pmw-unit",version="{}",revision="{}"}} 1"#,
            crate::build_info::VERSION,
            crate::build_info::REVISION
        );
        assert!(text.contains(&info), "{text}");
        assert!(get(addr, "/other").await.starts_with("HTTP/1.1 404"));
        // A port in use is reported, not fatal.
        assert_eq!(start("pmw-unit", addr, &stop).await, None);
        stop.cancel();
    }
}

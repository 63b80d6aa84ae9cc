//! The edge's own limits and headers (issue 30, item 12), through the real Caddy running the
//! production Caddyfile in front of a stub upstream (the API, push and stats routes all reach
//! it): no `Server` header (Caddy's or the upstream's), HSTS on a TLS site and not over plain
//! HTTP, 431 for request headers over the limit, a client trickling its headers cut off after
//! read_header, an idle keep-alive connection closed, and a proxied WebSocket that outlives the
//! read_body timeout.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::routing::get;
use futures::{SinkExt, StreamExt};
use pmw_testkit::{eventually, free_port};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The timeouts the test gives Caddy (production: 10s, 30s, 2m).
const READ_HEADER: Duration = Duration::from_secs(1);
const READ_BODY: Duration = Duration::from_secs(2);
const IDLE: Duration = Duration::from_secs(2);

/// An upstream that answers everything with 200 and a `Server` header of its own, `/health` for
/// Caddy's active health check of push, and a WebSocket echo on `/v1/ws`.
async fn upstream() -> SocketAddr {
    let app = axum::Router::new()
        .route("/health", get(|| async { "ok" }))
        .route(
            "/v1/ws",
            get(|ws: WebSocketUpgrade| async {
                ws.on_upgrade(|mut socket| async move {
                    while let Some(Ok(msg)) = socket.recv().await {
                        if let Message::Text(t) = msg {
                            if socket.send(Message::Text(t)).await.is_err() {
                                break;
                            }
                        }
                    }
                })
            }),
        )
        .fallback(|| async { ([("server", "upstream/1.0")], "ok") });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The real Caddy with the production Caddyfile; killed on drop.
struct Edge {
    port: u16,
    base: String,
    _child: tokio::process::Child,
    _home: tempfile::TempDir,
}

impl Edge {
    async fn start(scheme: &str) -> Edge {
        let up = upstream().await.to_string();
        let port = free_port();
        let home = tempfile::tempdir().unwrap();
        let secs = |d: Duration| format!("{}s", d.as_secs());
        let child = pmw_testkit::caddy(
            home.path(),
            &[
                ("PMW_SITE", format!("{scheme}://127.0.0.1:{port}")),
                ("PMW_API", up.clone()),
                ("PMW_PUSH_A", up.clone()),
                ("PMW_PUSH_B", format!("127.0.0.1:{}", free_port())),
                ("PMW_STATS", up.clone()),
                ("PMW_CADDY_ADMIN", format!("127.0.0.1:{}", free_port())),
                ("PMW_CADDY_HTTP_PORT", free_port().to_string()),
                ("PMW_CADDY_READ_HEADER_TIMEOUT", secs(READ_HEADER)),
                ("PMW_CADDY_READ_BODY_TIMEOUT", secs(READ_BODY)),
                ("PMW_CADDY_IDLE_TIMEOUT", secs(IDLE)),
            ],
        );
        let edge = Edge {
            port,
            base: format!("{scheme}://127.0.0.1:{port}"),
            _child: child,
            _home: home,
        };
        let up = eventually(Duration::from_secs(30), || async {
            edge.curl(&["/v1/health"]).await.0 == 200
        })
        .await;
        assert!(up, "caddy does not serve {}", edge.base);
        edge
    }

    /// `curl -k` a path (plus extra arguments): the status and the response headers, lowercase.
    async fn curl(&self, args: &[&str]) -> (u16, String) {
        let (path, extra) = args.split_first().unwrap();
        let out = tokio::process::Command::new("curl")
            .args(["-sk", "-o", "/dev/null", "-D", "-", "--max-time", "10"])
            .args(extra)
            .arg(format!("{}{path}", self.base))
            .output()
            .await
            .expect("curl is installed");
        let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
        let status = head
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, head)
    }
}

/// How long a raw connection that sent `sent` stays open (at most `limit`), reading whatever
/// Caddy answers.
async fn open_for(port: u16, sent: &[u8], limit: Duration) -> Duration {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    conn.write_all(sent).await.unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 4096];
    let closed = tokio::time::timeout(limit, async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "caddy kept the connection open for {limit:?} after {:?}",
        String::from_utf8_lossy(sent)
    );
    t.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_edge_limits_and_headers_over_plain_http() {
    let edge = Edge::start("http").await;

    // No Server header (neither Caddy's nor the upstream's) and no HSTS over plain HTTP.
    let (status, head) = edge.curl(&["/v1/health"]).await;
    assert_eq!(status, 200, "{head}");
    assert!(!head.contains("\nserver:"), "a Server header: {head}");
    assert!(
        !head.contains("strict-transport-security"),
        "HSTS over HTTP: {head}"
    );
    // Nor on the answers Caddy makes itself (the body limit's 413, the hidden /metrics).
    let (status, head) = edge
        .curl(&[
            "/v1/keys",
            "-X",
            "POST",
            "-H",
            "Content-Length: 10000000",
            "--data",
            "x",
        ])
        .await;
    assert_eq!(status, 413, "{head}");
    assert!(
        !head.contains("\nserver:"),
        "a Server header on the 413: {head}"
    );
    let (status, head) = edge.curl(&["/metrics"]).await;
    assert_eq!(status, 404, "{head}");
    assert!(
        !head.contains("\nserver:"),
        "a Server header on the 404: {head}"
    );

    // Request headers over the limit (16 KB) end with 431, never reach the upstream.
    let big = format!("X-Big: {}", "a".repeat(32 * 1024));
    let (status, head) = edge.curl(&["/v1/health", "-H", &big]).await;
    assert_eq!(status, 431, "{head}");
    let fine = format!("X-Fine: {}", "a".repeat(8 * 1024));
    assert_eq!(edge.curl(&["/v1/health", "-H", &fine]).await.0, 200);

    // A client that trickles its headers (slowloris) is cut off after read_header.
    let open = open_for(
        edge.port,
        b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert!(
        open >= READ_HEADER / 2 && open < READ_HEADER + Duration::from_secs(3),
        "a half-sent request held its connection {open:?} (read_header {READ_HEADER:?})"
    );
    // A client that sends its headers but not the body it announced is cut off after read_body.
    let open = open_for(
        edge.port,
        b"POST /v1/keys HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nx",
        Duration::from_secs(10),
    )
    .await;
    assert!(
        open < READ_BODY + Duration::from_secs(3),
        "a half-sent body held its connection {open:?} (read_body {READ_BODY:?})"
    );
    // An idle keep-alive connection is closed after the idle timeout.
    let open = open_for(
        edge.port,
        b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert!(
        open >= IDLE / 2 && open < IDLE + Duration::from_secs(3),
        "an idle keep-alive connection stayed open {open:?} (idle {IDLE:?})"
    );

    // A proxied WebSocket is not a slow request: it outlives read_body and idle.
    let (mut ws, _) =
        tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{}/v1/ws", edge.port))
            .await
            .expect("WebSocket upgrade through caddy");
    tokio::time::sleep(READ_BODY.max(IDLE) + Duration::from_secs(1)).await;
    ws.send(tokio_tungstenite::tungstenite::Message::text("still here"))
        .await
        .expect("the WebSocket is open past read_body");
    let echo = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("an echo within 5 s")
        .expect("the WebSocket is open")
        .expect("a frame");
    assert_eq!(echo.into_text().unwrap().as_str(), "still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_edge_sends_hsts_over_tls() {
    // Production's site is a domain with automatic HTTPS; here an IP address with Caddy's
    // internal CA (trust store untouched): the same site block, served over TLS.
    let edge = Edge::start("https").await;
    let (status, head) = edge.curl(&["/v1/health"]).await;
    assert_eq!(status, 200, "{head}");
    assert!(
        head.contains("strict-transport-security: max-age=31536000; includesubdomains"),
        "no HSTS over TLS: {head}"
    );
    assert!(!head.contains("\nserver:"), "a Server header: {head}");
}

//! The real Caddy with the repository's Caddyfile in front of an API under test (its site, admin
//! and upstream addresses from the environment, as in production and the dev stack).

use std::net::SocketAddr;
use std::time::Duration;

use pmw_testkit::{assert_eventually, free_port};

/// A running Caddy; killed on drop.
pub struct Caddy {
    pub base: String,
    _child: tokio::process::Child,
    _home: tempfile::TempDir,
}

impl Caddy {
    /// Caddy proxying the REST API to `api`, with the API's body limit `max_body`.
    pub async fn start(api: SocketAddr, max_body: usize) -> Caddy {
        let site = free_port();
        let admin = free_port();
        let home = tempfile::tempdir().unwrap();
        let child = pmw_testkit::caddy(
            home.path(),
            &[
                ("PMW_SITE", format!("http://127.0.0.1:{site}")),
                ("PMW_API", api.to_string()),
                ("PMW_API_MAX_BODY_BYTES", max_body.to_string()),
                // No push or stats here: their routes refuse.
                ("PMW_PUSH_A", format!("127.0.0.1:{}", free_port())),
                ("PMW_PUSH_B", format!("127.0.0.1:{}", free_port())),
                ("PMW_STATS", format!("127.0.0.1:{}", free_port())),
                ("PMW_CADDY_ADMIN", format!("127.0.0.1:{admin}")),
            ],
        );
        let base = format!("http://127.0.0.1:{site}");
        assert_eventually!(
            Duration::from_secs(30),
            reqwest::get(format!("{base}/v1/health"))
                .await
                .is_ok_and(|r| r.status() == 200),
            "caddy does not proxy the API"
        );
        Caddy {
            base,
            _child: child,
            _home: home,
        }
    }
}

//! ClickHouse client: the `clickhouse` crate over a hyper connector with TCP_NODELAY,
//! compression off and schema validation off (ClickHouse 18.16 lacks RowBinaryWithNamesAndTypes).

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use secrecy::ExposeSecret;

use crate::config::CoreConfig;

pub use clickhouse::Client as ChClient;

/// Build a client for the configured database.
pub fn client(cfg: &CoreConfig) -> ChClient {
    client_for(cfg, &cfg.clickhouse_database)
}

/// Build a client for an explicit database (`pmwctl migrate` creates it first).
pub fn client_for(cfg: &CoreConfig, database: &str) -> ChClient {
    let mut connector = HttpConnector::new();
    // Without NODELAY an INSERT after a read on a pooled connection stalls on delayed ACK (~40 ms).
    connector.set_nodelay(true);
    connector.set_keepalive(Some(Duration::from_secs(60)));
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    let http = HyperClient::builder(TokioExecutor::new())
        // Below the server's 3 s keep-alive timeout so we never reuse a socket it is closing.
        .pool_idle_timeout(Duration::from_millis(2_500))
        .pool_max_idle_per_host(16)
        .build(connector);
    let mut c = ChClient::with_http_client(http)
        .with_url(cfg.clickhouse_url.trim_end_matches('/'))
        .with_database(database)
        .with_user(&cfg.clickhouse_user)
        .with_compression(clickhouse::Compression::None)
        .with_validation(false);
    let password = cfg.clickhouse_password.expose_secret();
    if !password.is_empty() {
        c = c.with_password(password);
    }
    c
}

/// Client for server-level statements (CREATE DATABASE) in the `default` database.
pub fn server_client(cfg: &CoreConfig) -> ChClient {
    client_for(cfg, "default")
}

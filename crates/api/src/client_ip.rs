//! The client's address as the API sees it (a leaf: the auth extractor's failure limiter keys by
//! it, and nothing here depends on the HTTP stack around the routes).

use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::http::request::Parts;

/// The client's address: the first `X-Forwarded-For` hop when Caddy (the only public listener,
/// which overwrites that header) forwarded the request, else the TCP peer.
pub fn client_ip(parts: &Parts) -> Option<IpAddr> {
    let forwarded = parts
        .headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.trim().parse().ok());
    forwarded.or_else(|| {
        parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn parts(forwarded: Option<&str>, peer: Option<&str>) -> Parts {
        let mut b = Request::builder();
        if let Some(f) = forwarded {
            b = b.header("x-forwarded-for", f);
        }
        let (mut parts, ()) = b.body(()).unwrap().into_parts();
        if let Some(p) = peer {
            parts
                .extensions
                .insert(ConnectInfo::<SocketAddr>(p.parse().unwrap()));
        }
        parts
    }

    #[test]
    fn the_first_forwarded_hop_wins_over_the_peer() {
        let p = parts(Some(" 203.0.113.7 , 10.0.0.1"), Some("127.0.0.1:9"));
        assert_eq!(client_ip(&p), Some("203.0.113.7".parse().unwrap()));
    }

    #[test]
    fn the_peer_when_nothing_or_nonsense_was_forwarded() {
        let p = parts(Some("not-an-ip"), Some("127.0.0.1:9"));
        assert_eq!(client_ip(&p), Some("127.0.0.1".parse().unwrap()));
        assert_eq!(client_ip(&parts(None, None)), None);
    }
}

//! The client's address as the API sees it: core's one rule ([`pmw_core::client::client_addr`]:
//! `X-Forwarded-For` believed only from `PMW_API_TRUSTED_PROXIES`), applied to a request's
//! parts (a leaf: the auth extractor's failure throttle keys by it).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use pmw_core::client::{client_addr, TrustedProxies};

/// The client's address: the TCP peer, or what a trusted proxy forwarded for it (unspecified
/// when the server was not given peers, which `run_with` always does).
pub fn client_ip(parts: &Parts, trusted: &TrustedProxies) -> IpAddr {
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
    client_addr(peer, &parts.headers, trusted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn parts(forwarded: Option<&str>, peer: &str) -> Parts {
        let mut b = Request::builder();
        if let Some(f) = forwarded {
            b = b.header("x-forwarded-for", f);
        }
        let (mut parts, ()) = b.body(()).unwrap().into_parts();
        parts
            .extensions
            .insert(ConnectInfo::<SocketAddr>(peer.parse().unwrap()));
        parts
    }

    #[test]
    fn forwarded_hops_count_only_from_a_trusted_proxy() {
        let t = TrustedProxies::loopback();
        let p = parts(Some(" 10.0.0.1 , 203.0.113.7"), "127.0.0.1:9");
        assert_eq!(client_ip(&p, &t), "203.0.113.7".parse::<IpAddr>().unwrap());
        let p = parts(Some("203.0.113.7"), "127.0.0.1:9");
        assert_eq!(
            client_ip(&p, &TrustedProxies::none()),
            "127.0.0.1".parse::<IpAddr>().unwrap(),
            "a peer that is no proxy is the client, whatever it forwards"
        );
    }

    #[test]
    fn the_peer_when_nothing_or_nonsense_was_forwarded() {
        let t = TrustedProxies::loopback();
        let p = parts(Some("not-an-ip"), "127.0.0.1:9");
        assert_eq!(client_ip(&p, &t), "127.0.0.1".parse::<IpAddr>().unwrap());
    }
}

//! The client's address: the TCP peer, unless the peer is a configured proxy (Caddy), in which
//! case the rightmost `X-Forwarded-For` hop that is not itself a proxy. A client's own
//! `X-Forwarded-For` is therefore never believed: a direct client is its peer address, and behind
//! Caddy only what Caddy appended counts.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use axum::http::HeaderMap;
use ipnet::IpNet;
use serde::{Deserialize, Deserializer};

/// The addresses whose `X-Forwarded-For` is believed (`PMW_API_TRUSTED_PROXIES`,
/// `PMW_PUSH_TRUSTED_PROXIES`): comma-separated addresses or CIDR blocks; `""` trusts none.
#[derive(Clone, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Loopback (`127.0.0.1/8`, `::1`): Caddy runs on the same host.
    pub fn loopback() -> TrustedProxies {
        "127.0.0.0/8,::1/128".parse().expect("valid")
    }

    /// No proxy: every client is its TCP peer.
    pub fn none() -> TrustedProxies {
        TrustedProxies(Vec::new())
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|n| n.contains(&ip))
    }
}

impl Default for TrustedProxies {
    fn default() -> Self {
        TrustedProxies::loopback()
    }
}

impl FromStr for TrustedProxies {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let nets = s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                p.parse::<IpNet>()
                    .or_else(|_| p.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("not an address or CIDR block: {p:?}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TrustedProxies(nets))
    }
}

impl fmt::Debug for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let all: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        write!(f, "{:?}", all.join(","))
    }
}

impl<'de> Deserialize<'de> for TrustedProxies {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The client's address: `peer`, unless `peer` is a trusted proxy; then the rightmost
/// `X-Forwarded-For` hop (over every such header) that is not a trusted proxy, or the leftmost
/// when all are (an unparsable hop ends the walk there: the peer is believed, not the header).
pub fn client_addr(peer: IpAddr, headers: &HeaderMap, trusted: &TrustedProxies) -> IpAddr {
    let peer = canonical(peer);
    if !trusted.contains(peer) {
        return peer;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        let Ok(ip) = hop.parse::<IpAddr>().map(canonical) else {
            return client;
        };
        client = ip;
        if !trusted.contains(ip) {
            break;
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xff(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", v.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let t = TrustedProxies::loopback();
        let h = xff(&["203.0.113.7"]);
        assert_eq!(client_addr(ip("198.51.100.1"), &h, &t), ip("198.51.100.1"));
        assert_eq!(
            client_addr(ip("127.0.0.1"), &h, &TrustedProxies::none()),
            ip("127.0.0.1")
        );
    }

    #[test]
    fn behind_a_trusted_proxy_the_rightmost_untrusted_hop_wins() {
        let t: TrustedProxies = "127.0.0.1, 10.0.0.0/8".parse().unwrap();
        // A client's own value stays on the left of what the proxies appended.
        let h = xff(&["1.2.3.4, 203.0.113.7", "10.1.1.1"]);
        assert_eq!(client_addr(ip("127.0.0.1"), &h, &t), ip("203.0.113.7"));
        // Nothing forwarded: the proxy itself.
        assert_eq!(
            client_addr(ip("127.0.0.1"), &HeaderMap::new(), &t),
            ip("127.0.0.1")
        );
        // Every hop a proxy: the leftmost.
        let h = xff(&["10.0.0.5, 10.0.0.6"]);
        assert_eq!(client_addr(ip("127.0.0.1"), &h, &t), ip("10.0.0.5"));
        // Garbage stops the walk at the last believed address.
        let h = xff(&["203.0.113.9, nonsense"]);
        assert_eq!(client_addr(ip("127.0.0.1"), &h, &t), ip("127.0.0.1"));
    }

    #[test]
    fn settings_parse_and_mapped_addresses_are_ipv4() {
        let t: TrustedProxies = "::1, 192.0.2.0/24".parse().unwrap();
        assert!(t.contains(ip("::1")) && t.contains(ip("192.0.2.77")));
        assert!(t.contains(ip("::ffff:192.0.2.1")));
        assert!(!t.contains(ip("127.0.0.1")));
        assert!("".parse::<TrustedProxies>().unwrap() == TrustedProxies::none());
        assert!("10.0.0.0/33".parse::<TrustedProxies>().is_err());
        assert!(TrustedProxies::default().contains(ip("127.0.0.2")));
        assert_eq!(format!("{t:?}"), "\"::1/128,192.0.2.0/24\"");
    }
}

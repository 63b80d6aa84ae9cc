//! Server-side request forgery guard for webhook destinations: which IP addresses and host names
//! a webhook must never reach unless the operator allows private destinations, and the URL check
//! the API runs on every endpoint URL (its errors are shown to users with a 422).
//!
//! Literal addresses are checked here after WHATWG parsing, which normalises `127.1`,
//! `2130706433`, `0x7f.1` and `[::ffff:127.0.0.1]` into the address they mean. Names are checked
//! again where they are resolved: [`resolve`] drops forbidden addresses from every DNS answer,
//! and [`client`] (push's deliveries and the API's test events) connects only to a checked one.

pub mod client;
pub mod resolve;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

/// Longest accepted webhook URL, in bytes (before and after normalisation).
pub const MAX_URL_LEN: usize = 2048;

/// Why a webhook URL is refused. Messages are written for the API's users.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("url is {len} characters long; the limit is {max}")]
    TooLong { len: usize, max: usize },
    #[error("url is not valid: {0}")]
    Parse(#[from] url::ParseError),
    #[error("url scheme must be http or https, not {0:?}")]
    Scheme(String),
    #[error("url must not contain a user name or password")]
    Userinfo,
    #[error("url must have a host")]
    NoHost,
    #[error("url points to {addr}, a {reason} address; webhooks must reach a public address")]
    ForbiddenAddress { addr: IpAddr, reason: &'static str },
    #[error("url host {host:?} is a local name; webhooks must reach a public host")]
    ForbiddenHost { host: String },
}

/// Why `ip` is not a public destination, or `None` when it is. IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) and 6to4 (`2002:aabb:ccdd::`)
/// addresses are judged by the IPv4 address they carry.
pub fn forbidden_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

/// True when a webhook must not connect to `ip` (unless private destinations are allowed).
pub fn is_forbidden(ip: IpAddr) -> bool {
    forbidden_reason(ip).is_some()
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn in_v6(ip: Ipv6Addr, net: [u16; 8], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    let net = Ipv6Addr::new(
        net[0], net[1], net[2], net[3], net[4], net[5], net[6], net[7],
    );
    (u128::from(ip) & mask) == (u128::from(net) & mask)
}

/// IPv4 ranges that are never public destinations, with the reason shown to users.
const V4_RANGES: &[([u8; 4], u32, &str)] = &[
    ([0, 0, 0, 0], 8, "\"this network\" (0.0.0.0/8)"),
    ([10, 0, 0, 0], 8, "private (RFC 1918)"),
    ([100, 64, 0, 0], 10, "carrier-grade NAT (100.64.0.0/10)"),
    ([127, 0, 0, 0], 8, "loopback"),
    ([169, 254, 0, 0], 16, "link-local"),
    ([172, 16, 0, 0], 12, "private (RFC 1918)"),
    (
        [192, 0, 0, 0],
        24,
        "IETF protocol assignment (192.0.0.0/24)",
    ),
    ([192, 0, 2, 0], 24, "documentation (TEST-NET-1)"),
    ([192, 88, 99, 0], 24, "6to4 relay anycast"),
    ([192, 168, 0, 0], 16, "private (RFC 1918)"),
    ([198, 18, 0, 0], 15, "benchmarking (198.18.0.0/15)"),
    ([198, 51, 100, 0], 24, "documentation (TEST-NET-2)"),
    ([203, 0, 113, 0], 24, "documentation (TEST-NET-3)"),
    ([224, 0, 0, 0], 4, "multicast"),
    ([255, 255, 255, 255], 32, "broadcast"),
    ([240, 0, 0, 0], 4, "reserved (240.0.0.0/4)"),
];

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    V4_RANGES
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map(|(_, _, reason)| *reason)
}

/// IPv6 ranges that are never public destinations (embedded-IPv4 forms are handled first), from
/// IANA's IPv6 Special-Purpose Address Registry: every entry not globally reachable. Anything
/// else outside global unicast (`2000::/3`) is unassigned and refused too.
const V6_RANGES: &[([u16; 8], u32, &str)] = &[
    ([0x0100, 0, 0, 0, 0, 0, 0, 0], 64, "discard-only (100::/64)"),
    (
        [0x0100, 0, 0, 1, 0, 0, 0, 0],
        64,
        "dummy IPv6 prefix (100:0:0:1::/64)",
    ),
    ([0x0064, 0xff9b, 1, 0, 0, 0, 0, 0], 48, "local-use NAT64"),
    ([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, "Teredo tunnel"),
    (
        [0x2001, 2, 0, 0, 0, 0, 0, 0],
        48,
        "benchmarking (2001:2::/48)",
    ),
    (
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        23,
        "IETF protocol assignment (2001::/23)",
    ),
    ([0x2001, 0x0db8, 0, 0, 0, 0, 0, 0], 32, "documentation"),
    ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "documentation"),
    (
        [0x5f00, 0, 0, 0, 0, 0, 0, 0],
        16,
        "segment routing (5f00::/16)",
    ),
    ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "unique local (fc00::/7)"),
    ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local"),
    ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "site-local"),
    ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast"),
];

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    if let Some(v4) = embedded_v4(ip) {
        return forbidden_v4(v4);
    }
    V6_RANGES
        .iter()
        .find(|(net, prefix, _)| in_v6(ip, *net, *prefix))
        .map(|(_, _, reason)| *reason)
        .or_else(|| {
            (!in_v6(ip, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3))
                .then_some("reserved (outside global unicast 2000::/3)")
        })
}

/// The IPv4 address an IPv6 address reaches, for the forms that carry one: IPv4-mapped
/// `::ffff:0:0/96`, IPv4-compatible `::/96`, IPv4-translated `::ffff:0:0:0/96` (RFC 2765), NAT64
/// `64:ff9b::/96` (RFC 6052) in its low 32 bits, and 6to4 `2002::/16` in the 32 bits after it.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    let low: [[u16; 8]; 4] = [
        [0, 0, 0, 0, 0, 0xffff, 0, 0],
        [0; 8],
        [0, 0, 0, 0, 0xffff, 0, 0, 0],
        [0x64, 0xff9b, 0, 0, 0, 0, 0, 0],
    ];
    if low.iter().any(|net| in_v6(ip, *net, 96)) {
        return Some(v4(s[6], s[7]));
    }
    in_v6(ip, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16).then(|| v4(s[1], s[2]))
}

/// True for `localhost`, `*.localhost`, `*.local` and `*.internal` (any case, trailing dot
/// ignored): names that resolve inside the operator's network.
pub fn is_local_name(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    h == "localhost"
        || h.ends_with(".localhost")
        || h.ends_with(".local")
        || h.ends_with(".internal")
}

/// Parse and check a webhook URL: http or https only, no user name or password, a host, at most
/// [`MAX_URL_LEN`] bytes. Unless `allow_private`, a literal address must be public and the host
/// must not be a local name. Returns the normalised URL (what must be stored and requested).
pub fn validate_url(raw: &str, allow_private: bool) -> Result<Url, UrlError> {
    let raw = raw.trim();
    if raw.len() > MAX_URL_LEN {
        return Err(UrlError::TooLong {
            len: raw.len(),
            max: MAX_URL_LEN,
        });
    }
    let url = Url::parse(raw)?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(UrlError::Scheme(url.scheme().to_string()));
    }
    // The parser repairs `http:///x`, `http:/x` and `http:\\x` into `http://x/`: a URL must say
    // its host itself, right after `scheme://`.
    let after = raw.get(url.scheme().len() + 1..).unwrap_or("");
    if !after.starts_with("//") || after[2..].starts_with(['/', '\\']) {
        return Err(UrlError::NoHost);
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlError::Userinfo);
    }
    if url.as_str().len() > MAX_URL_LEN {
        return Err(UrlError::TooLong {
            len: url.as_str().len(),
            max: MAX_URL_LEN,
        });
    }
    let host = url.host().ok_or(UrlError::NoHost)?;
    if allow_private {
        return Ok(url);
    }
    let checked = match host {
        Host::Ipv4(v4) => forbidden_v4(v4).map(|r| (IpAddr::V4(v4), r)),
        Host::Ipv6(v6) => forbidden_v6(v6).map(|r| (IpAddr::V6(v6), r)),
        Host::Domain(name) => {
            if name.is_empty() {
                return Err(UrlError::NoHost);
            }
            if is_local_name(name) {
                return Err(UrlError::ForbiddenHost {
                    host: name.to_string(),
                });
            }
            None
        }
    };
    match checked {
        Some((addr, reason)) => Err(UrlError::ForbiddenAddress { addr, reason }),
        None => Ok(url),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(raw: &str) -> UrlError {
        validate_url(raw, false).expect_err(raw)
    }

    fn refused_addr(raw: &str, expect: &str) {
        match refused(raw) {
            UrlError::ForbiddenAddress { addr, .. } => {
                assert_eq!(addr.to_string(), expect, "{raw}")
            }
            other => panic!("{raw}: expected a forbidden address, got {other:?}"),
        }
    }

    #[test]
    fn ssrf_a_host_the_parser_would_invent_is_refused() {
        for raw in [
            "http:///x",
            "http:/x",
            "https:x",
            "http:\\\\x",
            "http://\\x",
            "http:////x",
        ] {
            assert!(
                matches!(validate_url(raw, true), Err(UrlError::NoHost)),
                "{raw}: {:?}",
                validate_url(raw, true)
            );
        }
        assert!(validate_url("HTTP://example.com/x", false).is_ok());
    }

    #[test]
    fn ssrf_whatwg_normalised_loopback_forms_are_refused() {
        refused_addr("http://127.1/", "127.0.0.1");
        refused_addr("http://2130706433/", "127.0.0.1");
        refused_addr("http://0x7f.1/", "127.0.0.1");
        refused_addr("http://0177.0.0.1/", "127.0.0.1");
        refused_addr("http://127.0.0.1:8080/x", "127.0.0.1");
        refused_addr("http://[::1]/", "::1");
        refused_addr("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1");
        refused_addr("http://[::ffff:7f00:1]/", "::ffff:127.0.0.1");
        refused_addr("http://[::127.0.0.1]/", "::7f00:1");
        refused_addr("http://0.0.0.0/", "0.0.0.0");
        refused_addr("http://0/", "0.0.0.0");
        refused_addr("http://[::]/", "::");
    }

    #[test]
    fn ssrf_private_and_special_ranges_are_refused() {
        for (raw, addr) in [
            ("http://10.0.0.1/", "10.0.0.1"),
            ("http://172.16.0.1/", "172.16.0.1"),
            ("http://172.31.255.255/", "172.31.255.255"),
            ("http://192.168.1.1/", "192.168.1.1"),
            ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
            ("http://100.64.0.1/", "100.64.0.1"),
            ("http://100.127.255.254/", "100.127.255.254"),
            ("http://198.18.0.1/", "198.18.0.1"),
            ("http://198.19.255.1/", "198.19.255.1"),
            ("http://192.0.2.1/", "192.0.2.1"),
            ("http://198.51.100.7/", "198.51.100.7"),
            ("http://203.0.113.9/", "203.0.113.9"),
            ("http://224.0.0.1/", "224.0.0.1"),
            ("http://240.0.0.1/", "240.0.0.1"),
            ("http://255.255.255.255/", "255.255.255.255"),
            ("http://[fd00::1]/", "fd00::1"),
            ("http://[fc00::1]/", "fc00::1"),
            ("http://[fe80::1]/", "fe80::1"),
            ("http://[ff02::1]/", "ff02::1"),
            ("http://[2001:db8::1]/", "2001:db8::1"),
            ("http://[::ffff:10.0.0.1]/", "::ffff:10.0.0.1"),
            ("http://[::ffff:169.254.169.254]/", "::ffff:169.254.169.254"),
            ("http://[64:ff9b::7f00:1]/", "64:ff9b::7f00:1"),
            ("http://[64:ff9b::a9fe:a9fe]/", "64:ff9b::a9fe:a9fe"),
            ("http://[2002:7f00:1::]/", "2002:7f00:1::"),
        ] {
            refused_addr(raw, addr);
        }
    }

    /// One address inside each special-purpose IPv6 range (IANA registry) is refused, by a
    /// reason naming the range; the embedded-IPv4 forms are judged by the IPv4 address.
    #[test]
    fn ssrf_every_special_ipv6_range_is_refused() {
        for (ip, reason) in [
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.1.2.3", "private (RFC 1918)"),
            ("::ffff:0:10.1.2.3", "private (RFC 1918)"),
            ("::10.1.2.3", "private (RFC 1918)"),
            ("64:ff9b::192.168.0.1", "private (RFC 1918)"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("2002:0a00:0001::1", "private (RFC 1918)"),
            ("2002:c0a8:0101::", "private (RFC 1918)"),
            ("100::1", "discard-only (100::/64)"),
            ("100:0:0:1::1", "dummy IPv6 prefix (100:0:0:1::/64)"),
            ("64:ff9b:1::1", "local-use NAT64"),
            ("2001::1", "Teredo tunnel"),
            ("2001:2::1", "benchmarking (2001:2::/48)"),
            ("2001:20::1", "IETF protocol assignment (2001::/23)"),
            ("2001:1ff::1", "IETF protocol assignment (2001::/23)"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("5f00::1", "segment routing (5f00::/16)"),
            ("fc00::1", "unique local (fc00::/7)"),
            ("fdff::1", "unique local (fc00::/7)"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("4000::1", "reserved (outside global unicast 2000::/3)"),
            ("1::1", "reserved (outside global unicast 2000::/3)"),
        ] {
            assert_eq!(forbidden_reason(ip.parse().unwrap()), Some(reason), "{ip}");
        }
        // Just outside the ranges: public.
        for ip in [
            "::ffff:0:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:0808:0808::1",
            "2001:200::1",
            "2001:db9::1",
            "2a00:1450::1",
            "3fff:1000::1",
            "2620:4f:8000::1",
        ] {
            assert_eq!(forbidden_reason(ip.parse().unwrap()), None, "{ip}");
        }
    }

    #[test]
    fn ssrf_public_addresses_pass() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "100.128.0.1",
            "172.32.0.1",
            "198.20.0.1",
        ] {
            assert!(!is_forbidden(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "2606:4700::1111",
            "64:ff9b::808:808",
            "::ffff:8.8.8.8",
            "2002:808:808::",
        ] {
            assert!(!is_forbidden(ip.parse().unwrap()), "{ip}");
        }
        let u = validate_url("https://example.com/hook", false).unwrap();
        assert_eq!(u.as_str(), "https://example.com/hook");
        assert!(validate_url("http://93.184.215.14:8443/x?y=1", false).is_ok());
        assert!(validate_url("https://[2606:4700::1111]/", false).is_ok());
    }

    #[test]
    fn ssrf_scheme_userinfo_host_and_length() {
        assert_eq!(
            refused("ftp://example.com/x"),
            UrlError::Scheme("ftp".into())
        );
        assert_eq!(
            refused("file:///etc/passwd"),
            UrlError::Scheme("file".into())
        );
        assert_eq!(refused("http://user:pw@example.com/"), UrlError::Userinfo);
        assert_eq!(refused("http://user@example.com/"), UrlError::Userinfo);
        assert_eq!(refused("http://:pw@example.com/"), UrlError::Userinfo);
        assert!(matches!(refused("not a url"), UrlError::Parse(_)));
        assert!(matches!(refused("http://"), UrlError::Parse(_)));
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_LEN));
        assert!(matches!(refused(&long), UrlError::TooLong { .. }));
        // Userinfo and scheme rules hold even when private destinations are allowed.
        assert_eq!(
            validate_url("http://u:p@127.0.0.1/", true).unwrap_err(),
            UrlError::Userinfo
        );
        assert!(validate_url("gopher://127.0.0.1/", true).is_err());
    }

    #[test]
    fn ssrf_local_names_are_refused_unless_allowed() {
        for raw in [
            "http://localhost/",
            "http://LOCALHOST:9000/",
            "http://localhost./",
            "http://api.localhost/",
            "http://printer.local/",
            "http://metadata.google.internal/",
        ] {
            assert!(
                matches!(refused(raw), UrlError::ForbiddenHost { .. }),
                "{raw}"
            );
            assert!(
                validate_url(raw, true).is_ok(),
                "{raw} allowed when private is"
            );
        }
        assert!(validate_url("http://127.0.0.1:9/", true).is_ok());
        assert!(validate_url("http://[::1]:9/", true).is_ok());
        assert!(validate_url("https://localhost.example.com/", false).is_ok());
    }

    #[test]
    fn ssrf_error_messages_are_readable() {
        let m = refused("http://10.0.0.1/").to_string();
        assert!(m.contains("10.0.0.1") && m.contains("private"), "{m}");
        let m = refused("ftp://x/").to_string();
        assert!(m.contains("http or https"), "{m}");
    }
}

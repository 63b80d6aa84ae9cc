//! The guarded DNS resolver of every outbound webhook request: each answer is cut to the
//! addresses a webhook may reach ([`super::is_forbidden`]), and a name left with none (or a local
//! name) is [`Refused`]. The address connected to is the one checked: there is no window for DNS
//! rebinding.

use std::net::SocketAddr;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::{is_forbidden, is_local_name};

/// A name whose addresses were all refused, or that did not resolve. The messages reach
/// subscribers (the delivery log, test events): they never name the refused addresses, which
/// would make the guard an oracle of the operator's internal DNS.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("{host}: destination not allowed")]
    Forbidden { host: String },
    #[error("{host}: destination not allowed")]
    LocalName { host: String },
    #[error("{host} did not resolve: {reason}")]
    Resolve { host: String, reason: String },
    #[error("{host} resolved to no address")]
    Empty { host: String },
}

/// Keep the addresses a webhook may reach; fail when none remain.
pub fn filter_addrs(
    host: &str,
    addrs: Vec<SocketAddr>,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, Refused> {
    if addrs.is_empty() {
        return Err(Refused::Empty { host: host.into() });
    }
    if allow_private {
        return Ok(addrs);
    }
    let (ok, refused): (Vec<_>, Vec<_>) = addrs.into_iter().partition(|a| !is_forbidden(a.ip()));
    if ok.is_empty() {
        // The addresses go to the operator's log only.
        tracing::debug!(host, ?refused, "webhook dns answer refused");
        return Err(Refused::Forbidden { host: host.into() });
    }
    if !refused.is_empty() {
        tracing::debug!(host, refused = refused.len(), "webhook dns answer filtered");
    }
    Ok(ok)
}

/// Resolve `host` with the system resolver and keep only permitted addresses (port 0: the
/// client substitutes the URL's port).
pub async fn resolve_checked(host: &str, allow_private: bool) -> Result<Vec<SocketAddr>, Refused> {
    if !allow_private && is_local_name(host) {
        return Err(Refused::LocalName { host: host.into() });
    }
    let addrs = tokio::net::lookup_host((host, 0))
        .await
        .map_err(|e| Refused::Resolve {
            host: host.into(),
            reason: e.to_string(),
        })?
        .collect();
    filter_addrs(host, addrs, allow_private)
}

/// The `reqwest` resolver built on [`resolve_checked`].
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver {
    pub allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow = self.allow_private;
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs = resolve_checked(&host, allow).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 0)
    }

    #[test]
    fn ssrf_filter_keeps_public_addresses_only() {
        let mixed = vec![at("10.0.0.1"), at("8.8.8.8"), at("::1"), at("1.1.1.1")];
        assert_eq!(
            filter_addrs("x", mixed.clone(), false).unwrap(),
            vec![at("8.8.8.8"), at("1.1.1.1")]
        );
        assert_eq!(filter_addrs("x", mixed.clone(), true).unwrap(), mixed);
    }

    #[test]
    fn ssrf_filter_refuses_an_answer_of_forbidden_or_no_addresses() {
        match filter_addrs("h", vec![at("127.0.0.1"), at("169.254.169.254")], false) {
            Err(e @ Refused::Forbidden { .. }) => {
                let m = e.to_string();
                assert_eq!(m, "h: destination not allowed");
                assert!(!m.contains("127.0.0.1") && !m.contains("169.254"), "{m}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(matches!(
            filter_addrs("h", vec![], true),
            Err(Refused::Empty { .. })
        ));
    }
}

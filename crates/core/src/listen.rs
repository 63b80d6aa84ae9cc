//! Binding a service's public port, one rule for every service (api, push, edge, stats): a port
//! in use is transient (exit 75: a predecessor still holds it, the supervisor retries), any other
//! failure to bind (an address not on this host, a privileged port) is configuration (exit 78);
//! and where it may listen: loopback, or an address of a private network (a Caddy on another
//! machine of the deployment reaching it), never a public or wildcard address, since Caddy is
//! the only public listener.

use std::net::{IpAddr, SocketAddr};

use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::config::ConfigError;
use crate::exit::ServiceError;

/// Loopback, or a private network's address: IPv4 10/8, 172.16/12, 192.168/16 (RFC 1918),
/// IPv6 unique local fc00::/7 (RFC 4193).
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_private(),
        IpAddr::V6(v6) => v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00,
    }
}

/// `addr`, the value of `var`, must be [`is_private`].
pub fn check(var: &'static str, addr: SocketAddr) -> Result<(), ConfigError> {
    if is_private(addr.ip()) {
        return Ok(());
    }
    Err(ConfigError::invalid(
        var,
        "must be a loopback or private-network address (10/8, 172.16/12, 192.168/16, \
         fc00::/7), never a public or wildcard one: Caddy is the public listener",
    ))
}

/// Bind `addr`, log the bound address, and report it to `bound` (tests bind port 0). Returns the
/// listener and its bound address.
pub async fn bind(
    addr: SocketAddr,
    bound: Option<oneshot::Sender<SocketAddr>>,
) -> Result<(TcpListener, SocketAddr), ServiceError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| bind_error(addr, &e))?;
    let local = listener
        .local_addr()
        .map_err(|e| ServiceError::Bug(e.into()))?;
    tracing::info!(addr = %local, "listening");
    if let Some(b) = bound {
        let _ = b.send(local);
    }
    Ok((listener, local))
}

/// The exit-code policy of a failed bind.
fn bind_error(addr: SocketAddr, e: &std::io::Error) -> ServiceError {
    let msg = format!("cannot bind {addr}: {e}");
    match e.kind() {
        std::io::ErrorKind::AddrInUse => ServiceError::transient(msg),
        _ => ServiceError::Config(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::{CONFIG, TEMPFAIL};

    #[tokio::test]
    async fn reports_the_bound_port_and_a_port_in_use_is_transient() {
        let (tx, rx) = oneshot::channel();
        let (held, local) = bind("127.0.0.1:0".parse().unwrap(), Some(tx))
            .await
            .unwrap();
        let addr = rx.await.unwrap();
        assert_eq!(addr, held.local_addr().unwrap());
        assert_eq!(addr, local);
        assert_ne!(addr.port(), 0);
        let again = bind(addr, None).await.expect_err("the port is held");
        assert_eq!(again.exit_code(), TEMPFAIL, "{again}");
        assert!(again.to_string().contains(&addr.to_string()), "{again}");
    }

    #[test]
    fn a_service_listens_on_loopback_or_a_private_network_only() {
        for ok in [
            "127.0.0.1",
            "10.77.3.1",
            "172.16.0.1",
            "172.31.255.254",
            "192.168.1.2",
        ] {
            assert!(is_private(ok.parse().unwrap()), "{ok}");
        }
        for ok in ["::1", "fd00::1", "fc00::2"] {
            assert!(is_private(ok.parse().unwrap()), "{ok}");
        }
        for no in [
            "0.0.0.0",
            "::",
            "203.0.113.7",
            "172.32.0.1",
            "169.254.1.1",
            "2001:db8::1",
        ] {
            assert!(!is_private(no.parse().unwrap()), "{no}");
        }
        assert!(check("PMW_X_LISTEN", "0.0.0.0:80".parse().unwrap()).is_err());
        assert!(check("PMW_X_LISTEN", "10.0.0.1:80".parse().unwrap()).is_ok());
    }

    #[tokio::test]
    async fn an_address_not_on_this_host_is_configuration() {
        // TEST-NET-1 (RFC 5737): never assigned to a local interface.
        let err = bind("192.0.2.1:0".parse().unwrap(), None)
            .await
            .expect_err("not a local address");
        assert_eq!(err.exit_code(), CONFIG, "{err}");
    }
}

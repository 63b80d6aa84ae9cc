//! Binding a service's public port, one rule for every service (api, push, edge, stats): a port
//! in use is transient (exit 75: a predecessor still holds it, the supervisor retries), any other
//! failure to bind (an address not on this host, a privileged port) is configuration (exit 78).

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::exit::ServiceError;

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

    #[tokio::test]
    async fn an_address_not_on_this_host_is_configuration() {
        // TEST-NET-1 (RFC 5737): never assigned to a local interface.
        let err = bind("192.0.2.1:0".parse().unwrap(), None)
            .await
            .expect_err("not a local address");
        assert_eq!(err.exit_code(), CONFIG, "{err}");
    }
}

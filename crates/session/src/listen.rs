//! How a `/v1/ws` server's connections are set up, the same in push and pmw-edge: NODELAY for
//! frame latency, and a small kernel send buffer per connection, so a slow consumer fills its
//! bounded session queue (and is closed 1013) instead of hiding megabytes in the socket.

use axum::serve::{ListenerExt, TapIo};
use tokio::net::{TcpListener, TcpStream};

/// Kernel send buffer per WebSocket connection.
pub const SEND_BUFFER: usize = 32 * 1024;

/// `listener` with every accepted connection tuned ([`tune`]).
pub fn tuned(listener: TcpListener) -> TapIo<TcpListener, fn(&mut TcpStream)> {
    listener.tap_io(tune as fn(&mut TcpStream))
}

/// NODELAY and [`SEND_BUFFER`] on one connection (a failure leaves the kernel's defaults).
pub fn tune(tcp: &mut TcpStream) {
    let _ = tcp.set_nodelay(true);
    let _ = socket2::SockRef::from(&*tcp).set_send_buffer_size(SEND_BUFFER);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_accepted_connection_is_tuned() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let (mut tcp, _) = listener.accept().await.unwrap();
        let before = socket2::SockRef::from(&tcp).send_buffer_size().unwrap();
        assert!(!tcp.nodelay().unwrap());
        tune(&mut tcp);
        assert!(tcp.nodelay().unwrap());
        let after = socket2::SockRef::from(&tcp).send_buffer_size().unwrap();
        // Linux doubles the value asked for (bookkeeping); the default is far larger.
        assert!(
            after <= 2 * SEND_BUFFER && after < before,
            "{before} → {after}"
        );
    }
}

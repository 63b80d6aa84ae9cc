//! Loopback ports for servers a test starts itself.

/// A TCP port free on 127.0.0.1 right now (the OS picks it; another process may take it later).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local address")
        .port()
}

//! Loopback ports for servers a test starts itself.

use std::collections::HashSet;
use std::sync::Mutex;

/// Ports this process has handed out.
static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A TCP port free on 127.0.0.1 right now (the OS picks it; another process may take it later),
/// never one this process was given before: the OS hands a port it just released out again,
/// and a drill once gave Caddy's site port and pmw-stats' metrics port the same number (Caddy
/// could not bind; every client got the metrics server's 404 for 90 s).
pub fn free_port() -> u16 {
    let mut given = GIVEN.lock().expect("ports lock");
    let given = given.get_or_insert_with(HashSet::new);
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind 127.0.0.1:0")
            .local_addr()
            .expect("local address")
            .port();
        if given.insert(port) {
            return port;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_never_given_twice() {
        let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
    }
}

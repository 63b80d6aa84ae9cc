//! Loopback ports for servers a test starts itself.

use std::collections::HashSet;
use std::sync::Mutex;

/// Where test ports come from: below the kernel's ephemeral range, so no `bind(…:0)` (an
/// in-process proxy, a child's metrics listener) and no outgoing connection's source port can
/// take a port between the moment it is chosen and the moment its server binds it.
const LOWEST: u16 = 20_000;

/// Ports this process has handed out, and where the next search starts.
static GIVEN: Mutex<Option<(HashSet<u16>, u32)>> = Mutex::new(None);

/// The first port of the kernel's ephemeral range (`ip_local_port_range`; 32768 by default).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .filter(|low| *low > LOWEST + 1_000)
        .unwrap_or(32_768)
}

/// A TCP port free on 127.0.0.1 right now, never one this process was given before, chosen
/// below the ephemeral range (see [`LOWEST`]). The kernel's own choice (`bind 127.0.0.1:0`)
/// once gave Caddy's site port and pmw-stats' metrics port the same number in a drill: it
/// re-issues a port it just released (2-4 repeats in 200 calls here), Caddy could not bind, and
/// every client got the metrics server's 404 for 90 s. Another test process may still choose
/// the same port (random starts make that rare); the kernel's choice is the fallback when the
/// range is exhausted.
pub fn free_port() -> u16 {
    let mut given = GIVEN.lock().expect("ports lock");
    let (given, next) = given.get_or_insert_with(|| (HashSet::new(), rand::random::<u32>()));
    let span = u32::from(ephemeral_low() - LOWEST);
    for _ in 0..span {
        let port = LOWEST + (*next % span) as u16;
        *next = next.wrapping_add(1);
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
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
    fn a_port_is_never_given_twice_and_never_from_the_ephemeral_range() {
        let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        let low = ephemeral_low();
        assert!(ports.iter().all(|p| (LOWEST..low).contains(p)), "{ports:?}");
        // A port-0 bind now cannot land on one of them.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(!distinct.contains(&l.local_addr().unwrap().port()));
    }
}

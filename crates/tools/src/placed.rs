//! Multi-host mode's services on the hosts (issue 44): every member of a pair on a host of its
//! own, so a host kill, freeze or partition takes that host's services down with its Postgres
//! and etcd members. pm2 (in the checker's namespace, so the process faults keep finding every
//! app by name) starts each app through a launcher that enters its host's cgroup, waits while
//! the host is down (killed and not back: a machine that is off serves nothing), and execs the
//! real binary in the host's network namespace. The services listen on their host's address;
//! what they reach in the checker's namespace (ClickHouse, the chain's proxies, the webhook
//! receivers) they reach by the bridge's gateway, through forwarders to its loopback ports.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Mutex;

use anyhow::Context;
use pmw_testkit::TcpProxy;

use crate::ha_hosts::HaHosts;

/// Where each instance runs: the pairs split over hosts 1 and 2 (the Postgres members' hosts);
/// in edge mode one edge on each host (beside its NATS node: `crate::ha_nats`), so host 3 holds
/// the third etcd member, a NATS node and edge 3.
pub const PLACEMENT: [(&str, usize); 11] = [
    ("live", 1),
    ("push-a", 1),
    ("api", 1),
    ("stats", 1),
    ("live-b", 2),
    ("push-b", 2),
    ("api-b", 2),
    ("stats-b", 2),
    ("edge-1", 1),
    ("edge-2", 2),
    ("edge-3", 3),
];

/// The ecosystem apps of [`PLACEMENT`].
pub const APPS: &str =
    "pmw-live,pmw-live-b,pmw-push-a,pmw-push-b,pmw-api,pmw-api-b,pmw-stats,pmw-stats-b";

/// The binaries pm2 starts (`PMW_BIN_DIR`): each gets a launcher.
const BINARIES: [&str; 5] = ["pmw-live", "pmw-push", "pmw-api", "pmw-stats", "pmw-edge"];

/// The launchers and forwarders of one run.
pub struct Placed {
    dir: tempfile::TempDir,
    gateway: Ipv4Addr,
    hosts: Vec<Ipv4Addr>,
    forwarders: Mutex<Vec<TcpProxy>>,
}

impl Placed {
    /// Launchers for the binaries in `real_bin`, placing [`PLACEMENT`] on `ha`'s hosts.
    pub fn new(ha: &HaHosts, real_bin: &Path) -> anyhow::Result<Placed> {
        let dir = tempfile::tempdir()?;
        for name in BINARIES {
            let path = dir.path().join(name);
            std::fs::write(&path, launcher(ha, &real_bin.join(name)))
                .with_context(|| format!("write {}", path.display()))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(Placed {
            dir,
            gateway: ha.hosts.gateway(),
            hosts: ha.hosts.iter().map(|h| h.ip).collect(),
            forwarders: Mutex::default(),
        })
    }

    /// The launchers' directory (the apps' `PMW_BIN_DIR`).
    pub fn bin_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The checker namespace's address on the hosts' bridge.
    pub fn gateway(&self) -> Ipv4Addr {
        self.gateway
    }

    /// The address of the host `instance` runs on (its listeners bind it).
    pub fn ip_of(&self, instance: &str) -> Ipv4Addr {
        self.placed_on(instance)
            .unwrap_or_else(|| panic!("{instance} is not placed"))
    }

    /// The address of edge `n`'s host, if edge `n` is placed (edges past the hosts' count run in
    /// the checker's namespace).
    pub fn edge_ip(&self, n: usize) -> Option<Ipv4Addr> {
        self.placed_on(&format!("edge-{n}"))
    }

    /// The address of the host [`PLACEMENT`] puts `instance` on, if it places it.
    fn placed_on(&self, instance: &str) -> Option<Ipv4Addr> {
        PLACEMENT
            .iter()
            .find(|(i, _)| *i == instance)
            .map(|(_, h)| self.hosts[h - 1])
    }

    /// What the apps need beside the launchers: live's providers are on the gateway, plain
    /// `ws://`/`http://` to an address that is not loopback (the hosts' own bridge); and where
    /// `scripts/deploy/edge` asks each placed edge's health (`PMW_EDGE_<i>_HOST`).
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![("PMW_LIVE_ALLOW_INSECURE_RPC".into(), "true".into())];
        for n in 1.. {
            let Some(ip) = self.edge_ip(n) else { break };
            env.push((format!("PMW_EDGE_{n}_HOST"), ip.to_string()));
        }
        env
    }

    /// Forwarders from the gateway to every loopback port named in `env`'s values but the
    /// apps' own listeners (the launchers point the apps at the gateway, same port).
    pub async fn forward(&self, env: &[(String, String)]) -> anyhow::Result<()> {
        let mut ports: Vec<u16> = env
            .iter()
            .filter(|(k, _)| !is_listener(k))
            .flat_map(|(_, v)| loopback_ports(v))
            .collect();
        ports.sort_unstable();
        ports.dedup();
        for port in ports {
            let target = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            let listen = SocketAddr::from((self.gateway, port));
            let proxy = TcpProxy::start_on(listen, target)
                .await
                .with_context(|| format!("forward {listen} to {target}"))?;
            self.forwarders.lock().unwrap().push(proxy);
        }
        Ok(())
    }
}

/// Whether `var` names an address the service binds (rewritten to its host's address).
fn is_listener(var: &str) -> bool {
    var.ends_with("_LISTEN") || var.ends_with("_METRICS_ADDR")
}

/// Every port after `127.0.0.1:` in `value`.
fn loopback_ports(value: &str) -> Vec<u16> {
    value
        .split("127.0.0.1:")
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// The launcher of binary `real`: by `PMW_INSTANCE` its host's cgroup, then (once the host is
/// up) its network namespace, its listeners on the host's address and every other loopback
/// address in its `PMW_*` environment turned into the gateway's. An instance not placed (an
/// edge) runs in the checker's namespace as it is.
fn launcher(ha: &HaHosts, real: &Path) -> String {
    let mut cases = String::new();
    for host in ha.hosts.iter() {
        let names: Vec<&str> = PLACEMENT
            .iter()
            .filter(|(_, h)| *h == host.index)
            .map(|(i, _)| *i)
            .collect();
        if names.is_empty() {
            continue;
        }
        let _ = writeln!(
            cases,
            "  {}) ns='{}'; addr='{}'; procs='{}'; down='{}' ;;",
            names.join("|"),
            host.netns,
            host.ip,
            host.procs_file().display(),
            ha.down_marker(host.index).display(),
        );
    }
    format!(
        r#"#!/bin/sh
# pmw-check multi-host mode (generated): run {real} on the host its instance is placed on.
real='{real}'
case "$PMW_INSTANCE" in
{cases}  *) exec "$real" "$@" ;;
esac
echo $$ > "$procs" || exit 75
while [ -e "$down" ]; do sleep 0.2; done
for var in $(env | sed -n 's/^\(PMW_[A-Za-z0-9_]*\)=.*127\.0\.0\.1.*$/\1/p'); do
  eval "val=\${{$var}}"
  case "$var" in
    *_LISTEN|*_METRICS_ADDR) to="$addr" ;;
    *) to='{gateway}' ;;
  esac
  export "$var=$(printf '%s' "$val" | sed "s/127\.0\.0\.1/$to/g")"
done
exec ip netns exec "$ns" "$real" "$@"
"#,
        real = real.display(),
        gateway = ha.hosts.gateway(),
    )
}

/// Which instances run on which host address, for the run's header (`edges`: how many edges
/// the run has).
pub fn describe(placed: &Placed, edges: usize) -> String {
    let mut by_host: Vec<(Ipv4Addr, Vec<&str>)> = Vec::new();
    let edge_runs = |i: &str| {
        i.strip_prefix("edge-")
            .and_then(|n| n.parse::<usize>().ok())
            .is_none_or(|n| n <= edges)
    };
    for (instance, _) in PLACEMENT.into_iter().filter(|(i, _)| edge_runs(i)) {
        let ip = placed.ip_of(instance);
        match by_host.iter_mut().find(|(h, _)| *h == ip) {
            Some((_, v)) => v.push(instance),
            None => by_host.push((ip, vec![instance])),
        }
    }
    by_host
        .iter()
        .map(|(ip, v)| format!("{ip}: {}", v.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_ports_are_read_from_urls_and_lists() {
        assert_eq!(
            loopback_ports("p0=ws://127.0.0.1:4001|http://127.0.0.1:4002 p1=ws://10.0.0.1:5"),
            vec![4001, 4002]
        );
        assert_eq!(loopback_ports("http://127.0.0.1:8123/?x=1"), vec![8123]);
        assert!(loopback_ports("postgres://pmw@10.77.3.1:5432/pmw").is_empty());
        assert!(is_listener("PMW_PUSH_LISTEN") && is_listener("PMW_LIVE_METRICS_ADDR"));
        assert!(!is_listener("PMW_CLICKHOUSE_URL"));
    }
}

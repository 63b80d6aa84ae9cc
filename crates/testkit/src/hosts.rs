//! Hosts as the unit of failure: each simulated host is a network namespace with its own
//! address on a bridge shared with the test (the root namespace, where clients and the checker
//! run), and a freezer cgroup holding every process started on it. A test can then kill a whole
//! host (SIGKILL to every process), freeze it (every process stopped), partition it from the
//! other hosts while clients still reach it, or isolate it from everything. Needs root
//! (CAP_NET_ADMIN, CAP_SYS_ADMIN) and `ip` (iproute2); everything is removed on drop.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use tokio::process::Command;

/// A set of hosts on one bridge. Dropping it kills every process started on them and removes
/// the namespaces, links and cgroups.
pub struct Hosts {
    tag: String,
    bridge: String,
    subnet: u8,
    hosts: Vec<Host>,
}

/// One host: a network namespace, its address, and the cgroup of its processes.
pub struct Host {
    pub index: usize,
    /// The network namespace (`ip netns exec <netns> …`).
    pub netns: String,
    pub ip: Ipv4Addr,
    /// The root-namespace end of the host's link.
    link: String,
    cgroup: Cgroup,
    /// Peers this host is cut from (blackhole routes on both sides).
    peers_of: Vec<Ipv4Addr>,
}

impl Hosts {
    /// Creates `n` hosts (at most 9) on a fresh bridge and subnet.
    pub fn create(n: usize) -> anyhow::Result<Hosts> {
        ensure!((1..=9).contains(&n), "between 1 and 9 hosts");
        let tag = format!("{:04x}", rand::random::<u16>());
        let subnet = 1 + (u16::from_str_radix(&tag, 16)? % 250) as u8;
        let bridge = format!("pmwb{tag}");
        let mut hosts = Hosts {
            tag: tag.clone(),
            bridge: bridge.clone(),
            subnet,
            hosts: Vec::new(),
        };
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", hosts.gateway()),
            "dev",
            &bridge,
        ])?;
        ip(&["link", "set", &bridge, "up"])?;
        for index in 1..=n {
            let host = Host::create(&tag, &bridge, subnet, index)?;
            hosts.hosts.push(host);
        }
        let all: Vec<Ipv4Addr> = hosts.hosts.iter().map(|h| h.ip).collect();
        for h in &mut hosts.hosts {
            h.peers_of = all.iter().copied().filter(|a| *a != h.ip).collect();
        }
        Ok(hosts)
    }

    pub fn host(&self, index: usize) -> &Host {
        &self.hosts[index - 1]
    }

    pub fn iter(&self) -> impl Iterator<Item = &Host> {
        self.hosts.iter()
    }

    /// The root namespace's address on the bridge (where the test's clients connect from).
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.subnet, 254)
    }

    /// Cuts host `index` from every other host (both directions) while the root namespace still
    /// reaches it: a split where clients see a host its peers cannot.
    pub fn partition(&self, index: usize) -> anyhow::Result<()> {
        self.cut(index, "add")
    }

    /// Undoes [`Hosts::partition`].
    pub fn heal(&self, index: usize) -> anyhow::Result<()> {
        self.cut(index, "del")
    }

    fn cut(&self, index: usize, op: &str) -> anyhow::Result<()> {
        let cut = self.host(index);
        for other in self.hosts.iter().filter(|h| h.index != index) {
            route(&other.netns, op, cut.ip)?;
        }
        for peer in &cut.peers_of {
            route(&cut.netns, op, *peer)?;
        }
        Ok(())
    }

    /// The name prefix of everything this set created (for logs).
    pub fn tag(&self) -> &str {
        &self.tag
    }
}

impl Hosts {
    /// Kills every process of every host and removes the namespaces, links, cgroups and the
    /// bridge, as dropping does (idempotent): for a process about to exit without unwinding
    /// (a signal).
    pub fn teardown(&self) {
        for h in &self.hosts {
            let _ = h.kill();
            let _ = h.cgroup.remove();
            let _ = ip(&["link", "del", &h.link]);
            let _ = ip(&["netns", "del", &h.netns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        self.teardown();
    }
}

impl Host {
    fn create(tag: &str, bridge: &str, subnet: u8, index: usize) -> anyhow::Result<Host> {
        let netns = format!("pmw-{tag}-h{index}");
        let link = format!("pv{tag}{index}");
        let inner = format!("pi{tag}{index}");
        let address = Ipv4Addr::new(10, 77, subnet, index as u8);
        ip(&["netns", "add", &netns])?;
        ip(&["link", "add", &link, "type", "veth", "peer", "name", &inner])?;
        ip(&["link", "set", &inner, "netns", &netns])?;
        ip(&["link", "set", &link, "master", bridge])?;
        ip(&["link", "set", &link, "up"])?;
        ip_in(&netns, &["link", "set", "lo", "up"])?;
        ip_in(&netns, &["link", "set", &inner, "name", "eth0"])?;
        ip_in(
            &netns,
            &["addr", "add", &format!("{address}/24"), "dev", "eth0"],
        )?;
        ip_in(&netns, &["link", "set", "eth0", "up"])?;
        let gateway = Ipv4Addr::new(10, 77, subnet, 254).to_string();
        ip_in(&netns, &["route", "add", "default", "via", &gateway])?;
        Ok(Host {
            index,
            netns: netns.clone(),
            ip: address,
            link,
            cgroup: Cgroup::create(&netns)?,
            peers_of: Vec::new(),
        })
    }

    /// A command that runs `program` on this host: in its network namespace, in its cgroup
    /// (so [`Host::kill`] and [`Host::freeze`] reach it and every child it starts).
    pub fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"echo $$ > "$0" && ns="$1" && shift && exec ip netns exec "$ns" "$@""#)
            .arg(self.cgroup.procs_file())
            .arg(&self.netns)
            .arg(program)
            .stdin(Stdio::null());
        cmd
    }

    /// The host's `cgroup.procs`: a process that writes its pid there is on the host (what
    /// [`Host::command`] does before it execs).
    pub fn procs_file(&self) -> PathBuf {
        self.cgroup.procs_file()
    }

    /// Every process on the host.
    pub fn pids(&self) -> Vec<u32> {
        self.cgroup.pids()
    }

    /// SIGKILL to every process of the host (frozen first, so none can fork away meanwhile),
    /// waiting until none is left.
    pub fn kill(&self) -> anyhow::Result<()> {
        self.cgroup.set_frozen(true)?;
        for _ in 0..100 {
            let pids = self.pids();
            if pids.is_empty() {
                return self.cgroup.set_frozen(false);
            }
            let mut kill = StdCommand::new("kill");
            kill.arg("-KILL").args(pids.iter().map(u32::to_string));
            // A pid that exited meanwhile makes kill(1) fail; the loop checks again.
            let _ = kill.stderr(Stdio::null()).status();
            self.cgroup.set_frozen(false)?;
            std::thread::sleep(Duration::from_millis(20));
            self.cgroup.set_frozen(true)?;
        }
        self.cgroup.set_frozen(false)?;
        bail!(
            "processes of {} survived SIGKILL: {:?}",
            self.netns,
            self.pids()
        )
    }

    /// Stops every process of the host (the cgroup freezer), as a host that hangs.
    pub fn freeze(&self) -> anyhow::Result<()> {
        self.cgroup.set_frozen(true)
    }

    pub fn thaw(&self) -> anyhow::Result<()> {
        self.cgroup.set_frozen(false)
    }

    /// Cuts the host's link: nothing reaches it, not even the root namespace.
    pub fn isolate(&self) -> anyhow::Result<()> {
        ip(&["link", "set", &self.link, "down"])
    }

    pub fn reconnect(&self) -> anyhow::Result<()> {
        ip(&["link", "set", &self.link, "up"])
    }
}

/// A freezer cgroup: v1 (`/sys/fs/cgroup/freezer`) where mounted, else cgroup v2.
struct Cgroup {
    dir: PathBuf,
    v1: bool,
}

impl Cgroup {
    fn create(name: &str) -> anyhow::Result<Cgroup> {
        let v1_root = Path::new("/sys/fs/cgroup/freezer");
        let (root, v1) = if v1_root.join("freezer.state").exists() || v1_root.is_dir() {
            (v1_root.to_path_buf(), true)
        } else if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            (PathBuf::from("/sys/fs/cgroup"), false)
        } else {
            bail!("no cgroup freezer: neither /sys/fs/cgroup/freezer nor cgroup v2 is mounted");
        };
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        Ok(Cgroup { dir, v1 })
    }

    fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.procs_file())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    fn set_frozen(&self, frozen: bool) -> anyhow::Result<()> {
        let (file, value) = match (self.v1, frozen) {
            (true, true) => ("freezer.state", "FROZEN"),
            (true, false) => ("freezer.state", "THAWED"),
            (false, true) => ("cgroup.freeze", "1"),
            (false, false) => ("cgroup.freeze", "0"),
        };
        std::fs::write(self.dir.join(file), value)
            .with_context(|| format!("write {value} to {}", self.dir.join(file).display()))
    }

    fn remove(&self) -> anyhow::Result<()> {
        self.set_frozen(false)?;
        std::fs::remove_dir(&self.dir).with_context(|| format!("rmdir {}", self.dir.display()))
    }
}

fn route(netns: &str, op: &str, to: Ipv4Addr) -> anyhow::Result<()> {
    ip_in(netns, &["route", op, "blackhole", &format!("{to}/32")])
}

fn ip_in(netns: &str, args: &[&str]) -> anyhow::Result<()> {
    let mut all = vec!["-n", netns];
    all.extend_from_slice(args);
    ip(&all)
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = StdCommand::new("ip")
        .args(args)
        .output()
        .context("run ip (iproute2)")?;
    ensure!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

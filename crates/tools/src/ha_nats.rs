//! Edge mode on the multi-host checker's hosts: one node of the locked 3-node NATS JetStream
//! cluster on each host, from the production template (deploy/nats/nats.conf, filled in as
//! `scripts/stack` does for its loopback cluster), listening on its host's address with a
//! certificate that names the three hosts. A host fault takes the node with its host; this
//! module owns the certificate, the roles' passwords, and (re)starting and killing a node.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context};
use pmw_testkit::{repo_root, Hosts, StackEnv};

use crate::ha_hosts::log_tail;

/// Ports inside every host's namespace.
pub const CLIENT_PORT: u16 = 4222;
pub const CLUSTER_PORT: u16 = 6222;
pub const HTTP_PORT: u16 = 8222;
/// The roles of deploy/nats/nats.conf with a password each.
const ROLES: [&str; 4] = ["push", "edge", "operator", "route"];

/// The NATS nodes of the hosts (node `i` on host `i`).
pub struct HostNats {
    dir: PathBuf,
    ips: Vec<std::net::Ipv4Addr>,
    passwords: BTreeMap<&'static str, String>,
    nodes: Mutex<Vec<Option<tokio::process::Child>>>,
}

impl HostNats {
    /// A CA and a server certificate for the hosts' addresses, the roles' passwords and each
    /// node's config in `dir`, and every node started (ready: [`HostNats::ready`]).
    pub fn start(hosts: &Hosts, dir: &Path) -> anyhow::Result<HostNats> {
        let dir = dir.join("nats");
        std::fs::create_dir_all(&dir)?;
        let ips: Vec<_> = hosts.iter().map(|h| h.ip).collect();
        tls(&dir, &ips)?;
        let passwords = ROLES
            .iter()
            .map(|r| (*r, format!("{:032x}", rand::random::<u128>())))
            .collect();
        let nats = HostNats {
            dir,
            ips,
            passwords,
            nodes: Mutex::new((0..hosts.iter().count()).map(|_| None).collect()),
        };
        for h in hosts.iter() {
            nats.write_config(h.index)?;
            nats.start_node(hosts, h.index)?;
        }
        Ok(nats)
    }

    /// Wait (up to `within`) until every node answers its health check with JetStream on.
    pub async fn ready(&self, within: Duration) -> anyhow::Result<()> {
        let http = reqwest::Client::builder().no_proxy().build()?;
        let t0 = tokio::time::Instant::now();
        for ip in &self.ips {
            let url = format!("http://{ip}:{HTTP_PORT}/healthz?js-enabled-only=true");
            loop {
                let ok = http
                    .get(&url)
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                if ok {
                    break;
                }
                if t0.elapsed() > within {
                    bail!(
                        "nats on {ip} not healthy after {within:?}: {}",
                        self.log_tails(20)
                    );
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }

    /// `base` with the cluster's client URLs (`tls://<host>:4222`), its CA and the roles'
    /// users and passwords, as `scripts/stack env` prints them for its own cluster.
    pub fn stack_env(&self, base: &StackEnv) -> StackEnv {
        let mut env = base.clone();
        let urls: Vec<String> = self
            .ips
            .iter()
            .map(|ip| format!("tls://{ip}:{CLIENT_PORT}"))
            .collect();
        env.vars.insert("PMW_NATS_URLS".into(), urls.join(","));
        env.vars.insert(
            "PMW_NATS_CA".into(),
            self.dir.join("ca.pem").display().to_string(),
        );
        for role in ["push", "edge", "operator"] {
            let up = role.to_ascii_uppercase();
            env.vars.insert(format!("PMW_NATS_{up}_USER"), role.into());
            env.vars.insert(
                format!("PMW_NATS_{up}_PASSWORD"),
                self.passwords[role].clone(),
            );
        }
        env
    }

    /// Start node `index` on its host unless it runs (after its host's kill or its own).
    pub fn start_node(&self, hosts: &Hosts, index: usize) -> anyhow::Result<()> {
        let mut nodes = self.nodes.lock().unwrap();
        let slot = &mut nodes[index - 1];
        if slot
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
        {
            return Ok(());
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("n{index}.log")))?;
        let mut cmd = hosts
            .host(index)
            .command(Path::new("/usr/sbin/nats-server"));
        cmd.arg("-c")
            .arg(self.dir.join(format!("n{index}.conf")))
            .stdout(log.try_clone()?)
            .stderr(log);
        *slot = Some(cmd.spawn().context("start nats-server")?);
        Ok(())
    }

    /// SIGKILL node `index` (the node lost, its host up), reaped.
    pub async fn kill_node(&self, index: usize) -> anyhow::Result<()> {
        let child = self.nodes.lock().unwrap()[index - 1].take();
        let mut child = child.with_context(|| format!("nats node {index} is not running"))?;
        child.kill().await.context("kill nats-server")?;
        Ok(())
    }

    /// Reap node `index` once its host's kill took it.
    pub fn reap(&self, index: usize) {
        if let Some(c) = self.nodes.lock().unwrap()[index - 1].as_mut() {
            let _ = c.try_wait();
        }
    }

    /// Every node killed (the hosts' teardown kills them too; this reaps what it can).
    pub fn stop(&self) {
        for c in self.nodes.lock().unwrap().iter_mut().flatten() {
            let _ = c.start_kill();
            let _ = c.try_wait();
        }
    }

    /// The last `lines` lines of each node's log.
    pub fn log_tails(&self, lines: usize) -> String {
        (1..=self.ips.len())
            .map(|i| {
                log_tail(
                    &self.dir.join(format!("n{i}.log")),
                    &format!("nats n{i}"),
                    lines,
                )
            })
            .collect()
    }

    /// Node `index`'s config: the template with its host's addresses and routes to the others.
    fn write_config(&self, index: usize) -> anyhow::Result<()> {
        let template = std::fs::read_to_string(repo_root().join("deploy/nats/nats.conf"))?;
        let ip = self.ips[index - 1];
        let routes: Vec<String> = (1..=self.ips.len())
            .filter(|&j| j != index)
            .map(|j| {
                format!(
                    "\"nats-route://route:{}@{}:{CLUSTER_PORT}\"",
                    self.passwords["route"],
                    self.ips[j - 1]
                )
            })
            .collect();
        let store = self.dir.join(format!("n{index}"));
        std::fs::create_dir_all(&store)?;
        let file = |f: &str| self.dir.join(f).display().to_string();
        let values = [
            ("SERVER_NAME", format!("pmw-n{index}")),
            ("LISTEN", format!("{ip}:{CLIENT_PORT}")),
            ("HTTP", format!("{ip}:{HTTP_PORT}")),
            ("CLUSTER_LISTEN", format!("{ip}:{CLUSTER_PORT}")),
            ("ROUTES", routes.join(", ")),
            ("STORE_DIR", store.display().to_string()),
            ("MAX_MEMORY_STORE", "256MB".into()),
            ("MAX_FILE_STORE", "4GB".into()),
            ("TLS_CERT", file("server.pem")),
            ("TLS_KEY", file("server.key")),
            ("TLS_CA", file("ca.pem")),
            ("ROUTE_PASSWORD", self.passwords["route"].clone()),
            ("PUSH_PASSWORD", self.passwords["push"].clone()),
            ("EDGE_PASSWORD", self.passwords["edge"].clone()),
            ("OPERATOR_PASSWORD", self.passwords["operator"].clone()),
            ("STREAM", "*".into()),
            ("PREFIX", "*".into()),
        ];
        let text = fill(&template, &values)?;
        std::fs::write(self.dir.join(format!("n{index}.conf")), text)?;
        Ok(())
    }
}

impl Drop for HostNats {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `template` with every `@NAME@` of `values` filled in; an `@NAME@` left outside a comment
/// is an error (as `scripts/stack` refuses one).
fn fill(template: &str, values: &[(&str, String)]) -> anyhow::Result<String> {
    let mut text = template.to_string();
    for (k, v) in values {
        text = text.replace(&format!("@{k}@"), v);
    }
    let unfilled = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find(|l| l.split('@').nth(1).is_some_and(is_placeholder));
    match unfilled {
        Some(l) => bail!("deploy/nats/nats.conf: unfilled template value in {l:?}"),
        None => Ok(text),
    }
}

fn is_placeholder(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_uppercase() || c == '_')
}

/// The server certificate's extensions: every host's address and loopback as IP SANs, client
/// and server use (routes present it to each other).
fn server_ext(ips: &[std::net::Ipv4Addr]) -> String {
    let san: Vec<String> = ips
        .iter()
        .map(|ip| format!("IP:{ip}"))
        .chain(["IP:127.0.0.1".into()])
        .collect();
    format!(
        "subjectAltName={}\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature\nbasicConstraints=CA:FALSE\n",
        san.join(",")
    )
}

/// The openssl commands that make the CA and the server certificate in the state dir (the
/// server's extensions from [`server_ext`], written first).
const OPENSSL_STEPS: [&[&str]; 3] = [
    &[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-days",
        "30",
        "-subj",
        "/CN=pmw-check hosts CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ],
    &[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-subj",
        "/CN=pmw-check hosts",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ],
    &[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "30",
        "-extfile",
        "server.ext",
        "-out",
        "server.pem",
    ],
];

/// A CA and one server certificate naming every host's address and loopback
/// ([`server_ext`]), made with openssl in `dir`.
fn tls(dir: &Path, ips: &[std::net::Ipv4Addr]) -> anyhow::Result<()> {
    std::fs::write(dir.join("server.ext"), server_ext(ips))?;
    for args in OPENSSL_STEPS {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()?;
        if !out.status.success() {
            bail!(
                "openssl {}: {}",
                args[0],
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_names_every_host_and_loopback_for_both_uses() {
        let ext = server_ext(&["10.77.1.1".parse().unwrap(), "10.77.1.2".parse().unwrap()]);
        let san = ext.lines().next().unwrap();
        assert_eq!(san, "subjectAltName=IP:10.77.1.1,IP:10.77.1.2,IP:127.0.0.1");
        assert!(
            ext.contains("extendedKeyUsage=serverAuth,clientAuth"),
            "{ext}"
        );
    }

    #[test]
    fn every_template_value_must_be_filled() {
        let template = "# @COMMENTED@ stays\nlisten: \"@LISTEN@\"\nemail: a@b.c\n";
        let filled = fill(template, &[("LISTEN", "10.0.0.1:4222".into())]).unwrap();
        assert!(filled.contains("listen: \"10.0.0.1:4222\""));
        let err = fill(template, &[]).unwrap_err().to_string();
        assert!(err.contains("@LISTEN@") || err.contains("LISTEN"), "{err}");
    }
}

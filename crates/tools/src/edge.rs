//! Edge mode for a drill stack: `PMW_EDGES` pmw-edge apps from the production ecosystem file on
//! ports of their own, push and the edges on the stack's NATS cluster with a stream no other
//! drill uses, and Caddy sending `/v1/ws` to the edges (`PMW_WS_MODE=edge`).

use pmw_testkit::{free_port, NatsRole, StackEnv};

/// What a drill adds for `n` edges.
pub struct Edges {
    pub ports: Vec<u16>,
    pub stream: String,
    prefix: String,
    urls: String,
    /// The drill's frame signing key pair: (push's signing key, the edges' verify key).
    keys: (String, String),
    /// Push's and the edges' identities on the locked cluster.
    push: NatsRole,
    edge: NatsRole,
}

impl Edges {
    /// `n` edges on the NATS cluster of `stack` (its `PMW_NATS_URLS`), push and the edges
    /// each with its own identity.
    pub fn new(n: usize, stack: &StackEnv) -> Edges {
        let tag = format!("{:08x}", rand::random::<u32>());
        Edges {
            ports: (0..n).map(|_| free_port()).collect(),
            stream: format!("PMW_T_{tag}"),
            prefix: format!("pmwt{tag}"),
            urls: stack.get("PMW_NATS_URLS").to_string(),
            keys: pmw_session::bus::sign::generate("drill").expect("system randomness"),
            push: stack.nats_role("push"),
            edge: stack.nats_role("edge"),
        }
    }

    /// The apps' environment: edge ports and metrics ports, and the broker for push and edges.
    pub fn env(&self) -> Vec<(String, String)> {
        if self.ports.is_empty() {
            return Vec::new();
        }
        let urls = self.urls.clone();
        let mut env = vec![
            ("PMW_EDGES".to_string(), self.ports.len().to_string()),
            ("PMW_PUSH_NATS_URLS".into(), urls.clone()),
            ("PMW_PUSH_NATS_STREAM".into(), self.stream.clone()),
            ("PMW_PUSH_NATS_PREFIX".into(), self.prefix.clone()),
            ("PMW_EDGE_NATS_URLS".into(), urls),
            ("PMW_EDGE_NATS_STREAM".into(), self.stream.clone()),
            ("PMW_EDGE_NATS_PREFIX".into(), self.prefix.clone()),
            ("PMW_EDGE_WS_HEARTBEAT_MS".into(), "1000".into()),
            // pm2 gives every app the same environment: the edges get the signing key too
            // here (a drill's throwaway key); production env files keep it push's alone.
            ("PMW_BUS_SIGNING_KEY".into(), self.keys.0.clone()),
            ("PMW_BUS_VERIFY_KEYS".into(), self.keys.1.clone()),
        ];
        env.extend(self.push.env("PUSH"));
        env.extend(self.edge.env("EDGE"));
        for (i, p) in self.ports.iter().enumerate() {
            env.push((format!("PMW_EDGE_{}_PORT", i + 1), p.to_string()));
            env.push((
                format!("PMW_EDGE_{}_METRICS_PORT", i + 1),
                free_port().to_string(),
            ));
        }
        env
    }

    /// `,pmw-edge-1,…` for pm2's `--only`.
    pub fn apps(&self) -> String {
        (1..=self.ports.len())
            .map(|i| format!(",pmw-edge-{i}"))
            .collect()
    }

    /// Caddy's environment: `/v1/ws` to the edges (each on its host's address when `placed`).
    pub fn caddy(&self, placed: Option<&crate::placed::Placed>) -> Vec<(&'static str, String)> {
        if self.ports.is_empty() {
            return Vec::new();
        }
        let upstreams: Vec<String> = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| match placed.and_then(|pl| pl.edge_ip(i + 1)) {
                Some(ip) => format!("{ip}:{p}"),
                None => format!("127.0.0.1:{p}"),
            })
            .collect();
        vec![
            ("PMW_WS_MODE", "edge".into()),
            ("PMW_EDGE_UPSTREAMS", upstreams.join(" ")),
        ]
    }
}

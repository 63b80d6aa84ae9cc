//! Edge mode's tests on the locked broker: a stream of their own on a cluster, as its operator,
//! with the cluster's identities for push and the edges (deploy/nats/nats.conf).

use pmw_session::bus::{sign, BusAccess, BusConfig};
use pmw_testkit::{NatsRole, StackEnv};

/// A stream and prefix no other test uses on a cluster (as its operator), and the cluster's
/// identities for push and the edges.
#[derive(Clone)]
pub struct TestBus {
    pub config: BusConfig,
    pub push: NatsRole,
    pub edge: NatsRole,
}

impl std::ops::Deref for TestBus {
    type Target = BusConfig;
    fn deref(&self) -> &BusConfig {
        &self.config
    }
}

impl std::ops::DerefMut for TestBus {
    fn deref_mut(&mut self) -> &mut BusConfig {
        &mut self.config
    }
}

/// `role`'s access to the locked broker.
pub fn access(role: &NatsRole) -> BusAccess {
    BusAccess::new(&role.user, &role.password, role.ca.clone())
}

/// The frame signing key pair of this binary's push leaders: (signing key, verify key).
pub fn keys() -> &'static (String, String) {
    static KEYS: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| sign::generate("e2e").expect("keygen"))
}

/// A [`TestBus`] on the cluster of the stack `env`, signing with [`keys`].
pub fn bus_config(env: &StackEnv) -> TestBus {
    let tag = format!("{:08x}", rand::random::<u32>());
    let (secret, public) = keys();
    let mut c = BusConfig::new(env.get("PMW_NATS_URLS"))
        .with_access(access(&env.nats_role("operator")))
        .signed(
            Some(sign::SigningKey::parse(secret).unwrap()),
            sign::VerifyKeys::parse(public).unwrap(),
        );
    c.stream = format!("PMW_T_{tag}");
    c.prefix = format!("pmwt{tag}");
    TestBus {
        config: c,
        push: env.nats_role("push"),
        edge: env.nats_role("edge"),
    }
}

/// A [`TestBus`] on the shared stack's cluster.
pub fn shared_bus() -> TestBus {
    pmw_testkit::nats_urls();
    bus_config(pmw_testkit::stack_env())
}

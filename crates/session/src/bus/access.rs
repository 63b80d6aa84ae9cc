//! How pmw presents itself to the locked broker (docs/OPERATIONS.md "Broker security"): the
//! role's user and password (sent with the client's CONNECT: async-nats does not send a URL's
//! user and password, so URLs may not carry any), the CA that the servers' TLS certificates are
//! checked against, and the rule that refuses plain `nats://` to a host that is not loopback.

use std::fmt;
use std::path::PathBuf;

use async_nats::{ConnectOptions, ServerAddr};
use secrecy::{ExposeSecret, SecretString};

use super::BusError;

/// A role's credentials and TLS settings (`PMW_<SERVICE>_NATS_USER`, `_PASSWORD`, `_CA`,
/// `_ALLOW_INSECURE`). The password is a secret: never logged, redacted in `Debug`.
#[derive(Clone, Default)]
pub struct BusAccess {
    /// The role's user (`push`, `edge`, `operator` in deploy/nats/nats.conf).
    pub user: Option<String>,
    pub password: Option<SecretString>,
    /// The CA file the servers' certificates are checked against; set, TLS is required.
    pub ca: Option<PathBuf>,
    /// Accept plain `nats://` to a host that is not loopback (never in production).
    pub allow_insecure: bool,
}

impl fmt::Debug for BusAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BusAccess")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .field("ca", &self.ca)
            .field("allow_insecure", &self.allow_insecure)
            .finish()
    }
}

impl BusAccess {
    /// `user` with `password`, servers checked against the CA file `ca` when given.
    pub fn new(user: &str, password: &str, ca: Option<PathBuf>) -> BusAccess {
        BusAccess {
            user: Some(user.to_string()),
            password: Some(SecretString::from(password.to_string())),
            ca,
            allow_insecure: false,
        }
    }

    /// Whether TLS is required: a CA is configured or a URL says `tls://`.
    pub fn tls(&self, addrs: &[ServerAddr]) -> bool {
        self.ca.is_some() || addrs.iter().any(ServerAddr::tls_required)
    }

    /// A user has a password and the other way round; the CA file can be read; no URL carries
    /// credentials (they would not be sent, and would be logged); no plain connection to a host
    /// that is not loopback unless allowed. Never quotes a URL.
    pub fn check(&self, addrs: &[ServerAddr]) -> Result<(), BusError> {
        let empty = |s: Option<&str>| s.is_none_or(str::is_empty);
        let password = self.password.as_ref().map(|p| p.expose_secret());
        if empty(self.user.as_deref()) != empty(password) {
            return Err(BusError::Invalid(
                "a NATS user needs its password, and a password its user".into(),
            ));
        }
        if let Some(ca) = &self.ca {
            if std::fs::File::open(ca).is_err() {
                return Err(BusError::Invalid(format!(
                    "the NATS CA file {} cannot be read",
                    ca.display()
                )));
            }
        }
        if addrs.iter().any(|a| a.has_user_pass()) {
            return Err(BusError::Invalid(
                "a NATS URL carries credentials: give them as the user and password settings \
                 (the client does not send a URL's)"
                    .into(),
            ));
        }
        if !self.tls(addrs) && !self.allow_insecure {
            if let Some(a) = addrs.iter().find(|a| !is_loopback(a.host())) {
                return Err(BusError::Invalid(format!(
                    "plain nats:// to {}, which is not loopback: use tls:// and the CA setting, \
                     or allow insecure explicitly",
                    a.host()
                )));
            }
        }
        Ok(())
    }

    /// The client options with these credentials and TLS settings.
    pub fn apply(&self, opts: ConnectOptions, addrs: &[ServerAddr]) -> ConnectOptions {
        let mut opts = opts;
        if let (Some(user), Some(password)) = (&self.user, &self.password) {
            if !user.is_empty() {
                opts = opts.user_and_password(user.clone(), password.expose_secret().to_string());
            }
        }
        if let Some(ca) = &self.ca {
            opts = opts.add_root_certificates(ca.clone());
        }
        opts.require_tls(self.tls(addrs))
    }
}

/// 127.0.0.0/8, `::1` or `localhost`.
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(urls: &[&str]) -> Vec<ServerAddr> {
        urls.iter().map(|u| u.parse().unwrap()).collect()
    }

    #[test]
    fn plain_nats_is_refused_beyond_loopback_unless_allowed() {
        let open = BusAccess::default();
        assert!(open.check(&addrs(&["nats://127.0.0.1:4222"])).is_ok());
        assert!(open.check(&addrs(&["nats://localhost:4222"])).is_ok());
        assert!(open.check(&addrs(&["nats://[::1]:4222"])).is_ok());
        let remote = addrs(&["nats://127.0.0.1:4222", "nats://10.0.0.7:4222"]);
        let e = open.check(&remote).unwrap_err().to_string();
        assert!(e.contains("10.0.0.7") && e.contains("not loopback"), "{e}");
        assert!(open.check(&addrs(&["tls://10.0.0.7:4222"])).is_ok());
        let ca = std::env::temp_dir().join(format!("pmw-ca-{}.pem", std::process::id()));
        std::fs::write(&ca, "not read here").unwrap();
        let with_ca = BusAccess {
            ca: Some(ca.clone()),
            ..BusAccess::default()
        };
        assert!(with_ca.check(&remote).is_ok());
        assert!(with_ca.tls(&remote));
        std::fs::remove_file(&ca).unwrap();
        let e = with_ca.check(&remote).unwrap_err().to_string();
        assert!(e.contains("cannot be read"), "{e}");
        let allowed = BusAccess {
            allow_insecure: true,
            ..BusAccess::default()
        };
        assert!(allowed.check(&remote).is_ok());
    }

    #[test]
    fn credentials_come_whole_and_never_in_a_url() {
        let a = addrs(&["tls://127.0.0.1:4222"]);
        assert!(BusAccess::new("edge", "pw", None).check(&a).is_ok());
        let half = BusAccess {
            user: Some("edge".into()),
            ..BusAccess::default()
        };
        assert!(half.check(&a).is_err());
        let e = BusAccess::default()
            .check(&addrs(&["tls://edge:s3cret@127.0.0.1:4222"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("carries credentials") && !e.contains("s3cret"),
            "{e}"
        );
    }

    #[test]
    fn the_password_is_never_in_debug() {
        let a = BusAccess::new("push", "hunter2-secret", None);
        let d = format!("{a:?}");
        assert!(d.contains("push") && d.contains("[redacted]"), "{d}");
        assert!(!d.contains("hunter2"), "{d}");
    }
}

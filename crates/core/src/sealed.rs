//! Secrets at rest: webhook signing secrets are stored sealed with an operator key
//! (XChaCha20-Poly1305 from RustCrypto's `chacha20poly1305`, a random 24-byte nonce per seal),
//! as `pmwsealed:v1:<key id>:<base64 of nonce and ciphertext>`; the key id beside the
//! ciphertext names the key that opens it, and is authenticated with it.
//!
//! The keys come from `PMW_SECRET_KEYS` (environment only; validated by
//! [`crate::config::CoreConfig`] so a broken value stops a service with exit 78):
//! `id:base64key[,id:base64key…]`, each key 32 bytes, the first one sealing and every one
//! opening. Rotation: put a new key first, keep the old ones after it, restart, run
//! `pmwctl secrets reseal` (seals every stored secret with the first key), then drop the old
//! keys. A stored value that is not sealed (`whsec_…`, from before a key was configured) is read
//! as it is, and sealed by `reseal`. Without `PMW_SECRET_KEYS`, new secrets are stored as they
//! are (a warning at start-up): development without `scripts/stack`'s generated key only.

use std::fmt;
use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

/// The environment variable holding the keys.
pub const ENV: &str = "PMW_SECRET_KEYS";
/// Start of a sealed value.
pub const PREFIX: &str = "pmwsealed:v1:";
const KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 24;

/// Why keys or a stored value cannot be used. Never shows key material or plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("{ENV}: {0}")]
    Keys(String),
    #[error("sealed secret names key {0:?}, which {ENV} does not hold")]
    UnknownKey(String),
    #[error("sealed secret is malformed")]
    Malformed,
    #[error("sealed secret does not open with key {0:?} (wrong key or altered value)")]
    Open(String),
    #[error("secret is sealed but {ENV} is not set")]
    NoKeys,
}

/// The operator's keys: the first seals, all open. Its `Debug` shows key ids only.
pub struct Keyring {
    keys: Vec<(String, XChaCha20Poly1305)>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        write!(f, "Keyring({ids:?})")
    }
}

fn valid_id(id: &str) -> bool {
    (1..=32).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Keyring {
    /// Parse `id:base64key[,id:base64key…]`.
    pub fn parse(spec: &str) -> Result<Keyring, SealError> {
        let mut keys: Vec<(String, XChaCha20Poly1305)> = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (id, b64) = part
                .split_once(':')
                .ok_or_else(|| SealError::Keys("each key is id:base64".into()))?;
            if !valid_id(id) {
                return Err(SealError::Keys(format!(
                    "key id {id:?} must be 1 to 32 letters, digits, - or _"
                )));
            }
            if keys.iter().any(|(k, _)| k == id) {
                return Err(SealError::Keys(format!("key id {id:?} appears twice")));
            }
            let key = STANDARD
                .decode(b64.trim())
                .ok()
                .filter(|k| k.len() == KEY_BYTES)
                .ok_or_else(|| {
                    SealError::Keys(format!("key {id:?} must be {KEY_BYTES} bytes of base64"))
                })?;
            let cipher = XChaCha20Poly1305::new_from_slice(&key)
                .map_err(|_| SealError::Keys(format!("key {id:?} is not usable")))?;
            keys.push((id.to_string(), cipher));
        }
        if keys.is_empty() {
            return Err(SealError::Keys("no key".into()));
        }
        Ok(Keyring { keys })
    }

    /// A new random key in the setting's form, `id:base64key` (for `scripts/` and operators).
    pub fn generate_entry(id: &str) -> String {
        let key = XChaCha20Poly1305::generate_key(&mut OsRng);
        format!("{id}:{}", STANDARD.encode(key))
    }

    /// The id of the sealing key.
    pub fn current_id(&self) -> &str {
        &self.keys[0].0
    }

    /// Seal `plain` with the first key.
    pub fn seal(&self, plain: &str) -> String {
        let (id, cipher) = &self.keys[0];
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let aad = format!("{PREFIX}{id}");
        let ct = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plain.as_bytes(),
                    aad: aad.as_bytes(),
                },
            )
            .expect("XChaCha20-Poly1305 seals any length we store");
        let mut blob = nonce.to_vec();
        blob.extend_from_slice(&ct);
        format!("{aad}:{}", STANDARD.encode(blob))
    }

    /// Open a stored value: a sealed one with the key it names, anything else as it is.
    pub fn open(&self, stored: &str) -> Result<String, SealError> {
        let Some(rest) = stored.strip_prefix(PREFIX) else {
            return Ok(stored.to_string());
        };
        let (id, b64) = rest.split_once(':').ok_or(SealError::Malformed)?;
        let cipher = self
            .keys
            .iter()
            .find(|(k, _)| k == id)
            .map(|(_, c)| c)
            .ok_or_else(|| SealError::UnknownKey(id.to_string()))?;
        let blob = STANDARD.decode(b64).map_err(|_| SealError::Malformed)?;
        if blob.len() < NONCE_BYTES {
            return Err(SealError::Malformed);
        }
        let (nonce, ct) = blob.split_at(NONCE_BYTES);
        let aad = format!("{PREFIX}{id}");
        let plain = cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ct,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| SealError::Open(id.to_string()))?;
        String::from_utf8(plain).map_err(|_| SealError::Malformed)
    }

    /// Whether `stored` is sealed with the current key (what `reseal` leaves alone).
    pub fn is_current(&self, stored: &str) -> bool {
        stored
            .strip_prefix(PREFIX)
            .and_then(|r| r.split_once(':'))
            .is_some_and(|(id, _)| id == self.current_id())
    }
}

/// The process's keys, read from [`ENV`] once (`None` when unset or empty; an invalid value is
/// refused at configuration load, and treated as unset here).
pub fn keyring() -> Option<&'static Keyring> {
    static KEYS: OnceLock<Option<Keyring>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let spec = std::env::var(ENV).ok().filter(|s| !s.trim().is_empty())?;
        Keyring::parse(&spec).ok()
    })
    .as_ref()
}

/// What to store for a new secret: sealed when keys are configured.
pub fn seal(plain: &str) -> String {
    match keyring() {
        Some(k) => k.seal(plain),
        None => plain.to_string(),
    }
}

/// The secret a stored value holds (unsealed with the process's keys; unsealed values as
/// they are).
pub fn open(stored: &str) -> Result<String, SealError> {
    match keyring() {
        Some(k) => k.open(stored),
        None if stored.starts_with(PREFIX) => Err(SealError::NoKeys),
        None => Ok(stored.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(spec: &str) -> Keyring {
        Keyring::parse(spec).unwrap()
    }

    #[test]
    fn sealed_values_hide_the_secret_and_open_with_any_listed_key() {
        let old = Keyring::generate_entry("k1");
        let new = Keyring::generate_entry("k2");
        let before = ring(&old);
        let sealed = before.seal("whsec_abc");
        assert!(sealed.starts_with("pmwsealed:v1:k1:") && !sealed.contains("whsec_"));
        assert_ne!(sealed, before.seal("whsec_abc"), "a fresh nonce per seal");
        assert_eq!(before.open(&sealed).unwrap(), "whsec_abc");
        // Rotation: the new key seals, the old one still opens.
        let after = ring(&format!("{new},{old}"));
        assert_eq!(after.open(&sealed).unwrap(), "whsec_abc");
        assert!(!after.is_current(&sealed));
        let resealed = after.seal(&after.open(&sealed).unwrap());
        assert!(after.is_current(&resealed));
        // Dropping the old key: its values no longer open; plain values pass through.
        assert_eq!(
            ring(&new).open(&sealed).unwrap_err(),
            SealError::UnknownKey("k1".into())
        );
        assert_eq!(ring(&new).open("whsec_plain").unwrap(), "whsec_plain");
    }

    #[test]
    fn an_altered_value_or_a_relabelled_key_does_not_open() {
        let a = Keyring::generate_entry("a");
        let r = ring(&a);
        let sealed = r.seal("whsec_x");
        let mut bytes = sealed.clone().into_bytes();
        let last = bytes.len() - 3;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(bytes).unwrap();
        assert!(r.open(&altered).is_err());
        // The same key under another id: the id is authenticated.
        let key = a.split_once(':').unwrap().1;
        let relabelled = ring(&format!("b:{key}"));
        let moved = sealed.replacen(":a:", ":b:", 1);
        assert_eq!(
            relabelled.open(&moved).unwrap_err(),
            SealError::Open("b".into())
        );
        assert_eq!(r.open("pmwsealed:v1:a").unwrap_err(), SealError::Malformed);
    }

    #[test]
    fn key_settings_are_checked() {
        for bad in [
            "",
            "nokey",
            "a:short",
            "a b:AAAA",
            &format!("a:{}", "A".repeat(44)),
        ] {
            assert!(Keyring::parse(bad).is_err(), "{bad:?}");
        }
        let e = Keyring::generate_entry("x");
        assert!(Keyring::parse(&format!("{e},{e}")).is_err(), "duplicate id");
        let k = ring(&e);
        assert_eq!(format!("{k:?}"), "Keyring([\"x\"])");
    }
}

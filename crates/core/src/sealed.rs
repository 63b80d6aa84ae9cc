//! Secrets at rest: webhook signing secrets are stored sealed with an operator key
//! (XChaCha20-Poly1305 from RustCrypto's `chacha20poly1305`, a random 24-byte nonce per seal),
//! as `pmwsealed:v2:<key id>:<base64 of nonce and ciphertext>`, bound to their endpoint: the
//! associated data is the prefix, the key id and the endpoint id, so a sealed value copied to
//! another endpoint's row (or relabelled with another key id) does not open. Values of the first
//! format (`pmwsealed:v1:…`, key id only, no endpoint) still open; `pmwctl secrets reseal`
//! upgrades them to v2.
//!
//! The keys come from `PMW_SECRET_KEYS` (environment only; validated by
//! [`crate::config::CoreConfig`] so a broken value stops a service with exit 78):
//! `id:base64key[,id:base64key…]`, each key 32 bytes, the first one sealing and every one
//! opening. Rotation: put a new key first, keep the old ones after it, restart, run
//! `pmwctl secrets reseal` (seals every stored secret with the first key), then drop the old
//! keys. A stored value that is not sealed (`whsec_…`, from before a key was configured) is read
//! as it is, and sealed by `reseal`. Without `PMW_SECRET_KEYS`, new secrets are stored as they
//! are: `/v1/ready` and `pmwctl status` warn ([`UNSET_WARNING`]), and a production
//! configuration (`PMW_ENV=production`) refuses to start unless `PMW_ALLOW_UNSEALED_SECRETS`.

use std::fmt;
use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

/// The environment variable holding the keys.
pub const ENV: &str = "PMW_SECRET_KEYS";
/// Start of a sealed value of the first format (no endpoint binding; opened, never written).
pub const PREFIX_V1: &str = "pmwsealed:v1:";
/// Start of a sealed value bound to its endpoint (what [`Keyring::seal`] writes).
pub const PREFIX: &str = "pmwsealed:v2:";
/// What every sealed value starts with, whatever its format.
pub const SEALED: &str = "pmwsealed:";
/// The warning `/v1/ready` and `pmwctl status` give when a service runs without keys.
pub const UNSET_WARNING: &str = "PMW_SECRET_KEYS is unset: new webhook signing secrets are stored unsealed (set it, restart, then run pmwctl secrets reseal; see docs/OPERATIONS.md, secrets at rest)";
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

    /// Seal `plain`, the secret of endpoint `endpoint`, with the first key.
    pub fn seal(&self, plain: &str, endpoint: i64) -> String {
        let (id, cipher) = &self.keys[0];
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let aad = format!("{PREFIX}{id}:endpoint:{endpoint}");
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
        format!("{PREFIX}{id}:{}", STANDARD.encode(blob))
    }

    /// Open a value stored in endpoint `endpoint`'s row: a sealed one with the key it names
    /// (a v2 value only in the row it was sealed for), anything else as it is.
    pub fn open(&self, stored: &str, endpoint: i64) -> Result<String, SealError> {
        let (prefix, rest) = match (stored.strip_prefix(PREFIX), stored.strip_prefix(PREFIX_V1)) {
            (Some(rest), _) => (PREFIX, rest),
            (None, Some(rest)) => (PREFIX_V1, rest),
            (None, None) if stored.starts_with(SEALED) => return Err(SealError::Malformed),
            (None, None) => return Ok(stored.to_string()),
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
        let aad = match prefix {
            PREFIX => format!("{PREFIX}{id}:endpoint:{endpoint}"),
            _ => format!("{PREFIX_V1}{id}"),
        };
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

    /// Whether `stored` is sealed with the current key in the current format (what `reseal`
    /// leaves alone).
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

/// What to store for endpoint `endpoint`'s new secret: sealed (bound to the endpoint) when keys
/// are configured.
pub fn seal(plain: &str, endpoint: i64) -> String {
    match keyring() {
        Some(k) => k.seal(plain, endpoint),
        None => plain.to_string(),
    }
}

/// The secret a value stored in endpoint `endpoint`'s row holds (unsealed with the process's
/// keys; unsealed values as they are).
pub fn open(stored: &str, endpoint: i64) -> Result<String, SealError> {
    match keyring() {
        Some(k) => k.open(stored, endpoint),
        None if stored.starts_with(SEALED) => Err(SealError::NoKeys),
        None => Ok(stored.to_string()),
    }
}

/// The warning for a process running without keys ([`UNSET_WARNING`]), if it does.
pub fn unset_warning() -> Option<&'static str> {
    keyring().is_none().then_some(UNSET_WARNING)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(spec: &str) -> Keyring {
        Keyring::parse(spec).unwrap()
    }

    /// A value sealed as the first format did (no endpoint in the associated data).
    fn seal_v1(spec: &str, plain: &str) -> String {
        let (id, b64) = spec.split_once(':').unwrap();
        let cipher = XChaCha20Poly1305::new_from_slice(&STANDARD.decode(b64).unwrap()).unwrap();
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let aad = format!("{PREFIX_V1}{id}");
        let payload = Payload {
            msg: plain.as_bytes(),
            aad: aad.as_bytes(),
        };
        let mut blob = nonce.to_vec();
        blob.extend_from_slice(&cipher.encrypt(&nonce, payload).unwrap());
        format!("{aad}:{}", STANDARD.encode(blob))
    }

    #[test]
    fn sealed_values_hide_the_secret_and_open_with_any_listed_key() {
        let old = Keyring::generate_entry("k1");
        let new = Keyring::generate_entry("k2");
        let before = ring(&old);
        let sealed = before.seal("whsec_abc", 7);
        assert!(sealed.starts_with("pmwsealed:v2:k1:") && !sealed.contains("whsec_"));
        assert_ne!(
            sealed,
            before.seal("whsec_abc", 7),
            "a fresh nonce per seal"
        );
        assert_eq!(before.open(&sealed, 7).unwrap(), "whsec_abc");
        // Rotation: the new key seals, the old one still opens.
        let after = ring(&format!("{new},{old}"));
        assert_eq!(after.open(&sealed, 7).unwrap(), "whsec_abc");
        assert!(!after.is_current(&sealed));
        let resealed = after.seal(&after.open(&sealed, 7).unwrap(), 7);
        assert!(after.is_current(&resealed));
        // Dropping the old key: its values no longer open; plain values pass through.
        assert_eq!(
            ring(&new).open(&sealed, 7).unwrap_err(),
            SealError::UnknownKey("k1".into())
        );
        assert_eq!(ring(&new).open("whsec_plain", 7).unwrap(), "whsec_plain");
    }

    #[test]
    fn a_sealed_value_opens_only_in_the_endpoint_row_it_was_sealed_for() {
        let r = ring(&Keyring::generate_entry("k"));
        let sealed = r.seal("whsec_mine", 41);
        assert_eq!(r.open(&sealed, 41).unwrap(), "whsec_mine");
        assert_eq!(
            r.open(&sealed, 42).unwrap_err(),
            SealError::Open("k".into())
        );
    }

    #[test]
    fn first_format_values_still_open_and_are_not_current() {
        let spec = Keyring::generate_entry("k");
        let r = ring(&spec);
        let v1 = seal_v1(&spec, "whsec_old");
        assert!(v1.starts_with(PREFIX_V1));
        // Unbound: they open in any row, until `reseal` binds them.
        assert_eq!(r.open(&v1, 1).unwrap(), "whsec_old");
        assert_eq!(r.open(&v1, 2).unwrap(), "whsec_old");
        assert!(!r.is_current(&v1), "reseal upgrades them");
        assert_eq!(
            r.open("pmwsealed:v9:k:AAAA", 1).unwrap_err(),
            SealError::Malformed
        );
    }

    #[test]
    fn an_altered_value_or_a_relabelled_key_does_not_open() {
        let a = Keyring::generate_entry("a");
        let r = ring(&a);
        let sealed = r.seal("whsec_x", 1);
        let mut bytes = sealed.clone().into_bytes();
        let last = bytes.len() - 3;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(bytes).unwrap();
        assert!(r.open(&altered, 1).is_err());
        // The same key under another id: the id is authenticated.
        let key = a.split_once(':').unwrap().1;
        let relabelled = ring(&format!("b:{key}"));
        let moved = sealed.replacen(":a:", ":b:", 1);
        assert_eq!(
            relabelled.open(&moved, 1).unwrap_err(),
            SealError::Open("b".into())
        );
        assert_eq!(
            r.open("pmwsealed:v2:a", 1).unwrap_err(),
            SealError::Malformed
        );
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

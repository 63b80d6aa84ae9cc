//! Frame signing (docs/ARCHITECTURE.md §3.6, "Frames signed"): the push leader signs every
//! message it stores on the stream (round parts and epoch markers) with Ed25519 (`ring`, already
//! in the tree through rustls), and followers verify before anything is decoded. The signature
//! covers the body and binds the message to its key id, its epoch, its subject (the account),
//! its message id (the frame's position: cursor, block hash, kind) and its `Pmw-Prev` (the
//! stream sequence of the account's previous frame), so a valid part replayed under another id,
//! on another subject, after another predecessor or under another epoch fails.
//!
//! Keys are text: a signing key `<id>:<64 hex of the 32-byte seed>` (`PMW_BUS_SIGNING_KEY`, a
//! secret: its `Debug` is redacted), verify keys `<id>:<64 hex of the public key>`, several
//! comma-separated (`PMW_BUS_VERIFY_KEYS`, rotation). `pmwctl bus keygen` prints a pair.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_nats::HeaderMap;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};

use super::frame::{header_u64, msg_id, EPOCH, PREV};
use super::BusError;

/// Header: the signature (128 hex).
pub(crate) const SIG: &str = "Pmw-Sig";
/// Header: the id of the key that signed.
pub(crate) const KEY_ID: &str = "Pmw-Key-Id";

/// Domain separation: a signature over a frame is never valid for anything else.
const DOMAIN: &[u8] = b"pmw-frame-v1\0";

/// Why a message on the stream is refused (the `reason` label of the refusal metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// No signature or key id.
    Unsigned,
    /// Signed with a key id no verify key has.
    UnknownKey,
    /// The signature does not verify (forged, or a field changed after signing).
    Forged,
    /// Headers that do not parse (no message id, a non-numeric epoch, …).
    Malformed,
    /// Validly signed, but by an epoch below the highest one seen.
    StaleEpoch,
    /// Validly signed, but chained behind what the follower already has (a replay).
    Replayed,
    /// Validly signed, but chained to a message the follower refused: a leader's frame
    /// pipelined behind a message that took its predecessor's id (the leader stores it again).
    Misplaced,
    /// Validly signed, but its body is not a round part.
    Undecodable,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Unsigned => "unsigned",
            Refusal::UnknownKey => "unknown_key",
            Refusal::Forged => "forged",
            Refusal::Malformed => "malformed",
            Refusal::StaleEpoch => "stale_epoch",
            Refusal::Replayed => "replayed",
            Refusal::Misplaced => "misplaced",
            Refusal::Undecodable => "undecodable",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

/// What a signature binds besides the key id and the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound<'a> {
    pub epoch: i64,
    /// The subject it is stored on (`<prefix>.frames.<account>`, `<prefix>.epoch`).
    pub subject: &'a str,
    /// Its `Nats-Msg-Id`.
    pub msg_id: &'a str,
    /// Its `Pmw-Prev` (0 for an epoch marker).
    pub prev: u64,
}

/// The bytes signed: the domain, then each field length-prefixed (u32, big endian), so no two
/// field lists encode alike.
pub fn payload(key_id: &str, bound: &Bound<'_>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(DOMAIN.len() + 64 + body.len() + bound.msg_id.len());
    out.extend_from_slice(DOMAIN);
    for field in [
        key_id.as_bytes(),
        &bound.epoch.to_be_bytes(),
        bound.subject.as_bytes(),
        bound.msg_id.as_bytes(),
        &bound.prev.to_be_bytes(),
        body,
    ] {
        out.extend_from_slice(&(field.len() as u32).to_be_bytes());
        out.extend_from_slice(field);
    }
    out
}

/// A key id: 1-32 of `[A-Za-z0-9_-]`.
fn check_id(id: &str) -> Result<(), BusError> {
    let ok = !id.is_empty()
        && id.len() <= 32
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(BusError::Invalid(format!(
            "key id {id:?} is not 1-32 of A-Z a-z 0-9 _ -"
        )))
    }
}

/// `<id>:<64 hex>` as the id and 32 bytes.
fn split_key(text: &str, what: &str) -> Result<(String, [u8; 32]), BusError> {
    let bad = || BusError::Invalid(format!("{what}: expected <id>:<64 hex digits>"));
    let (id, hex_part) = text.trim().split_once(':').ok_or_else(bad)?;
    check_id(id)?;
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut bytes).map_err(|_| bad())?;
    Ok((id.to_string(), bytes))
}

/// The push leader's signing key (a secret: never logged).
#[derive(Clone)]
pub struct SigningKey {
    id: String,
    pair: Arc<Ed25519KeyPair>,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("id", &self.id)
            .field("seed", &pmw_core::redact::HIDDEN)
            .finish()
    }
}

impl SigningKey {
    /// From `<id>:<64 hex of the seed>` (`PMW_BUS_SIGNING_KEY`).
    pub fn parse(text: &str) -> Result<SigningKey, BusError> {
        let (id, seed) = split_key(text, "signing key")?;
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed)
            .map_err(|_| BusError::Invalid("signing key: not an Ed25519 seed".into()))?;
        Ok(SigningKey {
            id,
            pair: Arc::new(pair),
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its public half as a verify key (`<id>:<hex>`).
    pub fn public(&self) -> String {
        format!(
            "{}:{}",
            self.id,
            hex::encode(self.pair.public_key().as_ref())
        )
    }

    /// The signature of `body` bound to `bound` (hex).
    pub fn sign(&self, bound: &Bound<'_>, body: &[u8]) -> String {
        hex::encode(self.pair.sign(&payload(&self.id, bound, body)).as_ref())
    }
}

/// A fresh key pair: (signing key, verify key), both as text.
pub fn generate(id: &str) -> Result<(String, String), BusError> {
    check_id(id)?;
    let mut seed = [0u8; 32];
    SystemRandom::new()
        .fill(&mut seed)
        .map_err(|_| BusError::Invalid("no system randomness".into()))?;
    let secret = format!("{id}:{}", hex::encode(seed));
    let public = SigningKey::parse(&secret)?.public();
    Ok((secret, public))
}

/// The public keys a follower accepts, by key id (several during a rotation).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct VerifyKeys {
    keys: HashMap<String, [u8; 32]>,
}

impl fmt::Debug for VerifyKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids: Vec<&String> = self.keys.keys().collect();
        ids.sort();
        f.debug_tuple("VerifyKeys").field(&ids).finish()
    }
}

/// What a verified message says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    pub key_id: String,
    pub epoch: i64,
    pub msg_id: String,
    pub prev: u64,
}

impl VerifyKeys {
    /// From `<id>:<hex>[,<id>:<hex>…]` (`PMW_BUS_VERIFY_KEYS`); empty text gives no keys.
    pub fn parse(text: &str) -> Result<VerifyKeys, BusError> {
        let mut keys = HashMap::new();
        for k in text.split(',').map(str::trim).filter(|k| !k.is_empty()) {
            let (id, public) = split_key(k, "verify key")?;
            if keys.insert(id.clone(), public).is_some() {
                return Err(BusError::Invalid(format!(
                    "verify key id {id:?} given twice"
                )));
            }
        }
        Ok(VerifyKeys { keys })
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// These keys and `key`'s public half (a leader always accepts its own signatures).
    pub fn with(mut self, key: &SigningKey) -> VerifyKeys {
        let mut public = [0u8; 32];
        public.copy_from_slice(key.pair.public_key().as_ref());
        self.keys.insert(key.id.clone(), public);
        self
    }

    /// Whether `sig` (hex) by `key_id` signs `body` bound to `bound`.
    pub fn check(
        &self,
        key_id: &str,
        sig: &str,
        bound: &Bound<'_>,
        body: &[u8],
    ) -> Result<(), Refusal> {
        let public = self.keys.get(key_id).ok_or(Refusal::UnknownKey)?;
        let sig = hex::decode(sig).map_err(|_| Refusal::Forged)?;
        UnparsedPublicKey::new(&ED25519, public)
            .verify(&payload(key_id, bound, body), &sig)
            .map_err(|_| Refusal::Forged)
    }

    /// Verify a stored message from its subject, headers and body.
    pub fn verify(
        &self,
        subject: &str,
        h: Option<&HeaderMap>,
        body: &[u8],
    ) -> Result<Signed, Refusal> {
        let get = |name: &str| h.and_then(|h| h.get(name)).map(|v| v.as_str().to_string());
        let (Some(key_id), Some(sig)) = (get(KEY_ID), get(SIG)) else {
            return Err(Refusal::Unsigned);
        };
        let msg_id = msg_id(h).ok_or(Refusal::Malformed)?.to_string();
        let prev = header_u64(h, PREV).map_err(|_| Refusal::Malformed)?;
        let epoch = get(EPOCH)
            .and_then(|e| e.parse::<i64>().ok())
            .ok_or(Refusal::Malformed)?;
        let bound = Bound {
            epoch,
            subject,
            msg_id: &msg_id,
            prev,
        };
        self.check(&key_id, &sig, &bound, body)?;
        Ok(Signed {
            key_id,
            epoch,
            msg_id,
            prev,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> (SigningKey, VerifyKeys) {
        let (secret, public) = generate("k1").unwrap();
        let key = SigningKey::parse(&secret).unwrap();
        (key, VerifyKeys::parse(&public).unwrap())
    }

    fn bound() -> Bound<'static> {
        Bound {
            epoch: 7,
            subject: "pmw.frames.all",
            msg_id: "000000000020-999999:0xabc:all:ledger",
            prev: 41,
        }
    }

    #[test]
    fn a_signature_verifies_and_each_bound_field_tampered_fails() {
        let (key, verify) = keys();
        let body = b"{\"rows\":[]}";
        let sig = key.sign(&bound(), body);
        assert_eq!(verify.check("k1", &sig, &bound(), body), Ok(()));
        let tampered = [
            Bound {
                epoch: 8,
                ..bound()
            },
            Bound {
                subject: "pmw.frames.other",
                ..bound()
            },
            Bound {
                msg_id: "000000000021-999999:0xabc:all:ledger",
                ..bound()
            },
            Bound {
                prev: 40,
                ..bound()
            },
        ];
        for b in tampered {
            assert_eq!(
                verify.check("k1", &sig, &b, body),
                Err(Refusal::Forged),
                "{b:?}"
            );
        }
        assert_eq!(
            verify.check("k1", &sig, &bound(), b"{\"rows\":[1]}"),
            Err(Refusal::Forged)
        );
        let mut flipped = hex::decode(&sig).unwrap();
        flipped[0] ^= 1;
        assert_eq!(
            verify.check("k1", &hex::encode(flipped), &bound(), body),
            Err(Refusal::Forged)
        );
        assert_eq!(
            verify.check("k2", &sig, &bound(), body),
            Err(Refusal::UnknownKey)
        );
    }

    #[test]
    fn another_key_under_the_same_id_is_forged() {
        let (_, verify) = keys();
        let (other, _) = generate("k1").unwrap();
        let other = SigningKey::parse(&other).unwrap();
        let sig = other.sign(&bound(), b"x");
        assert_eq!(
            verify.check("k1", &sig, &bound(), b"x"),
            Err(Refusal::Forged)
        );
    }

    #[test]
    fn fields_are_length_prefixed_so_boundaries_cannot_shift() {
        let a = Bound {
            subject: "ab",
            msg_id: "c",
            ..bound()
        };
        let b = Bound {
            subject: "a",
            msg_id: "bc",
            ..bound()
        };
        assert_ne!(payload("k", &a, b""), payload("k", &b, b""));
        assert_ne!(payload("k1", &bound(), b""), payload("k", &bound(), b"1"));
    }

    #[test]
    fn headers_verify_and_missing_ones_are_refused() {
        let (key, verify) = keys();
        let body = b"part";
        let sig = key.sign(&bound(), body);
        let mut h = HeaderMap::new();
        h.insert(async_nats::header::NATS_MESSAGE_ID, bound().msg_id);
        h.insert(EPOCH, "7");
        h.insert(PREV, "41");
        assert_eq!(
            verify.verify(bound().subject, Some(&h), body),
            Err(Refusal::Unsigned)
        );
        h.insert(KEY_ID, "k1");
        h.insert(SIG, sig.as_str());
        let signed = verify.verify(bound().subject, Some(&h), body).unwrap();
        assert_eq!((signed.epoch, signed.prev), (7, 41));
        assert_eq!(
            verify.verify("pmw.frames.x", Some(&h), body),
            Err(Refusal::Forged)
        );
        assert_eq!(
            verify.verify(bound().subject, None, body),
            Err(Refusal::Unsigned)
        );
        h.insert(EPOCH, "seven");
        assert_eq!(
            verify.verify(bound().subject, Some(&h), body),
            Err(Refusal::Malformed)
        );
    }

    #[test]
    fn keys_parse_redact_and_refuse_bad_text() {
        let (secret, public) = generate("push-2026").unwrap();
        let key = SigningKey::parse(&secret).unwrap();
        assert_eq!(key.public(), public);
        let shown = format!("{key:?}");
        assert!(!shown.contains(&secret[10..]), "{shown}");
        let both = VerifyKeys::parse(&format!("{public}, {}", generate("old").unwrap().1)).unwrap();
        assert_eq!(format!("{both:?}"), "VerifyKeys([\"old\", \"push-2026\"])");
        for bad in ["k1", "k1:zz", "k.1:00", &format!("k1:{}", "0".repeat(62))] {
            assert!(SigningKey::parse(bad).is_err(), "{bad}");
            assert!(VerifyKeys::parse(bad).is_err(), "{bad}");
        }
        assert!(VerifyKeys::parse(&format!("{public},{public}")).is_err());
        assert!(VerifyKeys::parse(" ").unwrap().is_empty());
    }
}

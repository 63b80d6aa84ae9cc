//! Standard Webhooks 1.0 signing: secrets `whsec_<base64 of 24..=64 bytes>`, and the headers
//! `webhook-id`, `webhook-timestamp` (unix seconds) and `webhook-signature`
//! (`v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, space-separated when several secrets
//! sign during a rotation overlap).

use std::fmt;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::RngCore;
use reqwest::header::HeaderName;
use sha2::Sha256;

/// Prefix of every secret's string form.
pub const SECRET_PREFIX: &str = "whsec_";
/// Shortest secret key, in bytes.
pub const MIN_SECRET_BYTES: usize = 24;
/// Longest secret key, in bytes.
pub const MAX_SECRET_BYTES: usize = 64;
/// Key length of generated secrets, in bytes.
pub const GENERATED_SECRET_BYTES: usize = 32;

/// Header names (lowercase, as the spec writes them).
pub const HEADER_ID: &str = "webhook-id";
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
pub const HEADER_SIGNATURE: &str = "webhook-signature";

/// Why a string is not a usable secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("webhook secret must start with \"whsec_\"")]
    Prefix,
    #[error("webhook secret is not valid base64 after \"whsec_\"")]
    Base64,
    #[error(
        "webhook secret key is {0} bytes; it must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes"
    )]
    Length(usize),
    #[error("stored webhook secret: {0}")]
    Sealed(#[from] crate::sealed::SealError),
}

/// A signing key. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    key: Vec<u8>,
}

impl Secret {
    /// A new random secret of [`GENERATED_SECRET_BYTES`] bytes from the OS-seeded CSPRNG.
    pub fn generate() -> Secret {
        let mut key = vec![0u8; GENERATED_SECRET_BYTES];
        rand::thread_rng().fill_bytes(&mut key);
        Secret { key }
    }

    /// Parse `whsec_<base64>` (standard alphabet, padding optional).
    pub fn parse(s: &str) -> Result<Secret, SecretError> {
        let b64 = s.strip_prefix(SECRET_PREFIX).ok_or(SecretError::Prefix)?;
        let trimmed = b64.trim_end_matches('=');
        let key = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(trimmed)
            .map_err(|_| SecretError::Base64)?;
        Secret::from_bytes(key)
    }

    /// A secret as stored in endpoint `endpoint`'s row of `webhook_endpoints` (sealed at rest
    /// and bound to that row: [`crate::sealed`]).
    pub fn from_stored(stored: &str, endpoint: i64) -> Result<Secret, SecretError> {
        Secret::parse(&crate::sealed::open(stored, endpoint)?)
    }

    /// A secret from raw key bytes (24..=64 of them).
    pub fn from_bytes(key: Vec<u8>) -> Result<Secret, SecretError> {
        if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
            return Err(SecretError::Length(key.len()));
        }
        Ok(Secret { key })
    }

    /// The `whsec_…` form (what is stored and shown to the user once).
    pub fn expose(&self) -> String {
        format!("{SECRET_PREFIX}{}", B64.encode(&self.key))
    }

    /// `v1,<base64 signature>` of `{id}.{timestamp}.{body}`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("hmac takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.key.len())
    }
}

/// What signs an endpoint's deliveries, parsed once from its stored columns: the current
/// secret and, during a rotation overlap, the previous one until it expires. A stored secret
/// that does not parse is kept as its error: every attempt with it is `invalid`, none is sent.
/// Its `Debug` shows no key (see [`Secret`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signing {
    current: Result<Secret, SecretError>,
    previous: Option<(Result<Secret, SecretError>, i64)>,
}

impl Signing {
    /// From endpoint `endpoint`'s stored `secret`, `previous_secret` and `previous_expires_ms`
    /// (a previous secret without an expiry never signs).
    pub fn parse(
        endpoint: i64,
        current: &str,
        previous: Option<&str>,
        previous_expires_ms: Option<i64>,
    ) -> Signing {
        Signing {
            current: Secret::from_stored(current, endpoint),
            previous: previous
                .zip(previous_expires_ms)
                .map(|(p, until)| (Secret::from_stored(p, endpoint), until)),
        }
    }

    /// The secrets that sign at `now_ms`: the current one, plus the previous one while its
    /// overlap lasts; or why the endpoint's stored secrets cannot sign.
    pub fn at(&self, now_ms: i64) -> Result<Vec<&Secret>, SigningError> {
        let current = self
            .current
            .as_ref()
            .map_err(|e| SigningError::Current(e.clone()))?;
        let mut out = vec![current];
        if let Some((previous, until)) = &self.previous {
            if *until > now_ms {
                out.push(
                    previous
                        .as_ref()
                        .map_err(|e| SigningError::Previous(e.clone()))?,
                );
            }
        }
        Ok(out)
    }
}

/// Why an endpoint's stored secrets cannot sign now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigningError {
    #[error("endpoint secret: {0}")]
    Current(SecretError),
    #[error("endpoint previous secret: {0}")]
    Previous(SecretError),
}

impl SigningError {
    /// What is wrong with the secret, whichever it is.
    pub fn cause(&self) -> &SecretError {
        match self {
            SigningError::Current(e) | SigningError::Previous(e) => e,
        }
    }
}

/// The three headers of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
}

impl SignedHeaders {
    /// `(name, value)` pairs in spec order.
    pub fn pairs(&self) -> [(HeaderName, &str); 3] {
        // Static names: a name parsed from a string is an allocation and a copy per attempt.
        [
            (HeaderName::from_static(HEADER_ID), self.id.as_str()),
            (
                HeaderName::from_static(HEADER_TIMESTAMP),
                self.timestamp.as_str(),
            ),
            (
                HeaderName::from_static(HEADER_SIGNATURE),
                self.signature.as_str(),
            ),
        ]
    }
}

/// Sign `body` with every secret in `secrets` (current first, then any still-valid previous
/// one); the signatures are joined with a space.
pub fn sign_headers(secrets: &[&Secret], id: &str, timestamp: i64, body: &[u8]) -> SignedHeaders {
    let signature = secrets
        .iter()
        .map(|s| s.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ");
    SignedHeaders {
        id: id.to_string(),
        timestamp: timestamp.to_string(),
        signature,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The published Standard Webhooks test vector.
    const KEY: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1_614_265_330;
    const BODY: &str = r#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn webhook_sign_published_vector() {
        let s = Secret::parse(KEY).unwrap();
        assert_eq!(s.sign(ID, TS, BODY.as_bytes()), SIG);
        let h = sign_headers(&[&s], ID, TS, BODY.as_bytes());
        assert_eq!(h.signature, SIG);
        assert_eq!(h.timestamp, "1614265330");
        assert_eq!(h.id, ID);
        // A changed byte anywhere changes the signature.
        assert_ne!(s.sign(ID, TS + 1, BODY.as_bytes()), SIG);
        assert_ne!(s.sign(ID, TS, br#"{"test": 2432232315}"#), SIG);
    }

    #[test]
    fn webhook_sign_several_secrets_are_space_separated() {
        let old = Secret::parse(KEY).unwrap();
        let new = Secret::generate();
        let h = sign_headers(&[&new, &old], ID, TS, BODY.as_bytes());
        let parts: Vec<&str> = h.signature.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1], SIG);
        assert_eq!(parts[0], new.sign(ID, TS, BODY.as_bytes()));
    }

    #[test]
    fn webhook_secret_generate_round_trips() {
        let s = Secret::generate();
        let text = s.expose();
        assert!(text.starts_with("whsec_"));
        assert_eq!(Secret::parse(&text).unwrap(), s);
        assert_ne!(Secret::generate(), s);
        assert!(!format!("{s:?}").contains(&text[6..]));
    }

    #[test]
    fn webhook_signing_uses_the_previous_secret_until_it_expires() {
        let current = Secret::generate();
        let previous = Secret::parse(KEY).unwrap();
        let s = Signing::parse(1, &current.expose(), Some(KEY), Some(1_000));
        assert_eq!(s.at(999).unwrap(), vec![&current, &previous]);
        assert_eq!(s.at(1_000).unwrap(), vec![&current]);
        // No expiry: the previous secret never signs.
        let s = Signing::parse(1, &current.expose(), Some(KEY), None);
        assert_eq!(s.at(0).unwrap(), vec![&current]);
        // A broken current secret fails every attempt; a broken previous one only during
        // its overlap.
        let e = Signing::parse(1, "nope", None, None).at(0).unwrap_err();
        assert_eq!(e, SigningError::Current(SecretError::Prefix));
        assert_eq!(e.cause(), &SecretError::Prefix);
        assert_eq!(
            e.to_string(),
            "endpoint secret: webhook secret must start with \"whsec_\""
        );
        let s = Signing::parse(1, &current.expose(), Some("whsec_not*base64!"), Some(1_000));
        let e = s.at(999).unwrap_err();
        assert_eq!(e, SigningError::Previous(SecretError::Base64));
        assert!(
            e.to_string().starts_with("endpoint previous secret: "),
            "{e}"
        );
        assert_eq!(s.at(1_000).unwrap(), vec![&current]);
        // Its Debug names no key material.
        let shown = format!("{:?}", Signing::parse(1, KEY, Some(KEY), Some(1)));
        assert!(!shown.contains(&KEY[6..]), "{shown}");
        assert!(!shown.contains("MfKQ"), "{shown}");
    }

    #[test]
    fn webhook_secret_parse_errors() {
        assert_eq!(
            Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            Err(SecretError::Prefix)
        );
        assert_eq!(Secret::parse("whsec_not*base64!"), Err(SecretError::Base64));
        // 18 bytes: too short. 65 bytes: too long.
        assert_eq!(
            Secret::parse(&format!("whsec_{}", B64.encode([1u8; 18]))),
            Err(SecretError::Length(18))
        );
        assert_eq!(
            Secret::parse(&format!("whsec_{}", B64.encode([1u8; 65]))),
            Err(SecretError::Length(65))
        );
        assert!(Secret::parse(&format!("whsec_{}", B64.encode([1u8; 24]))).is_ok());
        assert!(Secret::parse(&format!("whsec_{}", B64.encode([1u8; 64]))).is_ok());
        // Unpadded base64 is accepted (the reference libraries accept it too).
        let unpadded = format!("whsec_{}", B64.encode([7u8; 25]).trim_end_matches('='));
        assert!(Secret::parse(&unpadded).is_ok());
        assert!(SecretError::Length(3).to_string().contains("24 to 64"));
    }
}

//! API keys and WebSocket tickets: random secrets shown once, stored only as SHA-256, looked up by
//! hash. Shared by the API (which issues keys and checks them on every request) and push (which
//! authenticates WebSocket clients): the API-key rule is [`key_holder`], here only.

use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::pg::PgPool;
use crate::UnixMs;

/// Prefix of every API key.
pub const KEY_PREFIX: &str = "pmw_";
/// Prefix of every WebSocket ticket.
pub const TICKET_PREFIX: &str = "pmwt_";

/// SHA-256 of a presented secret (key or ticket), the only form stored.
pub fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A new random secret `<prefix><64 hex chars>` and its display prefix (first 12 characters).
pub fn generate(prefix: &str) -> (String, String) {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    let secret = format!("{prefix}{}", hex::encode(bytes));
    let display = secret[..prefix.len() + 8].to_string();
    (secret, display)
}

/// Who a presented credential belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Principal {
    pub account_id: i64,
    /// The API key presented, or the key that issued the ticket: revoking it ends the session.
    pub key_id: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("missing credentials")]
    Missing,
    #[error("invalid or revoked credentials")]
    Invalid,
    #[error("postgres: {0}")]
    Store(#[from] crate::pg::PgError),
}

impl From<tokio_postgres::Error> for AuthError {
    fn from(e: tokio_postgres::Error) -> Self {
        AuthError::Store(e.into())
    }
}

impl From<deadpool_postgres::PoolError> for AuthError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        AuthError::Store(e.into())
    }
}

/// Whether `secret` can be a credential of this kind at all: its prefix and 64 lowercase hex
/// characters, the shape [`generate`] makes. Anything else is refused without a lookup.
pub fn plausible(secret: &str, prefix: &str) -> bool {
    secret.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() == 64 && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The holder of an API key: its account, the key, and what the API shows and limits by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHolder {
    pub principal: Principal,
    /// The key's display prefix (first 12 characters).
    pub key_prefix: String,
    /// The account's plan name as stored.
    pub plan: String,
}

/// The API-key rule: a key (`pmw_…`) is valid while it is not revoked and its account is not
/// disabled; it is looked up by its SHA-256 only.
pub async fn key_holder(pool: &PgPool, key: &str) -> Result<KeyHolder, AuthError> {
    if !plausible(key, KEY_PREFIX) {
        return Err(AuthError::Invalid);
    }
    let client = pool.get().await?;
    let row = client
        .query_opt(
            include_str!("sql/account_for_key.sql"),
            &[&hash_secret(key).as_slice()],
        )
        .await?;
    row.map(|r| KeyHolder {
        principal: Principal {
            account_id: r.get(0),
            key_id: r.get(1),
        },
        key_prefix: r.get(2),
        plan: r.get(3),
    })
    .ok_or(AuthError::Invalid)
}

/// Resolve an API key (`pmw_…`) to its account ([`key_holder`]'s rule).
pub async fn account_for_key(pool: &PgPool, key: &str) -> Result<Principal, AuthError> {
    Ok(key_holder(pool, key).await?.principal)
}

/// Redeem a WebSocket ticket (`pmwt_…`): valid once, before it expires.
pub async fn redeem_ticket(pool: &PgPool, ticket: &str) -> Result<Principal, AuthError> {
    if !plausible(ticket, TICKET_PREFIX) {
        return Err(AuthError::Invalid);
    }
    let client = pool.get().await?;
    let row = client
        .query_opt(
            include_str!("sql/redeem_ticket.sql"),
            &[&hash_secret(ticket).as_slice(), &UnixMs::now().0],
        )
        .await?;
    row.map(|r| Principal {
        account_id: r.get(0),
        key_id: r.get(1),
    })
    .ok_or(AuthError::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_random_prefixed_and_hash_stably() {
        let (a, pa) = generate(KEY_PREFIX);
        let (b, _) = generate(KEY_PREFIX);
        assert_ne!(a, b);
        assert!(a.starts_with("pmw_") && a.len() == 4 + 64, "{a}");
        assert_eq!(pa, a[..12]);
        assert_eq!(hash_secret(&a), hash_secret(&a));
        assert_ne!(hash_secret(&a), hash_secret(&b));
        assert!(plausible(&a, KEY_PREFIX) && !plausible(&a, TICKET_PREFIX));
        assert!(plausible(&format!("pmw_{}", "0".repeat(64)), KEY_PREFIX));
        for malformed in [
            format!("pmw_{}", "0".repeat(63)),
            format!("pmw_{}", "0".repeat(65)),
            format!("pmw_{}", "A".repeat(64)),
            format!("pmw_{}", "g".repeat(64)),
            "pmw_notakey".into(),
            format!("pmwt_{}", "0".repeat(64)),
        ] {
            assert!(!plausible(&malformed, KEY_PREFIX), "{malformed}");
        }
        assert!(plausible(
            &format!("pmwt_{}", "f".repeat(64)),
            TICKET_PREFIX
        ));
        // SHA-256("abc"), FIPS 180-2 test vector.
        assert_eq!(
            hex::encode(hash_secret("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

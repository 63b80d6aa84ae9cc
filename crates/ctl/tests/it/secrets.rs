//! `pmwctl secrets reseal` upgrades secrets sealed in the first format (`pmwsealed:v1`, bound to
//! no endpoint) to v2, bound to their endpoint (issue 42 item 5): afterwards each opens in its own
//! row only; a v1 value opened anywhere.

use std::path::Path;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::XChaCha20Poly1305;
use pmw_core::sealed::{Keyring, PREFIX_V1};
use pmw_testkit::{run_bin, seed, TestDb};

const BIN: &str = env!("CARGO_BIN_EXE_pmwctl");

/// `plain` sealed as the first format did: the key id alone in the associated data.
fn seal_v1(spec: &str, plain: &str) -> String {
    let (id, b64) = spec.split(',').next().unwrap().split_once(':').unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reseal_binds_first_format_secrets_to_their_endpoint() {
    let db = TestDb::new().await;
    let mut env = db.env();
    env.retain(|(k, _)| k != pmw_core::sealed::ENV);
    let spec = Keyring::generate_entry("k1");
    env.push((pmw_core::sealed::ENV.into(), spec.clone()));
    let keys = Keyring::parse(&spec).unwrap();
    let c = db.connect().await;
    let account = seed::account(&c, "sealed", "free").await;
    let mut ids = Vec::new();
    for plain in ["whsec_one", "whsec_two"] {
        let v1 = seal_v1(&spec, plain);
        ids.push(
            seed::Endpoint::new(account, "https://example.com/h", &v1)
                .insert(&c)
                .await,
        );
    }

    let (code, out, err) = run_bin(
        Path::new(BIN),
        &env,
        &["secrets", "reseal"],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("sealed 2 of 2"), "{err}");
    for (id, plain) in ids.iter().zip(["whsec_one", "whsec_two"]) {
        let stored: String = c
            .query_one("SELECT secret FROM webhook_endpoints WHERE id = $1", &[id])
            .await
            .unwrap()
            .get(0);
        assert!(stored.starts_with("pmwsealed:v2:k1:"), "{stored}");
        assert!(keys.is_current(&stored));
        assert_eq!(keys.open(&stored, *id).unwrap(), plain);
        let elsewhere = if *id == ids[0] { ids[1] } else { ids[0] };
        assert!(
            keys.open(&stored, elsewhere).is_err(),
            "opens in another row"
        );
    }
    // Nothing left to upgrade.
    let (code, _, err) = run_bin(
        Path::new(BIN),
        &env,
        &["secrets", "reseal"],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, 0);
    assert!(err.contains("sealed 0 of 2"), "{err}");
}

/// pmwctl runs in production without keys (the service check is not its): it makes the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_key_runs_in_production_without_keys() {
    let db = TestDb::new().await;
    let mut env = db.env();
    env.retain(|(k, _)| k != pmw_core::sealed::ENV);
    env.push((pmw_core::sealed::ENV.into(), String::new()));
    env.push(("PMW_ENV".into(), "production".into()));
    let args = ["secrets", "generate-key", "--id", "first"];
    let (code, out, err) = run_bin(Path::new(BIN), &env, &args, Duration::from_secs(60)).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(Keyring::parse(out.trim()).is_ok(), "{out}");
}

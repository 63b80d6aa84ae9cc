//! `pmwctl account` and `pmwctl key` on the real stack: create, list, key printed once and
//! stored hashed, the key authenticates until it is revoked; bad arguments and broken settings
//! exit with the documented codes.

use std::path::Path;
use std::time::Duration;

use pmw_testkit::{run_bin, TestDb};

const BIN: &str = env!("CARGO_BIN_EXE_pmwctl");

async fn ctl(db: &TestDb, extra_env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let mut env = db.env();
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    run_bin(Path::new(BIN), &env, args, Duration::from_secs(60)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_and_key_round_trip() {
    let db = TestDb::new().await;
    let (code, out, err) = ctl(
        &db,
        &[],
        &[
            "account",
            "create",
            "--name",
            "Acme",
            "--email",
            "ops@acme.test",
            "--plan",
            "pro",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let id: i64 = out
        .trim()
        .strip_prefix("created account ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output: {out}"));
    // The default plan when none is given.
    let (code, out, _) = ctl(&db, &[], &["account", "create", "--name", "Solo"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("plan free"), "{out}");

    let (code, out, _) = ctl(&db, &[], &["account", "list"]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("Acme") && out.contains("ops@acme.test") && out.contains("pro"),
        "{out}"
    );
    let (code, out, _) = ctl(&db, &[], &["account", "list", "--json"]).await;
    assert_eq!(code, 0);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert_eq!(list[0]["id"], id);

    // A key: printed once on stdout, alone; stored only as its hash.
    let (code, out, err) = ctl(
        &db,
        &[],
        &[
            "key",
            "create",
            "--account",
            &id.to_string(),
            "--label",
            "ci",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let key = out.trim().to_string();
    assert!(key.starts_with("pmw_") && key.len() == 68, "{out}");
    assert!(
        err.contains("shown once") && err.contains(&key[..12]),
        "{err}"
    );
    let c = db.connect().await;
    let row = c
        .query_one(
            "SELECT prefix, key_hash, label FROM api_keys WHERE account_id = $1",
            &[&id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), &key[..12]);
    assert_eq!(row.get::<_, Vec<u8>>(1), pmw_core::auth::hash_secret(&key));
    assert_eq!(row.get::<_, String>(2), "ci");
    let who = pmw_core::auth::account_for_key(&db.pg, &key)
        .await
        .expect("the key authenticates");
    assert_eq!(who.account_id, id);
    let (_, list_out, _) = ctl(&db, &[], &["account", "list"]).await;
    assert!(
        !list_out.contains(&key[12..]),
        "the key is never shown again"
    );

    // Revoke by prefix: it stops authenticating; revoking again is an error.
    let (code, out, _) = ctl(&db, &[], &["key", "revoke", "--prefix", &key[..12]]).await;
    assert_eq!(code, 0);
    assert!(out.contains(&format!("of account {id}")), "{out}");
    assert!(pmw_core::auth::account_for_key(&db.pg, &key).await.is_err());
    let (code, _, err) = ctl(&db, &[], &["key", "revoke", "--prefix", &key[..12]]).await;
    assert_eq!(code, 1);
    assert!(err.contains("no active key"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_and_broken_settings_exit_with_clear_errors() {
    let db = TestDb::new().await;
    let (code, _, err) = ctl(
        &db,
        &[],
        &["account", "create", "--name", "X", "--plan", "platinum"],
    )
    .await;
    assert_eq!(code, 1);
    assert!(
        err.contains("unknown plan \"platinum\"") && err.contains("free"),
        "{err}"
    );
    let (code, _, err) = ctl(&db, &[], &["key", "create", "--account", "999"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("no such account: 999"), "{err}");
    // Broken API settings: account creation needs the plans, so it is a configuration error.
    let (code, _, err) = ctl(
        &db,
        &[("PMW_API_PLANS", "{\"x\":1}")],
        &["account", "create", "--name", "X"],
    )
    .await;
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("API settings"), "{err}");
    // ... but listing and keys do not read them.
    let (code, _, _) = ctl(&db, &[("PMW_API_PLANS", "{\"x\":1}")], &["account", "list"]).await;
    assert_eq!(code, 0);
    // Postgres unreachable: transient.
    let (code, _, err) = ctl(
        &db,
        &[("PMW_POSTGRES_URL", "postgres://pmw@127.0.0.1:1/none")],
        &["account", "list"],
    )
    .await;
    assert_eq!(code, 75, "{err}");
    let (code, _, err) = ctl(
        &db,
        &[("PMW_POSTGRES_URL", "postgres://pmw@127.0.0.1:1/none")],
        &["status"],
    )
    .await;
    assert_eq!(code, 75, "{err}");
    // No account was created by any of this.
    let c = db.connect().await;
    let n: i64 = c
        .query_one("SELECT count(*) FROM accounts", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}

//! `pmwctl secrets`: the operator keys that seal webhook signing secrets at rest
//! (`pmw_core::sealed`, `PMW_SECRET_KEYS`). `generate-key` prints a new key entry; `reseal` seals
//! every stored secret with the first key in the current format, bound to its endpoint (after a
//! rotation, for secrets stored before keys were configured, or sealed in the first format,
//! `pmwsealed:v1`, which named no endpoint), in one transaction.

use clap::Subcommand;
use pmw_core::config::CoreConfig;
use pmw_core::exit::ServiceError;
use pmw_core::sealed::{self, Keyring};

use crate::conn::connect;

#[derive(Debug, Subcommand)]
pub enum SecretsCmd {
    /// Print a new key entry (`id:base64`) to put first in PMW_SECRET_KEYS.
    GenerateKey {
        /// The key's id (1 to 32 letters, digits, - or _), e.g. the date.
        #[arg(long)]
        id: String,
    },
    /// Seal every stored webhook secret with the first key of PMW_SECRET_KEYS.
    Reseal,
}

pub async fn run(cfg: &CoreConfig, cmd: SecretsCmd) -> Result<(), ServiceError> {
    match cmd {
        SecretsCmd::GenerateKey { id } => {
            let entry = Keyring::generate_entry(&id);
            Keyring::parse(&entry).map_err(|e| ServiceError::Config(e.to_string()))?;
            println!("{entry}");
            Ok(())
        }
        SecretsCmd::Reseal => reseal(cfg).await,
    }
}

/// Seal again every secret not sealed with the current key.
async fn reseal(cfg: &CoreConfig) -> Result<(), ServiceError> {
    let keys = sealed::keyring().ok_or_else(|| {
        ServiceError::Config(format!("{} is not set: nothing to seal with", sealed::ENV))
    })?;
    let mut c = connect(cfg).await?;
    let db = |e: tokio_postgres::Error| ServiceError::transient(format!("postgres: {e}"));
    let tx = c.transaction().await.map_err(db)?;
    let rows = tx
        .query(include_str!("sql/endpoint_secrets_all.sql"), &[])
        .await
        .map_err(db)?;
    let mut resealed = 0;
    for r in &rows {
        let (id, current, previous): (i64, String, Option<String>) = (r.get(0), r.get(1), r.get(2));
        let stale = |s: &str| !keys.is_current(s);
        if !stale(&current) && !previous.as_deref().is_some_and(stale) {
            continue;
        }
        let again = |s: &str| -> Result<String, ServiceError> {
            let plain = keys
                .open(s, id)
                .map_err(|e| ServiceError::Config(format!("endpoint {id}: {e}")))?;
            Ok(keys.seal(&plain, id))
        };
        let previous = previous.as_deref().map(again).transpose()?;
        tx.execute(
            include_str!("sql/endpoint_secrets_reseal.sql"),
            &[&id, &again(&current)?, &previous],
        )
        .await
        .map_err(db)?;
        resealed += 1;
    }
    tx.commit().await.map_err(db)?;
    eprintln!(
        "sealed {resealed} of {} endpoints' secrets with key {:?}",
        rows.len(),
        keys.current_id()
    );
    Ok(())
}

//! `pmwctl key create|revoke`: API keys for an account. The key is printed once (stdout, alone
//! on its line); only its SHA-256 is stored; keys are shown and revoked by their prefix.

use clap::Subcommand;
use pmw_core::config::CoreConfig;
use pmw_core::exit::ServiceError;
use pmw_core::pg::accounts;

use crate::account::account_error;
use crate::conn::connect;

#[derive(Debug, Subcommand)]
pub enum KeyCmd {
    /// Create a key for an account and print it (once).
    Create {
        #[arg(long)]
        account: i64,
        #[arg(long, default_value = "")]
        label: String,
    },
    /// Revoke the active key with this prefix (`pmw_` + 8 hex digits).
    Revoke {
        #[arg(long)]
        prefix: String,
    },
}

pub async fn run(cfg: &CoreConfig, cmd: KeyCmd) -> Result<(), ServiceError> {
    let mut c = connect(cfg).await?;
    match cmd {
        KeyCmd::Create { account, label } => {
            let k = accounts::create_key(&mut c, account, &label)
                .await
                .map_err(account_error)?;
            println!("{}", k.key);
            eprintln!(
                "key {} for account {} (label {:?}): shown once, store it now",
                k.prefix, k.account_id, k.label
            );
        }
        KeyCmd::Revoke { prefix } => {
            let account = accounts::revoke_key(&c, &prefix, None)
                .await
                .map_err(account_error)?;
            println!("revoked key {prefix} of account {account}");
        }
    }
    Ok(())
}

//! `pmwctl account create|list`: accounts in Postgres, through the same code as the API. The
//! plan must be one of the API's plans (`PMW_API_PLANS`); a broken API setting is exit 78.

use clap::Subcommand;
use pmw_core::config::CoreConfig;
use pmw_core::exit::ServiceError;
use pmw_core::pg::accounts::{self, AccountError};
use pmw_core::plans::Plans;
use pmw_core::UnixMs;

use crate::conn::{connect, db_error};

#[derive(Debug, Subcommand)]
pub enum AccountCmd {
    /// Create an account and print its id.
    Create {
        #[arg(long)]
        name: String,
        #[arg(long)]
        email: Option<String>,
        /// One of the API's plans; default `PMW_API_DEFAULT_PLAN`.
        #[arg(long)]
        plan: Option<String>,
    },
    /// List every account with its plan and usage.
    List {
        #[arg(long)]
        json: bool,
    },
}

/// Map account errors to exit codes: store trouble 75, bad arguments 1.
pub fn account_error(e: AccountError) -> ServiceError {
    match e {
        AccountError::Db(e) => db_error(e),
        other => ServiceError::Bug(anyhow::anyhow!("{other}")),
    }
}

pub async fn run(cfg: &CoreConfig, cmd: AccountCmd) -> Result<(), ServiceError> {
    match cmd {
        AccountCmd::Create { name, email, plan } => {
            let api =
                Plans::load().map_err(|e| ServiceError::Config(format!("API settings: {e}")))?;
            let plan = plan.unwrap_or_else(|| api.api_default_plan.clone());
            if !api.api_plans.contains_key(&plan) {
                return Err(ServiceError::Bug(anyhow::anyhow!(
                    "unknown plan {plan:?}; the plans are {:?} (PMW_API_PLANS)",
                    api.api_plans.keys().collect::<Vec<_>>()
                )));
            }
            let c = connect(cfg).await?;
            let a = accounts::create_account(&c, &name, email.as_deref(), &plan)
                .await
                .map_err(account_error)?;
            println!(
                "created account {} (name {:?}, plan {})",
                a.id, a.name, a.plan
            );
            Ok(())
        }
        AccountCmd::List { json } => list(cfg, json).await,
    }
}

async fn list(cfg: &CoreConfig, json: bool) -> Result<(), ServiceError> {
    let c = connect(cfg).await?;
    let all = accounts::list_accounts(&c).await.map_err(account_error)?;
    let usage = c
        .query(include_str!("sql/list_accounts.sql"), &[])
        .await
        .map_err(db_error)?;
    let counts = |id: i64| {
        usage
            .iter()
            .find(|r| r.get::<_, i64>(0) == id)
            .map_or((0, 0, 0, 0), |r| {
                let n = |i| r.get::<_, i64>(i);
                (n(1), n(2), n(3), n(4))
            })
    };
    if json {
        let rows: Vec<serde_json::Value> = all
            .iter()
            .map(|a| {
                let (k, w, e, m) = counts(a.id);
                serde_json::json!({
                    "id": a.id, "name": a.name, "email": a.email, "plan": a.plan,
                    "created_ms": a.created_ms, "disabled_ms": a.disabled_ms,
                    "active_keys": k, "wallets": w, "webhook_endpoints": e, "markets": m,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
        return Ok(());
    }
    println!(
        "{:>6}  {:<24} {:<28} {:<8} {:>4} {:>7} {:>7} {:>8}  created",
        "id", "name", "email", "plan", "keys", "wallets", "markets", "webhooks"
    );
    for a in &all {
        let (k, w, e, m) = counts(a.id);
        let name = if a.disabled_ms.is_some() {
            format!("{} (disabled)", a.name)
        } else {
            a.name.clone()
        };
        println!(
            "{:>6}  {:<24} {:<28} {:<8} {:>4} {:>7} {:>7} {:>8}  {}",
            a.id,
            name,
            a.email.as_deref().unwrap_or("-"),
            a.plan,
            k,
            w,
            m,
            e,
            UnixMs(a.created_ms).to_rfc3339()
        );
    }
    Ok(())
}

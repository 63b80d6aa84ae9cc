//! pmwctl: the operator's tool. Each subcommand lives in its own module.

mod migrate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use pmw_core::config::{self, CoreConfig};
use pmw_core::exit::{self, ServiceError};

/// pmw operator tool. Reads the same configuration as the services (`PMW_*`, `PMW_CONFIG`).
#[derive(Debug, Parser)]
#[command(name = "pmwctl", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply pending Postgres and ClickHouse migrations (creates the ClickHouse database).
    Migrate,
    /// Show applied and known schema versions; exits 78 when they differ.
    Schema,
}

/// Run the CLI and map the outcome to an exit code (0, 75 transient, 78 config/schema, 1 other).
pub fn main(cli: Cli) -> ExitCode {
    let cfg = match config::load::<CoreConfig>() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pmwctl: {e}");
            return ExitCode::from(exit::CONFIG);
        }
    };
    pmw_core::telemetry::init(cfg.log_format, &cfg.log_filter);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pmwctl: cannot start runtime: {e}");
            return ExitCode::from(exit::BUG);
        }
    };
    match rt.block_on(run(cli, cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmwctl: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

async fn run(cli: Cli, cfg: CoreConfig) -> Result<(), ServiceError> {
    match cli.command {
        Command::Migrate => migrate::migrate(&cfg).await,
        Command::Schema => migrate::schema(&cfg).await,
    }
}

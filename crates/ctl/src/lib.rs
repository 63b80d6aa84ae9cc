//! pmwctl: the operator's tool. Each subcommand lives in its own module.

mod account;
mod bus;
mod conn;
mod decode_log;
mod diag;
mod key;
mod migrate;
mod secrets;
mod status;
mod status_audit;
mod status_emitters;
mod status_indexes;
mod status_ledger;
mod status_pairs;
mod status_providers;
mod status_text;
mod watch;

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
    /// Decode one `eth_getLogs` log object (JSON on stdin) into the trade pmw would push.
    DecodeLog,
    /// Accounts: create, list.
    Account {
        #[command(subcommand)]
        cmd: account::AccountCmd,
    },
    /// API keys: create (printed once), revoke by prefix.
    Key {
        #[command(subcommand)]
        cmd: key::KeyCmd,
    },
    /// Operator keys of webhook secrets at rest: generate-key, reseal.
    Secrets {
        #[command(subcommand)]
        cmd: secrets::SecretsCmd,
    },
    /// Edge mode's broker: keygen (a frame signing key pair).
    Bus {
        #[command(subcommand)]
        cmd: bus::BusCmd,
    },
    /// Push leader and epoch, ingest and push cursors with their lag, last round, webhook backlog.
    Status(status::StatusArgs),
    /// The latency runbook: push read interval, LISTEN or polling, xmin holders, hot tables.
    Diag(diag::DiagArgs),
    /// A reference WebSocket client: prints trades, keeps its cursor, resumes after disconnects.
    Watch(watch::WatchArgs),
}

/// Run the CLI and map the outcome to an exit code (0, 75 transient, 78 config/schema, 1 other).
pub fn main(cli: Cli) -> ExitCode {
    let cli = match cli.command {
        Command::DecodeLog => return decode_log_stdin(),
        Command::Bus { cmd } => {
            return match bus::run(cmd) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("pmwctl: {e}");
                    ExitCode::from(e.exit_code())
                }
            }
        }
        command => Cli { command },
    };
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
        Command::DecodeLog | Command::Bus { .. } => unreachable!("handled before loading config"),
        Command::Account { cmd } => account::run(&cfg, cmd).await,
        Command::Key { cmd } => key::run(&cfg, cmd).await,
        Command::Secrets { cmd } => secrets::run(&cfg, cmd).await,
        Command::Status(args) => status::run(&cfg, args).await,
        Command::Diag(args) => diag::run(&cfg, args).await,
        Command::Watch(args) => watch::run(args, watch::on_signals()).await,
    }
}

/// No configuration needed: pure decoding. Exit 0 with JSON, or 1 with the reason on stderr.
fn decode_log_stdin() -> ExitCode {
    let mut input = String::new();
    if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut input) {
        eprintln!("pmwctl decode-log: cannot read stdin: {e}");
        return ExitCode::from(exit::BUG);
    }
    match decode_log::decode_text(&input) {
        Ok(v) => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pmwctl decode-log: {e}");
            ExitCode::from(exit::BUG)
        }
    }
}

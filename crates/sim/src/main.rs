//! `pmw-sim`: command line for the trade simulator (see the library docs). Subcommands:
//! `run` (install emitters, optionally serve markets, emit matches), `install`, `markets`
//! (metadata server only), `reorg`, `unlisted` (a look-alike emitter at an address that is not
//! an exchange), `config` (print the effective world as JSON).
//! Exit codes: 0 done, 78 bad configuration, 1 anything else.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use pmw_core::Address;
use pmw_sim::{markets, CancellationToken, ReorgPlan, RunConfig, Sim, SimConfig, Version};

#[derive(Parser, Debug)]
#[command(
    name = "pmw-sim",
    about = "Emit Polymarket exchange events on a local anvil chain"
)]
struct Cli {
    /// anvil JSON-RPC over HTTP.
    #[arg(
        long,
        env = "PMW_RPC_HTTP_URL",
        default_value = "http://127.0.0.1:58545",
        global = true
    )]
    rpc_url: String,
    /// Log filter (tracing EnvFilter syntax).
    #[arg(long, env = "RUST_LOG", default_value = "info", global = true)]
    log: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Install the emitters and emit matches until the count/duration is reached or Ctrl-C.
    Run(RunArgs),
    /// Install the emitter code at the four exchange addresses and exit.
    Install,
    /// Serve the markets' metadata (Gamma `/markets` shape) until Ctrl-C.
    Markets {
        #[command(flatten)]
        world: WorldArgs,
        /// Listen address.
        #[arg(long, default_value = "127.0.0.1:58700")]
        addr: SocketAddr,
    },
    /// Replace the last DEPTH blocks with new ones (anvil_reorg), one fresh match in each.
    Reorg {
        #[command(flatten)]
        world: WorldArgs,
        #[arg(long)]
        depth: u64,
        /// Fresh matches in each new block.
        #[arg(long, default_value_t = 1)]
        matches_per_block: u32,
    },
    /// Install the emitter at an address that is not an exchange (an unlisted emitter) and
    /// send it look-alike matches (real `OrderFilled`/`OrdersMatched` logs that pmw must record
    /// and never deliver); prints each match as JSON.
    Unlisted {
        #[command(flatten)]
        world: WorldArgs,
        /// Where the emitter goes.
        #[arg(long, default_value_t = pmw_sim::unlisted::DEFAULT_ADDRESS)]
        address: Address,
        /// The ABI it emits: 1 or 2.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
        abi: u8,
        /// Matches to send.
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Print the effective world configuration as JSON (a starting point for --config).
    Config {
        #[command(flatten)]
        world: WorldArgs,
    },
}

#[derive(Args, Debug)]
struct WorldArgs {
    /// World configuration file (JSON of SimConfig; missing fields take defaults).
    #[arg(long)]
    config: Option<PathBuf>,
    /// RNG seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Wallet addresses, comma-separated.
    #[arg(long, value_delimiter = ',')]
    wallets: Option<Vec<Address>>,
    /// Use this many deterministic demo wallets.
    #[arg(long, conflicts_with = "wallets")]
    demo_wallets: Option<usize>,
    /// Markets file: JSON array of markets (question, condition_id, slug, outcomes, token_ids
    /// as decimal strings, neg_risk, closed).
    #[arg(long)]
    markets_file: Option<PathBuf>,
    /// Share of matches on the V2 exchanges, 0..=1.
    #[arg(long)]
    v2_share: Option<f64>,
    /// Maker orders per match are drawn from 1..=N.
    #[arg(long)]
    max_makers: Option<usize>,
    /// Share of complementary matches (the rest are mint/merge), 0..=1.
    #[arg(long)]
    complementary_share: Option<f64>,
    /// Largest maker fill, in whole shares.
    #[arg(long)]
    max_order_shares: Option<u64>,
    /// Largest taker fee, in basis points.
    #[arg(long)]
    max_fee_bps: Option<u32>,
    /// Sending account (an unlocked anvil account; default the last one).
    #[arg(long)]
    sender: Option<Address>,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    world: WorldArgs,
    /// Matches sent together (they land in one block).
    #[arg(long, default_value_t = 2)]
    matches_per_block: u32,
    /// Pause between batches, in milliseconds (on an interval-mining chain the block time
    /// already paces batches).
    #[arg(long, default_value_t = 0)]
    interval_ms: u64,
    /// Stop after this many matches.
    #[arg(long)]
    count: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long)]
    duration_secs: Option<f64>,
    /// Append every emitted fill to this file as JSON lines.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Also serve the markets' metadata here (Gamma `/markets` shape).
    #[arg(long)]
    markets_addr: Option<SocketAddr>,
    /// Do not (re)install the emitter code first.
    #[arg(long)]
    no_install: bool,
}

impl WorldArgs {
    fn build(&self) -> anyhow::Result<SimConfig> {
        let mut c = match &self.config {
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?;
                serde_json::from_str(&text).with_context(|| format!("parse {}", p.display()))?
            }
            None => SimConfig::default(),
        };
        if let Some(p) = &self.markets_file {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?;
            c.markets =
                serde_json::from_str(&text).with_context(|| format!("parse {}", p.display()))?;
        }
        if let Some(w) = &self.wallets {
            c.wallets = w.clone();
        }
        if let Some(n) = self.demo_wallets {
            c.wallets = pmw_sim::demo_wallets(n);
        }
        c.seed = self.seed.unwrap_or(c.seed);
        c.v2_share = self.v2_share.unwrap_or(c.v2_share);
        c.max_makers = self.max_makers.unwrap_or(c.max_makers);
        c.complementary_share = self.complementary_share.unwrap_or(c.complementary_share);
        c.max_order_shares = self.max_order_shares.unwrap_or(c.max_order_shares);
        c.max_fee_bps = self.max_fee_bps.unwrap_or(c.max_fee_bps);
        c.sender = self.sender.or(c.sender);
        c.validate()?;
        Ok(c)
    }
}

/// A configuration problem (exit 78).
#[derive(Debug, thiserror::Error)]
#[error("{0:#}")]
struct ConfigError(anyhow::Error);

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmw-sim: {e:#}");
            if e.is::<ConfigError>() {
                ExitCode::from(78)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let world = |w: &WorldArgs| w.build().map_err(|e| anyhow::Error::new(ConfigError(e)));
    match cli.cmd {
        Cmd::Config { world: w } => {
            println!("{}", serde_json::to_string_pretty(&world(&w)?)?);
        }
        Cmd::Install => {
            Sim::connect(&cli.rpc_url).await?.install_emitters().await?;
        }
        Cmd::Markets { world: w, addr } => {
            let (bound, _task) = markets::serve(addr, world(&w)?.markets).await?;
            println!(
                "{}",
                serde_json::json!({ "markets_addr": bound.to_string() })
            );
            shutdown_signal().await;
        }
        Cmd::Reorg {
            world: w,
            depth,
            matches_per_block,
        } => {
            let sim = Sim::connect_with(&cli.rpc_url, world(&w)?).await?;
            let plan = ReorgPlan {
                depth,
                new_matches_per_block: matches_per_block,
                ..ReorgPlan::new(depth)
            };
            let out = sim.reorg_with(plan).await?;
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        Cmd::Unlisted {
            world: w,
            address,
            abi,
            count,
        } => {
            let sim = Sim::connect_with(&cli.rpc_url, world(&w)?).await?;
            let version = if abi == 1 { Version::V1 } else { Version::V2 };
            for _ in 0..count {
                let m = sim.emit_unlisted(address, version).await?;
                println!("{}", serde_json::to_string(&m)?);
            }
        }
        Cmd::Run(args) => run_sim(&cli.rpc_url, args, world).await?,
    }
    Ok(())
}

async fn run_sim(
    rpc_url: &str,
    args: RunArgs,
    world: impl Fn(&WorldArgs) -> anyhow::Result<SimConfig>,
) -> anyhow::Result<()> {
    let cfg = world(&args.world)?;
    let markets_list = cfg.markets.clone();
    let sim = Sim::connect_with(rpc_url, cfg).await?;
    if let Some(p) = &args.report {
        sim.set_report(p)?;
    }
    if !args.no_install {
        sim.install_emitters().await?;
    }
    let _server = match args.markets_addr {
        Some(addr) => {
            let (bound, task) = markets::serve(addr, markets_list).await?;
            println!(
                "{}",
                serde_json::json!({ "markets_addr": bound.to_string() })
            );
            Some(task)
        }
        None => None,
    };
    let run = RunConfig {
        matches_per_block: args.matches_per_block,
        interval: Duration::from_millis(args.interval_ms),
        count: args.count,
        duration: args.duration_secs.map(Duration::from_secs_f64),
    };
    let cancel = CancellationToken::new();
    let handle = sim.spawn(run, cancel.clone());
    let stopper = tokio::spawn({
        let cancel = cancel.clone();
        async move {
            shutdown_signal().await;
            tracing::info!("stopping after the batch in flight");
            cancel.cancel();
        }
    });
    let sent = handle.await.context("run task")??;
    stopper.abort();
    let emitted = sim.emitted();
    let summary = serde_json::json!({
        "matches": sent,
        "fills": emitted.len(),
        "first_block": emitted.first().map(|e| e.block_number),
        "last_block": emitted.last().map(|e| e.block_number),
    });
    println!("{summary}");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("install SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

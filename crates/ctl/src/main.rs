//! pmwctl: the operators' command line ([`pmwctl::Cli`]).

use clap::Parser;

fn main() -> std::process::ExitCode {
    pmwctl::main(pmwctl::Cli::parse())
}

//! `pmwctl bus`: edge mode's broker. `keygen` prints a new frame signing key pair
//! (`pmw_session::bus::sign`): the signing key for push (`PMW_BUS_SIGNING_KEY`, a secret) and its
//! public half for the edges (`PMW_BUS_VERIFY_KEYS`), as env-file lines.

use clap::Subcommand;
use pmw_core::exit::ServiceError;

#[derive(Debug, Subcommand)]
pub enum BusCmd {
    /// Print a new frame signing key pair as env-file lines (the signing key is a secret).
    Keygen {
        /// The key's id (1 to 32 letters, digits, - or _), e.g. the date.
        #[arg(long, default_value = "k1")]
        id: String,
    },
}

/// Run `cmd` (no configuration needed).
pub fn run(cmd: BusCmd) -> Result<(), ServiceError> {
    match cmd {
        BusCmd::Keygen { id } => {
            let (secret, public) = pmw_session::bus::sign::generate(&id)
                .map_err(|e| ServiceError::Config(e.to_string()))?;
            println!("PMW_BUS_SIGNING_KEY={secret}");
            println!("PMW_BUS_VERIFY_KEYS={public}");
            Ok(())
        }
    }
}

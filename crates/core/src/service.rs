//! The common `main` of every service binary: load config, init logs, run, map the outcome to an exit code.

use std::future::Future;
use std::process::ExitCode;

use tokio_util::sync::CancellationToken;

use crate::config::{self, CoreConfig};
use crate::exit::{ServiceError, CONFIG};

/// Run a service to completion on a multi-threaded runtime and return its exit code.
/// `run` receives the validated core config and the shutdown token.
pub fn main<F, Fut>(service: &'static str, run: F) -> ExitCode
where
    F: FnOnce(CoreConfig, CancellationToken) -> Fut,
    Fut: Future<Output = Result<(), ServiceError>>,
{
    // A service (not pmwctl, which must run to make the first key) in production needs keys.
    let cfg = match config::load::<CoreConfig>().and_then(|c| {
        c.check_secrets(crate::sealed::keyring().is_some())
            .map(|()| c)
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{service}: {e}");
            return ExitCode::from(CONFIG);
        }
    };
    crate::telemetry::init(cfg.log_format, &cfg.log_filter);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start runtime");
            return ExitCode::from(crate::exit::BUG);
        }
    };
    let outcome = rt.block_on(async move {
        let shutdown = crate::shutdown::on_signals();
        tracing::info!(service, config = ?cfg, "starting");
        if crate::sealed::keyring().is_none() {
            tracing::warn!(
                service,
                "PMW_SECRET_KEYS is unset: new webhook signing secrets are stored unsealed (development only)"
            );
        }
        run(cfg, shutdown).await
    });
    match outcome {
        Ok(()) => {
            tracing::info!(service, "stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let code = e.exit_code();
            tracing::error!(service, code, error = %e, "exiting");
            ExitCode::from(code)
        }
    }
}

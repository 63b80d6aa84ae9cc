//! Readiness computed at most once per `PMW_API_READY_INTERVAL_MS` and shared by every caller
//! (`/v1/ready`, `/metrics`): concurrent callers wait for the one evaluation under way, then all
//! read its verdict. The checks run on the readiness pool of their own ([`crate::AppState`]'s
//! `ready_pg`, 2 connections), never on the request pool: a flood of readiness callers costs
//! one evaluation per interval, whatever its size.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use super::Readiness;
use crate::AppState;

/// Evaluations run (`pmw_api_ready_evaluations_total`): one per interval at most.
pub const EVALUATIONS: &str = "pmw_api_ready_evaluations_total";

/// The last verdict and when it was reached.
pub struct ReadyCache {
    interval: Duration,
    last: Mutex<Option<(Instant, Arc<Readiness>)>>,
}

impl ReadyCache {
    pub fn new(interval: Duration) -> ReadyCache {
        ReadyCache {
            interval,
            last: Mutex::new(None),
        }
    }

    /// The verdict of at most `interval` ago, evaluated now (once, for every waiting caller)
    /// when there is none.
    pub async fn get(&self, st: &AppState) -> Arc<Readiness> {
        let mut last = self.last.lock().await;
        if let Some((at, r)) = last.as_ref() {
            if at.elapsed() < self.interval {
                return r.clone();
            }
        }
        let r = Arc::new(super::evaluate(st).await);
        if let Some(e) = &r.error {
            tracing::info!(reason = %e.message, "not ready");
        }
        *last = Some((Instant::now(), r.clone()));
        r
    }
}

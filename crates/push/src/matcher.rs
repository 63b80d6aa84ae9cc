//! The subscription index a lane matches its trades with: reloaded when the version a round read
//! moved, or after a failed round.

use std::sync::Arc;

use pmw_core::pg::PgPool;

use crate::round::RoundError;
use pmw_session::subs::{Index, Subscriptions};

/// The subscription index a lane matches with, reloaded when the version read with the
/// watermark moved or after a failed round (a stale index must never fail rounds forever).
pub struct Matcher {
    subs: Subscriptions,
    reload: bool,
}

impl Matcher {
    /// `loaded`: `subs` holds a fresh index (else it is loaded on the first round).
    pub fn new(subs: Subscriptions, loaded: bool) -> Matcher {
        Matcher {
            subs,
            reload: !loaded,
        }
    }

    /// The index for `version`, and whether it was reloaded for it.
    pub async fn index(
        &mut self,
        pool: &PgPool,
        version: i64,
    ) -> Result<(Arc<Index>, bool), RoundError> {
        let idx = self.subs.current().await;
        if idx.version == version && !self.reload {
            return Ok((idx, false));
        }
        let idx = self.subs.reload(pool).await?;
        self.reload = false;
        Ok((idx, true))
    }

    pub async fn version(&self) -> i64 {
        self.subs.current().await.version
    }

    /// A round failed: reload before the next one.
    pub fn failed(&mut self) {
        self.reload = true;
    }
}

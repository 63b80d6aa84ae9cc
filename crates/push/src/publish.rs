//! Edge mode's leader side (docs/ARCHITECTURE.md §3.6): with `PMW_PUSH_NATS_URLS` set, the
//! WebSocket lane stores each round (and the finality lane each round of `final`s) on the JetStream
//! stream ([`pmw_session::bus::round`]) before its fenced cursor move, so the cursor never passes a
//! round the broker did not store. The stream is claimed for this leader's epoch once, at its first
//! round (a claim that failed is tried again by the next round); the same publisher, its guard
//! unchanged, carries on across broker outages. A deposed leader's publish is refused and ends its
//! leadership like a fenced write. While the broker cannot store, the round fails and the cursor
//! waits; the retried round is de-duplicated by its message ids.

use pmw_session::bus::round::{Round, ROWS_PER_PART};
use pmw_session::bus::{stream, Bus, BusConfig, BusError, FencedPublisher};

use crate::round::RoundError;

/// The one publisher of a leadership, shared by the WebSocket lane and the finality lane (two
/// would fence each other: each guards with the sequence it last stored).
pub type SharedPublisher = std::sync::Arc<tokio::sync::Mutex<Publisher>>;

/// The stream a leader of `epoch` publishes its rounds to.
pub struct Publisher {
    config: BusConfig,
    epoch: i64,
    /// Connected and claimed (`None` until a claim succeeds).
    claimed: Option<FencedPublisher>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("stream", &self.config.stream)
            .field("epoch", &self.epoch)
            .field("claimed", &self.claimed.is_some())
            .finish()
    }
}

impl Publisher {
    pub fn new(config: BusConfig, epoch: i64) -> Publisher {
        Publisher {
            config,
            epoch,
            claimed: None,
        }
    }

    /// Connect, make sure of the stream and claim it for this epoch, unless done already.
    pub async fn claim(&mut self) -> Result<(), RoundError> {
        if self.claimed.is_some() {
            return Ok(());
        }
        let bus = Bus::connect(self.config.clone(), "pmw-push")
            .await
            .map_err(bus_error)?;
        stream::ensure(&bus).await.map_err(bus_error)?;
        let p = FencedPublisher::claim(bus, self.epoch)
            .await
            .map_err(bus_error)?;
        tracing::info!(epoch = self.epoch, stream = %self.config.stream, seq = p.last(), "publishing rounds to the bus");
        self.claimed = Some(p);
        Ok(())
    }

    /// Store `round` (split into parts); returns once the broker stored every part.
    pub async fn publish(&mut self, round: Round) -> Result<(), RoundError> {
        let frames = round
            .parts(ROWS_PER_PART)
            .and_then(|parts| {
                parts
                    .iter()
                    .map(|p| p.to_frame())
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(bus_error)?;
        self.claim().await?;
        let p = self.claimed.as_mut().expect("claimed above");
        match p.publish_round(&frames).await {
            Ok(_) => Ok(()),
            Err(e @ (BusError::Fenced { .. } | BusError::Superseded { .. })) => {
                tracing::error!(epoch = self.epoch, error = %e, "deposed on the bus: another leader claimed the stream");
                Err(RoundError::Fenced)
            }
            // The same publisher, its guard unchanged, retries the round (stored parts come back
            // as duplicates).
            Err(e) => Err(bus_error(e)),
        }
    }
}

fn bus_error(e: BusError) -> RoundError {
    match e {
        BusError::Fenced { .. } | BusError::Superseded { .. } => RoundError::Fenced,
        e => RoundError::Bus(e.to_string()),
    }
}

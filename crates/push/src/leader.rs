//! Leadership of a push slot, from taking it to handing it over.
//!
//! [`take`]: wait for the slot's advisory lock (in segments, on a dedicated session) while
//! beating `{"role":"standby"}` every second, so a live standby is visible (`/v1/ready`'s
//! `push_standby`, `pmwctl status`); then bump PushEpoch, void the predecessor's open WS claims,
//! make sure the push cursor exists.
//!
//! [`Leading::run`]: only then LISTEN, load the subscription index, bind the port, start the
//! webhook dispatcher and the WebSocket server, run the round loop ([`crate::round_loop`]), and
//! on a graceful stop hand over in order: no new connections, the dispatcher finishes its
//! attempts in flight (so the successor does not send them again), the lock is released, then
//! every socket is closed with 1012.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use pmw_core::heartbeat::Heartbeat;
use pmw_core::lock::{keys, WriterLock};
use pmw_core::pg::{PgError, PgPool};
use pmw_core::stores::Stores;
use pmw_core::types::cursor::MAX_LOG_INDEX;
use pmw_core::{CoreConfig, Cursor, Position, ServiceError, UnixMs};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::hooks_and_finals::{HooksAndFinals, Timing};
use crate::lanes::{Fence, FinalLane, HookLane, LaneSetup, LaneStart, WsLane};
use crate::round_loop::{self, Stopped};
use pmw_session::hub::Hub;
use pmw_session::recorder::Recorder;
use pmw_session::subs::Subscriptions;
use pmw_session::SessionState;

use crate::{server, webhook, AppState, Health, Pools, PushConfig};

/// What this process holds once it leads.
pub struct Leadership {
    pub lock: WriterLock,
    pub epoch: i64,
    /// The push cursor, with its block's hash when `chain_blocks` still has it.
    pub cursor: Position,
    pub reorg_id: i64,
    /// The webhook lane's cursor (with its block's hash) and reorg id.
    pub webhooks: LaneStart,
    /// The finality lane's cursor (with its block's hash) and reorg id.
    pub finals: LaneStart,
}

/// How often a standby beats while it waits for the lock.
pub const STANDBY_BEAT: Duration = Duration::from_secs(1);

pub fn lock_key(slot: i16) -> i64 {
    keys::PUSH_BASE + i64::from(slot)
}

/// Who waits for a push slot's lock, and how.
pub struct Candidate<'a> {
    pub instance: &'a str,
    pub slot: i16,
    /// How long one wait for the lock lasts before it is taken again (see [`WriterLock`]).
    pub segment: Duration,
    /// The leader's heartbeat lease: a frozen leader past it is deposed (see `lease`).
    pub lease: Duration,
}

/// Wait for the lock as the standby, beating every [`STANDBY_BEAT`], then take over.
/// `Ok(None)` if shutdown came first (the heartbeat then says `stopped`).
pub async fn take(
    cfg: &CoreConfig,
    pool: &PgPool,
    heartbeat: &Heartbeat,
    candidate: Candidate<'_>,
    shutdown: &CancellationToken,
) -> Result<Option<Leadership>, PgError> {
    let Candidate {
        instance,
        slot,
        segment,
        lease,
    } = candidate;
    let app = format!("pmw-push:{instance}:lock");
    let acquire = WriterLock::acquire(cfg, &app, lock_key(slot), segment, shutdown);
    let lock = tokio::select! {
        biased;
        r = acquire => r?,
        never = standby_beats(heartbeat, slot) => match never {},
        // A frozen leader keeps its lock: its heartbeat is the lease (see `lease`).
        never = crate::lease::watch(pool, slot, lock_key(slot), lease) => match never {},
    };
    let Some(lock) = lock else {
        let _ = heartbeat
            .beat(&serde_json::json!({"role": "stopped"}))
            .await;
        return Ok(None);
    };
    claim(pool, lock, instance, slot).await.map(Some)
}

/// With the slot's lock held: bump the epoch, void the predecessor's claims, and read (creating
/// them on the first leadership) the three lanes' cursors, in one transaction.
async fn claim(
    pool: &PgPool,
    lock: WriterLock,
    instance: &str,
    slot: i16,
) -> Result<Leadership, PgError> {
    let now = UnixMs::now().0;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let epoch: i64 = tx
        .query_one(
            include_str!("sql/bump_epoch.sql"),
            &[&slot, &instance, &now],
        )
        .await?
        .get(0);
    let voided = tx
        .execute(include_str!("sql/void_claims.sql"), &[&slot, &epoch, &now])
        .await?;
    // First leader ever: start at the ingest watermark (no history replay).
    let start = pmw_core::pg::watermark(&*tx).await?.unwrap_or(0) as i64;
    tx.execute(
        include_str!("sql/init_cursor.sql"),
        &[&slot, &start, &(MAX_LOG_INDEX as i32), &epoch, &now],
    )
    .await?;
    tx.execute(include_str!("sql/init_webhook_cursor.sql"), &[&slot])
        .await?;
    tx.execute(
        include_str!("sql/init_final_cursor.sql"),
        &[&slot, &(MAX_LOG_INDEX as i32)],
    )
    .await?;
    let row = tx
        .query_one(include_str!("sql/push_cursor.sql"), &[&slot])
        .await?;
    let hooks = tx
        .query_one(include_str!("sql/webhook_cursor.sql"), &[&slot])
        .await?;
    let fin = tx
        .query_one(include_str!("sql/final_cursor.sql"), &[&slot])
        .await?;
    tx.commit().await?;
    let (cursor, webhooks, finals) = (position(&row), position(&hooks), position(&fin));
    tracing::info!(slot, epoch, voided, cursor = %cursor, webhook_cursor = %webhooks, final_cursor = %finals, "leading");
    Ok(Leadership {
        lock,
        epoch,
        cursor,
        reorg_id: row.get(2),
        webhooks: LaneStart {
            position: webhooks,
            reorg_id: hooks.get(2),
        },
        finals: LaneStart {
            position: finals,
            reorg_id: fin.get(2),
        },
    })
}

/// A cursor row (`block_number`, `log_index`, `reorg_id`, block hash) as a position.
fn position(row: &tokio_postgres::Row) -> Position {
    let at = Cursor {
        block: row.get::<_, i64>(0) as u64,
        log_index: row.get::<_, i32>(1) as u32,
    };
    Position::maybe(at, row.get::<_, Option<String>>(3).as_deref())
}

/// Beat `{"role":"standby"}` every [`STANDBY_BEAT`] until dropped (when the lock is acquired or
/// shutdown comes). A failed beat is logged and retried on the next tick.
async fn standby_beats(heartbeat: &Heartbeat, slot: i16) -> std::convert::Infallible {
    let since = UnixMs::now().0;
    let state = serde_json::json!({"role": "standby", "slot": slot, "waiting_since_ms": since});
    let mut tick = tokio::time::interval(STANDBY_BEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = heartbeat.beat(&state).await {
            tracing::warn!(error = %e, "standby heartbeat failed");
        }
    }
}

/// What a leader runs with.
pub(crate) struct Leading<'a> {
    pub cfg: &'a CoreConfig,
    pub push: &'a PushConfig,
    pub stores: &'a Stores,
    pub pools: &'a Pools,
    pub heartbeat: &'a Heartbeat,
    pub shutdown: &'a CancellationToken,
}

/// What a leader's round loop runs with, beside the lanes.
struct Running {
    hub: Hub,
    health: Arc<Health>,
    recorder: Recorder,
    dispatcher: webhook::Dispatcher,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    server_stop: CancellationToken,
    /// The leader's background tasks' stop (the pending lane's too).
    tasks: CancellationToken,
    /// Stops the recorder's and dispatcher's tasks when the leader ends.
    _tasks: tokio_util::sync::DropGuard,
}

impl Leading<'_> {
    /// Serve as the slot's leader until shutdown (`Ok`) or a failure that hands over (`Err`:
    /// the process exits and the standby takes the lock). `bound` receives the listen address.
    pub async fn run(
        self,
        lead: Leadership,
        hooks: webhook::WebhookConfig,
        bound: Option<oneshot::Sender<SocketAddr>>,
    ) -> Result<(), ServiceError> {
        // LISTEN before the first index load: a change committed in between is then either in
        // the load or notified (and every round checks the index version anyway).
        let listen = match crate::baseline::poll_ms() {
            Some(_) => None,
            None => Some(round_loop::listen_session(self.cfg).await?),
        };
        let subs = Subscriptions::default();
        subs.reload(&self.stores.pg)
            .await
            .map_err(|e| ServiceError::transient(e.to_string()))?;
        let mut run = self.serve(&lead, hooks, bound).await?;
        let (ws, mut behind) = self.lanes(&lead, subs, &run);
        let stopped = round_loop::RoundLoop {
            cfg: self.cfg,
            push: self.push,
            shutdown: self.shutdown,
            lost: lead.lock.lost(),
            listen,
            ws,
            hub: run.hub.clone(),
            health: run.health.clone(),
            heartbeat: self.heartbeat,
            dispatcher: &mut run.dispatcher,
            behind: &mut behind,
            relisten_at: tokio::time::Instant::now(),
            relisten_wait: pmw_core::backoff::Backoff::new(pmw_core::backoff::Policy::STORE),
            index_at: None,
            index_due: None,
        }
        .run()
        .await;
        match stopped {
            Err(e) => {
                run.hub.close_all(1012);
                Err(e)
            }
            Ok(Stopped::DeadlinePassed) => {
                run.hub.close_all(1012);
                Ok(())
            }
            Ok(Stopped::Graceful) => {
                self.stop_gracefully(lead.lock, behind, run).await;
                Ok(())
            }
        }
    }

    /// Bind the port, start the recorder, the webhook dispatcher and the WebSocket server.
    async fn serve(
        &self,
        lead: &Leadership,
        hooks: webhook::WebhookConfig,
        bound: Option<oneshot::Sender<SocketAddr>>,
    ) -> Result<Running, ServiceError> {
        let push = self.push;
        let (listener, _) = pmw_core::listen::bind(push.push_listen, bound).await?;
        let tasks = CancellationToken::new();
        let hub = Hub::new(lead.cursor);
        hub.start_finals(lead.finals.position);
        let health = Arc::new(Health::default());
        health.epoch.store(lead.epoch, Ordering::Relaxed);
        let recorder = Recorder::spawn(self.stores.ch.clone(), tasks.clone());
        let dispatcher = webhook::Dispatcher::spawn_shared(
            self.pools.webhooks.clone(),
            recorder.clone(),
            lead.epoch,
            hooks,
            tasks.clone(),
        );
        let state = AppState {
            session: SessionState::new(
                self.pools.sessions.clone(),
                self.stores.ch.clone(),
                hub.clone(),
                push.session(),
                recorder.clone(),
                lead.epoch,
            ),
            cfg: Arc::new(push.clone()),
            health: health.clone(),
        };
        state.session.spawn_upkeep(tasks.clone());
        let server_stop = CancellationToken::new();
        let server = server::spawn(listener, state, server_stop.clone());
        Ok(Running {
            hub,
            health,
            recorder,
            dispatcher,
            server,
            server_stop,
            tasks: tasks.clone(),
            _tasks: tasks.drop_guard(),
        })
    }

    /// The three lanes, each from its own cursor: the WebSocket lane (run by the round loop),
    /// and the webhook and finality lanes in their own task.
    fn lanes(
        &self,
        lead: &Leadership,
        subs: Subscriptions,
        run: &Running,
    ) -> (WsLane, HooksAndFinals) {
        let push = self.push;
        let setup = LaneSetup {
            pool: self.stores.pg.clone(),
            ch: self.stores.ch.clone(),
            fence: Fence {
                slot: push.push_slot,
                epoch: lead.epoch,
            },
            limit: push.round_trades(),
            span: push.push_catchup_span_blocks,
            facts: run.recorder.clone(),
        };
        let publisher = push.bus().map(|bus| {
            Arc::new(tokio::sync::Mutex::new(crate::publish::Publisher::new(
                bus, lead.epoch,
            )))
        });
        let ws = WsLane::new(
            &setup,
            LaneStart {
                position: lead.cursor,
                reorg_id: lead.reorg_id,
            },
            subs,
            run.hub.clone(),
            publisher.clone(),
        );
        let hooks = HookLane::new(&setup, lead.webhooks, Some(run.dispatcher.handoff()));
        // The pending tier's frames, apart from the rounds (ends with the leader's tasks).
        crate::pending_lane::spawn(
            crate::pending_lane::Setup {
                cfg: self.cfg.clone(),
                pool: self.stores.pg.clone(),
                hub: run.hub.clone(),
                publisher: publisher.clone(),
                hooks: crate::pending_hooks::PendingHooks {
                    pool: self.stores.pg.clone(),
                    fence: setup.fence,
                    waker: run.dispatcher.waker(),
                    subs: Subscriptions::default(),
                },
            },
            run.tasks.clone(),
        );
        let finals = FinalLane::new(&setup, lead.finals, run.hub.clone(), publisher);
        let behind = HooksAndFinals::spawn(
            hooks,
            Some(finals),
            run.dispatcher.waker(),
            run.health.clone(),
            Timing {
                fallback: PushConfig::ms(
                    crate::baseline::poll_ms().unwrap_or(push.push_fallback_ms),
                ),
                stall: PushConfig::ms(push.stall_exit_ms()),
                deadline: PushConfig::ms(push.push_round_deadline_ms),
            },
        );
        (ws, behind)
    }

    /// A graceful stop: no new connections, then [`Leading::hand_over`], then the server and the
    /// recorder finish and the heartbeat says `stopped`.
    async fn stop_gracefully(&self, lock: WriterLock, behind: HooksAndFinals, run: Running) {
        run.server_stop.cancel();
        self.hand_over(lock, behind, run.dispatcher, &run.hub).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), run.server).await;
        run.recorder
            .close(PushConfig::ms(self.push.push_round_deadline_ms))
            .await;
        let _ = self
            .heartbeat
            .beat(&serde_json::json!({"role": "stopped"}))
            .await;
    }

    /// The graceful stop's order: the webhook lane finishes its round in flight, the dispatcher
    /// its attempts in flight (each within the round deadline), then the lock is released, then
    /// every socket is closed with 1012.
    async fn hand_over(
        &self,
        lock: WriterLock,
        behind: HooksAndFinals,
        dispatcher: webhook::Dispatcher,
        hub: &Hub,
    ) {
        let within = PushConfig::ms(self.push.push_round_deadline_ms);
        if let Err(e) = behind.stop().await {
            tracing::warn!(error = %e, "webhook lane ended with an error");
        }
        match tokio::time::timeout(within, dispatcher.stop()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "webhook dispatcher ended with an error"),
            Err(_) => tracing::warn!(
                within_ms = within.as_millis() as u64,
                "webhook dispatcher still busy at the deadline; releasing the lock anyway"
            ),
        }
        if let Err(e) = lock.release().await {
            tracing::warn!(error = %e, "releasing the push lock failed (it ends with the session)");
        }
        hub.close_all(1012);
    }
}

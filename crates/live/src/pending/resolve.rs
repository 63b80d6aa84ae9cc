//! The ends of pending settlements that do not confirm, judged on each new watermark `W` from
//! what a provider on the ledger's own branch says at or below `W` (so neither a fact the ledger
//! has not committed yet nor one of another branch decides): mined with status 0 → `reverted`;
//! the sender's nonce at `W` past the transaction's while it is not mined → `replaced`; unknown
//! to every provider for the drop grace → `dropped`; still open `expire_blocks` after it was
//! recorded → `expired`. Each end is one guarded statement (`sql/pending_void.sql`), taken only
//! while the ledger still holds block `W` as it was judged: a fill ends once, and never on a
//! branch a reorg took away.

use metrics::{counter, gauge};
use pmw_core::types::Address;
use pmw_core::UnixMs;

use super::{Recorder, OPEN, VOIDED};
use crate::chain::pending::Mined;

/// Open transactions looked at per watermark, at most (oldest first).
const PER_ROUND: i64 = 500;

/// Why a pending settlement ended without confirming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Reverted,
    Replaced,
    Dropped,
    Expired,
}

impl End {
    pub fn as_str(self) -> &'static str {
        match self {
            End::Reverted => "reverted",
            End::Replaced => "replaced",
            End::Dropped => "dropped",
            End::Expired => "expired",
        }
    }
}

/// An open transaction as `pending_open.sql` gives it.
#[derive(Debug, Clone)]
pub struct Open {
    pub hash: String,
    pub sender: Address,
    pub nonce: u64,
    pub seen_block: u64,
    pub gone_block: Option<u64>,
}

/// What the providers say of one open transaction, at watermark `w`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// Its receipt, if mined at or below `w`.
    pub mined: Option<Mined>,
    /// The sender's mined nonce at `w`.
    pub nonce_at_w: u64,
    /// Whether any provider still knows it.
    pub known: bool,
}

/// What to do with one open transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    End(End),
    /// Still open; `gone`: the watermark from which no pool has it (None: one has it).
    Wait {
        gone: Option<u64>,
    },
}

/// The verdict for `o` at watermark `w` (pure; tested below).
pub fn judge(o: &Open, f: Facts, w: u64, expire_blocks: u64, grace: u64) -> Verdict {
    let expired = w >= o.seen_block + expire_blocks;
    match f.mined {
        Some(m) if !m.ok => return Verdict::End(End::Reverted),
        // Mined: its commit pairs it; if that did not happen by the bound, it expires.
        Some(_) if expired => return Verdict::End(End::Expired),
        Some(_) => return Verdict::Wait { gone: None },
        None => {}
    }
    if f.nonce_at_w > o.nonce {
        return Verdict::End(End::Replaced);
    }
    let gone = if f.known {
        None
    } else {
        Some(o.gone_block.unwrap_or(w))
    };
    if gone.is_some_and(|g| w >= g + grace) {
        return Verdict::End(End::Dropped);
    }
    if expired {
        return Verdict::End(End::Expired);
    }
    Verdict::Wait { gone }
}

/// One resolution round at watermark `w`, whose block the ledger holds as `anchor`.
pub async fn resolve(r: &Recorder, w: u64, anchor: &str) -> Result<(), String> {
    let pg = |e: tokio_postgres::Error| pmw_core::pg::describe(&e);
    let mut at = [0u8; 32];
    hex::decode_to_slice(anchor.trim_start_matches("0x"), &mut at)
        .map_err(|e| format!("watermark hash {anchor}: {e}"))?;
    let c = r.pg.get().await.map_err(|e| e.to_string())?;
    let open: Vec<Open> = c
        .query(include_str!("../sql/pending_open.sql"), &[&PER_ROUND])
        .await
        .map_err(pg)?
        .iter()
        .map(|row| Open {
            hash: row.get(0),
            sender: row.get::<_, String>(1).parse().unwrap_or(Address([0; 20])),
            nonce: row.get::<_, i64>(2) as u64,
            seen_block: row.get::<_, i64>(3) as u64,
            gone_block: row.get::<_, Option<i64>>(4).map(|b| b as u64),
        })
        .collect();
    drop(c);
    gauge!(OPEN).set(open.len() as f64);
    for o in &open {
        let facts = match facts(r, o, w, at).await {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(tx = %o.hash, error = %e, "pending facts not read; next watermark");
                continue;
            }
        };
        let s = &r.settings;
        let verdict = judge(o, facts, w, s.expire_blocks, s.drop_grace_blocks);
        let mut c = r.pg.get().await.map_err(|e| e.to_string())?;
        match verdict {
            Verdict::End(end) => {
                // The ledger head FOR SHARE waits out a commit or unwind in flight; the void
                // (a new statement, a new snapshot) then checks block `w` is still `anchor`.
                let t = c.transaction().await.map_err(pg)?;
                t.query_one(include_str!("../sql/pending_lock.sql"), &[])
                    .await
                    .map_err(pg)?;
                let voided: i64 = t
                    .query_one(
                        include_str!("../sql/pending_void.sql"),
                        &[
                            &o.hash,
                            &end.as_str(),
                            &(w as i64),
                            &UnixMs::now().0,
                            &anchor,
                        ],
                    )
                    .await
                    .map_err(pg)?
                    .get(0);
                t.commit().await.map_err(pg)?;
                counter!(VOIDED, "reason" => end.as_str()).increment(voided as u64);
                tracing::debug!(tx = %o.hash, end = end.as_str(), fills = voided, block = w, "pending settlement ended");
            }
            Verdict::Wait { gone } if gone != o.gone_block => {
                c.execute(
                    include_str!("../sql/pending_gone.sql"),
                    &[&o.hash, &gone.map(|g| g as i64)],
                )
                .await
                .map_err(pg)?;
            }
            Verdict::Wait { .. } => {}
        }
    }
    Ok(())
}

/// The facts about `o` at `w` from a provider on the ledger's branch (block `w` is `anchor`),
/// and whether any provider still knows it.
async fn facts(r: &Recorder, o: &Open, w: u64, anchor: [u8; 32]) -> Result<Facts, String> {
    let mut hash = [0u8; 32];
    hex::decode_to_slice(o.hash.trim_start_matches("0x"), &mut hash).map_err(|e| e.to_string())?;
    let seen = r
        .probe
        .at_anchor(hash, o.sender, w, anchor)
        .await
        .map_err(|e| e.to_string())?;
    let known = if seen.mined.is_none() && seen.nonce_at_w <= o.nonce {
        r.probe.known(hash).await.map_err(|e| e.to_string())?
    } else {
        true
    };
    Ok(Facts {
        mined: seen.mined,
        nonce_at_w: seen.nonce_at_w,
        known,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(gone_block: Option<u64>) -> Open {
        Open {
            hash: String::new(),
            sender: Address([1; 20]),
            nonce: 5,
            seen_block: 100,
            gone_block,
        }
    }

    fn facts(mined: Option<Mined>, nonce_at_w: u64, known: bool) -> Facts {
        Facts {
            mined,
            nonce_at_w,
            known,
        }
    }

    const OK: Mined = Mined {
        block: 101,
        ok: true,
    };
    const FAILED: Mined = Mined {
        block: 101,
        ok: false,
    };

    #[test]
    fn each_fact_has_its_end() {
        let j = |o: &Open, f: Facts, w: u64| judge(o, f, w, 30, 3);
        let wait = Verdict::Wait { gone: None };
        assert_eq!(
            j(&open(None), facts(Some(FAILED), 6, true), 101),
            Verdict::End(End::Reverted)
        );
        assert_eq!(j(&open(None), facts(Some(OK), 6, true), 101), wait);
        assert_eq!(
            j(&open(None), facts(Some(OK), 6, true), 130),
            Verdict::End(End::Expired)
        );
        assert_eq!(
            j(&open(None), facts(None, 6, true), 101),
            Verdict::End(End::Replaced)
        );
        assert_eq!(j(&open(None), facts(None, 5, true), 101), wait);
        // Gone: the grace counts from the first watermark without it.
        assert_eq!(
            j(&open(None), facts(None, 5, false), 101),
            Verdict::Wait { gone: Some(101) }
        );
        assert_eq!(
            j(&open(Some(101)), facts(None, 5, false), 103),
            Verdict::Wait { gone: Some(101) }
        );
        assert_eq!(
            j(&open(Some(101)), facts(None, 5, false), 104),
            Verdict::End(End::Dropped)
        );
        // Back in a pool: the grace starts over.
        assert_eq!(j(&open(Some(101)), facts(None, 5, true), 104), wait);
        assert_eq!(
            j(&open(None), facts(None, 5, true), 130),
            Verdict::End(End::Expired)
        );
    }
}

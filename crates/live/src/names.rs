//! Market names: token ids are recorded the first time they are seen and resolved in the
//! background from a Gamma-compatible `/markets?clob_token_ids=` API into `market_names`.
//! Nothing on the ingest or push path ever waits for a name.

use std::collections::HashSet;
use std::time::Duration;

use pmw_core::pg::PgPool;
use pmw_core::UnixMs;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Ids asked for in one Gamma request.
const BATCH: usize = 20;
/// After this many misses a token is marked `not_found` (retried daily).
const MAX_ATTEMPTS: i32 = 8;

/// Handle: report token ids as they are seen. Never blocks.
#[derive(Clone)]
pub struct Names {
    tx: mpsc::UnboundedSender<Vec<String>>,
}

impl Names {
    pub fn seen(&self, token_ids: impl Iterator<Item = String>) {
        let ids: Vec<String> = token_ids.collect();
        if !ids.is_empty() {
            let _ = self.tx.send(ids);
        }
    }

    /// Start the recorder and resolver tasks.
    pub fn spawn(pool: PgPool, gamma_url: String, shutdown: CancellationToken) -> Names {
        let (tx, rx) = mpsc::unbounded_channel();
        let wake = std::sync::Arc::new(tokio::sync::Notify::new());
        tokio::spawn(record(pool.clone(), rx, wake.clone(), shutdown.clone()));
        tokio::spawn(resolve_loop(pool, gamma_url, wake, shutdown));
        Names { tx }
    }
}

async fn record(
    pool: PgPool,
    mut rx: mpsc::UnboundedReceiver<Vec<String>>,
    wake: std::sync::Arc<tokio::sync::Notify>,
    shutdown: CancellationToken,
) {
    let mut known: HashSet<String> = HashSet::new();
    loop {
        let ids = tokio::select! {
            ids = rx.recv() => match ids { Some(ids) => ids, None => return },
            _ = shutdown.cancelled() => return,
        };
        let new: Vec<String> = ids
            .into_iter()
            .filter(|id| !known.contains(id))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if new.is_empty() {
            continue;
        }
        let now = UnixMs::now().0;
        let result = async {
            let client = pool.get().await?;
            let sql = client
                .prepare_cached(include_str!("sql/record_names.sql"))
                .await?;
            client.execute(&sql, &[&new, &now]).await?;
            Ok::<_, pmw_core::pg::PgError>(())
        }
        .await;
        match result {
            Ok(()) => {
                known.extend(new);
                wake.notify_one();
            }
            Err(e) => tracing::warn!(error = %e, tokens = new.len(), "cannot record new tokens"),
        }
    }
}

async fn resolve_loop(
    pool: PgPool,
    gamma_url: String,
    wake: std::sync::Arc<tokio::sync::Notify>,
    shutdown: CancellationToken,
) {
    let http = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "market name resolver disabled: cannot build http client");
            return;
        }
    };
    loop {
        match resolve_due(&pool, &http, &gamma_url).await {
            Ok(n) if n > 0 => continue,
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "market name resolution failed"),
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// One Gamma market, with the fields pmw uses. `outcomes` and `clobTokenIds` are JSON-encoded
/// strings in Gamma's API.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GammaMarket {
    pub question: Option<String>,
    pub condition_id: Option<String>,
    pub slug: Option<String>,
    pub outcomes: Option<String>,
    pub clob_token_ids: Option<String>,
    pub neg_risk: Option<bool>,
    /// The events the market belongs to (Gamma lists one); its slug names the event's page.
    #[serde(default)]
    pub events: Option<Vec<GammaEvent>>,
}

/// A Gamma market's event, with the field pmw uses.
#[derive(Debug, Deserialize)]
pub struct GammaEvent {
    pub slug: Option<String>,
}

/// A resolved token: its market and outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub token_id: String,
    pub question: Option<String>,
    pub condition_id: Option<String>,
    pub slug: Option<String>,
    pub event_slug: Option<String>,
    pub outcome: Option<String>,
    pub outcome_index: i32,
    pub neg_risk: Option<bool>,
}

/// Map markets to the tokens they contain (outcome = `outcomes[i]`, i = index in `clobTokenIds`).
pub fn tokens_of(markets: &[GammaMarket]) -> Vec<Resolved> {
    let mut out = Vec::new();
    for m in markets {
        let ids: Vec<String> = m
            .clob_token_ids
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let outcomes: Vec<String> = m
            .outcomes
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        for (i, id) in ids.into_iter().enumerate() {
            out.push(Resolved {
                token_id: id,
                question: m.question.clone(),
                condition_id: m.condition_id.clone(),
                slug: m.slug.clone(),
                event_slug: m
                    .events
                    .as_ref()
                    .and_then(|e| e.first())
                    .and_then(|e| e.slug.clone()),
                outcome: outcomes.get(i).cloned(),
                outcome_index: i as i32,
                neg_risk: m.neg_risk,
            });
        }
    }
    out
}

#[derive(Debug, thiserror::Error)]
enum ResolveError {
    #[error(transparent)]
    Pg(#[from] pmw_core::pg::PgError),
    #[error(transparent)]
    Query(#[from] tokio_postgres::Error),
    #[error("gamma: {0}")]
    Http(#[from] reqwest::Error),
}

impl From<deadpool_postgres::PoolError> for ResolveError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        ResolveError::Pg(e.into())
    }
}

async fn resolve_due(
    pool: &PgPool,
    http: &reqwest::Client,
    gamma_url: &str,
) -> Result<usize, ResolveError> {
    let client = pool.get().await?;
    let now = UnixMs::now().0;
    let sql = client
        .prepare_cached(include_str!("sql/due_names.sql"))
        .await?;
    let due: Vec<(String, i32)> = client
        .query(&sql, &[&now, &(BATCH as i64)])
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    if due.is_empty() {
        return Ok(0);
    }
    let query: Vec<(&str, &str)> = due
        .iter()
        .map(|(id, _)| ("clob_token_ids", id.as_str()))
        .collect();
    let url = format!("{}/markets", gamma_url.trim_end_matches('/'));
    let fetched: Result<Vec<GammaMarket>, reqwest::Error> = async {
        http.get(&url)
            .query(&query)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await
    }
    .await;
    // A failed request counts as a miss for every asked token: they back off like misses.
    let (resolved, failure) = match fetched {
        Ok(markets) => (tokens_of(&markets), None),
        // Its text names the Gamma URL: only the host is kept.
        Err(e) => (Vec::new(), Some(pmw_core::redact::reqwest_error(e))),
    };
    let now = UnixMs::now().0;
    for (id, attempts) in &due {
        if let Some(r) = resolved.iter().find(|r| &r.token_id == id) {
            client
                .execute(
                    include_str!("sql/resolve_name.sql"),
                    &[
                        id,
                        &r.question,
                        &r.condition_id,
                        &r.slug,
                        &r.outcome,
                        &r.outcome_index,
                        &r.neg_risk,
                        &now,
                        &r.event_slug,
                    ],
                )
                .await?;
        } else {
            let attempts = attempts + 1;
            let (status, delay_ms) = after_miss(attempts);
            client
                .execute(
                    "UPDATE market_names SET status = $2, attempts = $3, next_attempt_ms = $4 WHERE token_id = $1",
                    &[id, &status, &attempts, &(now + delay_ms)],
                )
                .await?;
        }
    }
    if let Some(e) = failure {
        return Err(e.into());
    }
    tracing::debug!(
        asked = due.len(),
        resolved = resolved.len(),
        "market names resolved"
    );
    Ok(due.len())
}

/// A token's status and next-attempt delay after its `attempts`-th miss: doubling from 2 s (at
/// most 1000 s), then `not_found` retried daily once [`MAX_ATTEMPTS`] is reached.
fn after_miss(attempts: i32) -> (&'static str, i64) {
    if attempts >= MAX_ATTEMPTS {
        ("not_found", 86_400_000)
    } else {
        ("pending", 1000i64 << attempts.min(12))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn misses_back_off_doubling_then_give_up_for_a_day() {
        assert_eq!(super::after_miss(1), ("pending", 2_000));
        assert_eq!(super::after_miss(2), ("pending", 4_000));
        assert_eq!(
            super::after_miss(super::MAX_ATTEMPTS),
            ("not_found", 86_400_000)
        );
    }

    use super::*;

    #[test]
    fn outcome_is_indexed_by_position_in_clob_token_ids() {
        let body = r#"[{"question":"Will it rain?","conditionId":"0xc0","slug":"rain","outcomes":"[\"Yes\", \"No\"]","clobTokenIds":"[\"111\", \"222\"]","negRisk":false,"closed":false}]"#;
        let markets: Vec<GammaMarket> = serde_json::from_str(body).unwrap();
        let t = tokens_of(&markets);
        assert_eq!(t.len(), 2);
        assert_eq!(
            (
                t[0].token_id.as_str(),
                t[0].outcome.as_deref(),
                t[0].outcome_index
            ),
            ("111", Some("Yes"), 0)
        );
        assert_eq!(
            (
                t[1].token_id.as_str(),
                t[1].outcome.as_deref(),
                t[1].outcome_index
            ),
            ("222", Some("No"), 1)
        );
        assert_eq!(t[1].question.as_deref(), Some("Will it rain?"));
    }

    #[test]
    fn malformed_encoded_lists_yield_nothing_rather_than_a_guess() {
        let markets: Vec<GammaMarket> = serde_json::from_str(
            r#"[{"question":"q","outcomes":"Yes,No","clobTokenIds":"not json"}]"#,
        )
        .unwrap();
        assert!(tokens_of(&markets).is_empty());
    }
}

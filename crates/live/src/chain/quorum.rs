//! The chain calls of a quorum above 1: every usable provider asked at once, and only what at
//! least the quorum answer alike is taken (a block at a height, `finalized`, a block's or a
//! range's logs); the chain id check of each provider.

use std::future::Future;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};

use ethers_core::types::{BlockNumber, Filter};
use ethers_providers::{Http, Middleware, Provider};
use pmw_core::trade::RawLog;
use tokio::time::Instant;

use super::{block_of, bounded, head_of, raw_log, says_not_found, Chain, ChainError, Head};
use crate::providers::quorum::{agreed, most, nth_largest, DISSENTS};
use crate::providers::Kind;

/// The answers to one question asked of several providers so far.
struct Tally<T> {
    answers: Vec<(usize, T)>,
    /// Providers that did not have it.
    missing: usize,
    last_err: Option<ChainError>,
}

impl<T> Default for Tally<T> {
    fn default() -> Self {
        Tally {
            answers: Vec::new(),
            missing: 0,
            last_err: None,
        }
    }
}

impl Chain {
    /// The answers of `providers` to `call`, asked at once ("not there", an error or a timeout
    /// is no answer); an error only when every one failed.
    async fn ask_each<T, F, Fut>(
        &self,
        providers: &[usize],
        call: F,
    ) -> Result<Vec<(usize, T)>, ChainError>
    where
        F: Fn(Provider<Http>) -> Fut,
        Fut: Future<Output = Result<Option<T>, ChainError>>,
    {
        let calls = providers.iter().map(|&i| {
            let fut = call(self.http[i].clone());
            async move {
                let t0 = Instant::now();
                (i, fut.await, t0.elapsed())
            }
        });
        let mut out = Vec::new();
        let mut last_err = None;
        for (i, r, took) in futures::future::join_all(calls).await {
            match r {
                Ok(Some(v)) => {
                    self.pool.answered(i, Kind::Block, took);
                    out.push((i, v));
                }
                Ok(None) => self.pool.not_found(i, Kind::Block),
                Err(e) if says_not_found(&e) => self.pool.not_found(i, Kind::Block),
                Err(e) => {
                    self.pool.failed(i);
                    tracing::debug!(provider = self.pool.name(i), error = %e, "rpc call failed");
                    last_err = Some(e);
                }
            }
        }
        match last_err {
            Some(e) if out.is_empty() => Err(e),
            _ if providers.is_empty() => Err(ChainError::NoProvider),
            _ => Ok(out),
        }
    }

    /// The answer at least the quorum of `order` give alike to `call`: the first quorum of
    /// providers asked at once, one more each time those asked can no longer make a quorum
    /// (an answer failed, was "not there" or differed) or one asked is slower than its p95
    /// (hedged, counted on it), until the quorum agrees (the answer) or every one answered: `None` when none had it,
    /// else [`ChainError::NoQuorum`] on block `number` (a wait, counted and logged) or the last
    /// error when none answered. A provider whose answer differs from the quorum's is counted.
    pub(super) async fn ask_agreed<T, F, Fut>(
        &self,
        number: u64,
        order: Vec<usize>,
        kind: Kind,
        call: F,
    ) -> Result<Option<T>, ChainError>
    where
        T: Eq + Clone,
        F: Fn(Provider<Http>) -> Fut,
        Fut: Future<Output = Result<Option<T>, ChainError>>,
    {
        let q = self.pool.quorum();
        let launch = |i: usize| {
            let fut = call(self.http[i].clone());
            async move {
                let t0 = Instant::now();
                (i, fut.await, t0.elapsed())
            }
        };
        let mut running: FuturesUnordered<_> = order.iter().take(q).map(|&i| launch(i)).collect();
        let mut pending: Vec<usize> = order.iter().take(q).copied().collect();
        let mut next = pending.len();
        let hedge_of = |pending: &[usize]| {
            let slowest = pending
                .iter()
                .map(|&i| self.pool.hedge_after(i, kind))
                .max();
            Instant::now() + slowest.unwrap_or_default()
        };
        let mut hedge_at = hedge_of(&pending);
        let mut tally = Tally::default();
        loop {
            let hedging = next < order.len();
            tokio::select! {
                done = running.next() => {
                    let Some((i, r, took)) = done else { break };
                    pending.retain(|&p| p != i);
                    if let Some(v) = self.count(&mut tally, i, kind, r.map(|v| (v, took))) {
                        return Ok(Some(v));
                    }
                }
                _ = tokio::time::sleep_until(hedge_at), if hedging => {
                    for &i in &pending {
                        self.pool.hedged(i);
                    }
                    running.push(launch(order[next]));
                    pending.push(order[next]);
                    next += 1;
                }
            }
            // One more while those still asked could not make a quorum even if all agreed.
            while most(&tally.answers) + pending.len() < q && next < order.len() {
                running.push(launch(order[next]));
                pending.push(order[next]);
                next += 1;
            }
            hedge_at = hedge_of(&pending);
        }
        let agree = most(&tally.answers);
        match tally.last_err {
            Some(e) if tally.answers.is_empty() && tally.missing == 0 => Err(e),
            _ if tally.answers.is_empty() => Ok(None),
            _ => {
                self.pool.no_quorum(number, agree, order.len());
                Err(ChainError::NoQuorum {
                    number,
                    agree,
                    asked: order.len(),
                    quorum: q,
                })
            }
        }
    }

    /// Provider `i`'s answer `r` (with how long it took) counted into `tally`: the quorum's
    /// answer once it agrees (the providers that differ from it counted as dissents).
    fn count<T: Eq + Clone>(
        &self,
        tally: &mut Tally<T>,
        i: usize,
        kind: Kind,
        r: Result<(Option<T>, Duration), ChainError>,
    ) -> Option<T> {
        match r {
            Ok((Some(v), took)) => {
                self.pool.answered(i, kind, took);
                tally.answers.push((i, v));
                let (v, who) = agreed(&tally.answers, self.pool.quorum())?;
                self.dissents(&tally.answers, &who);
                return Some(v);
            }
            Ok((None, _)) => {
                self.pool.not_found(i, kind);
                tally.missing += 1;
            }
            Err(e) if says_not_found(&e) => {
                self.pool.not_found(i, kind);
                tally.missing += 1;
            }
            Err(e) => {
                self.pool.failed(i);
                tracing::debug!(provider = self.pool.name(i), error = %e, "rpc call failed");
                tally.last_err = Some(e);
            }
        }
        None
    }

    /// Counts and logs each provider of `answers` not among `who`, those the quorum agreed
    /// with.
    fn dissents<T>(&self, answers: &[(usize, T)], who: &[usize]) {
        for (i, _) in answers.iter().filter(|(i, _)| !who.contains(i)) {
            let provider = self.pool.name(*i).to_string();
            tracing::warn!(provider, "answer differs from the quorum's; not used");
            metrics::counter!(DISSENTS, "provider" => provider).increment(1);
        }
    }

    /// The block at `number` at least the quorum of providers report (the same header), or
    /// `None`: not there yet, or no quorum (a wait, counted and logged).
    pub(super) async fn block_by_quorum(&self, number: u64) -> Result<Option<Head>, ChainError> {
        let order = self.pool.order();
        let answers = self.ask_each(&order, |p| block_of(p, number)).await?;
        let q = self.pool.quorum();
        match agreed(&answers, q) {
            Some((head, _)) => {
                self.pool.quorum_met(number);
                Ok(Some(head))
            }
            None => {
                if !answers.is_empty() {
                    self.pool.no_quorum(number, most(&answers), order.len());
                }
                Ok(None)
            }
        }
    }

    /// The providers that agree `head` is the block at its height: those that announced its
    /// hash, then those asked now; at least the quorum (any one, in the pool's order, with a
    /// quorum of 1), else [`ChainError::NoQuorum`] (a wait, counted and logged).
    pub async fn agreeing(&self, head: &Head) -> Result<Vec<usize>, ChainError> {
        let q = self.pool.quorum();
        if q <= 1 {
            return Ok(self.pool.order_for(&head.hash));
        }
        let mut agree = self.pool.announced(&head.hash);
        let order = self.pool.order();
        if agree.len() < q {
            let others: Vec<usize> = order
                .iter()
                .copied()
                .filter(|i| !agree.contains(i))
                .collect();
            // A provider that fails to answer does not agree (and is not a reason to forget
            // the head: ingest waits for a quorum on it).
            let answers = self
                .ask_each(&others, |p| block_of(p, head.number))
                .await
                .unwrap_or_default();
            agree.extend(
                answers
                    .into_iter()
                    .filter(|(_, h)| h.hash == head.hash)
                    .map(|(i, _)| i),
            );
        }
        if agree.len() >= q {
            self.pool.quorum_met(head.number);
            return Ok(agree);
        }
        self.pool.no_quorum(head.number, agree.len(), order.len());
        Err(ChainError::NoQuorum {
            number: head.number,
            agree: agree.len(),
            asked: order.len(),
            quorum: q,
        })
    }

    /// The highest block at least the quorum report as finalized (the quorum-th largest of
    /// their `finalized` tags), its header as the quorum reports it; `None` before that.
    pub(super) async fn finalized_by_quorum(&self) -> Result<Option<Head>, ChainError> {
        let answers = self
            .ask_each(&self.pool.order(), |p| async move {
                match bounded(p.get_block(BlockNumber::Finalized)).await? {
                    Some(b) => Ok(Some(head_of(&b)?.number)),
                    None => Ok(None),
                }
            })
            .await?;
        let numbers = answers.into_iter().map(|(_, n)| n).collect();
        match nth_largest(numbers, self.pool.quorum()) {
            Some(f) => self.block_by_quorum(f).await,
            None => Ok(None),
        }
    }

    /// The logs of a range (`filter`, up to block `to`) as at least the quorum of providers
    /// answer them alike.
    pub(super) async fn range_by_quorum(
        &self,
        to: u64,
        filter: &Filter,
    ) -> Result<Vec<RawLog>, ChainError> {
        let order = self.pool.order();
        let answers = self
            .ask_each(&order, |p| async move {
                let logs = bounded(p.get_logs(filter)).await?;
                logs.iter()
                    .map(raw_log)
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some)
            })
            .await?;
        match agreed(&answers, self.pool.quorum()) {
            Some((logs, _)) => Ok(logs),
            None => {
                self.pool.no_quorum(to, most(&answers), order.len());
                Err(ChainError::NoQuorum {
                    number: to,
                    agree: most(&answers),
                    asked: order.len(),
                    quorum: self.pool.quorum(),
                })
            }
        }
    }

    /// Whether provider `i` reports the configured chain id (always, when none is set); a
    /// mismatch is logged, counted, and the provider is not used until it reports the right one.
    pub async fn check_chain(&self, i: usize) -> Result<(), ChainError> {
        let Some(want) = self.chain_id else {
            return Ok(());
        };
        let got = bounded(self.http[i].get_chainid()).await?.as_u64();
        let ok = got == want;
        self.pool.chain_checked(i, ok);
        if ok {
            return Ok(());
        }
        let provider = self.pool.name(i).to_string();
        tracing::error!(
            provider,
            chain_id = got,
            expected = want,
            "provider is on another chain; not used"
        );
        Err(ChainError::WrongChain {
            provider,
            got,
            want,
        })
    }
}

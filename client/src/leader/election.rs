//! A running campaign ([`Election`]) and what it shows of its leadership ([`Leadership`]).

use std::time::Instant;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::error::{CampaignError, Error, Result};
use crate::lease::exec;

use super::elector::resign;
use super::LeaderElector;

/// This candidate's view of its own leadership.
///
/// ```
/// let l = redis_lease_client::Leadership::default();
/// assert!(!l.is_leader);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leadership {
    /// Whether this candidate leads now (and can prove it: its lease is certainly valid).
    pub is_leader: bool,
    /// The term of the current, or else the last, leadership of this candidate.
    pub term: Option<u64>,
    /// While leader: until when the lease is certainly valid.
    pub valid_until: Option<Instant>,
    /// Set when the campaign stopped on a permanent error (for example a WRONGTYPE key).
    pub error: Option<CampaignError>,
    /// While campaigning: why the last election of this candidate did not count, if it was
    /// granted but reached too few replicas (`(acked, wanted)`, with
    /// [`ElectionOptions::replicas`](crate::ElectionOptions::replicas)). The campaign goes on.
    pub unreplicated: Option<(u32, u32)>,
}

/// A running campaign (see [`LeaderElector::start`]).
///
/// Dropping it stops the campaign and, as a best effort, spawns a `LEADER.RESIGN`.
///
/// ```no_run
/// # async fn demo(e: redis_lease_client::LeaderElector) -> redis_lease_client::Result<()> {
/// let election = e.start();
/// if election.is_leader() { /* lead */ }
/// election.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping an election stops its campaign and resigns"]
pub struct Election {
    pub(super) rx: watch::Receiver<Leadership>,
    /// A term `exec` found fenced, for the campaign to step down from at once.
    pub(super) fenced: watch::Sender<Option<u64>>,
    pub(super) stop: Option<oneshot::Sender<()>>,
    pub(super) task: Option<JoinHandle<()>>,
    pub(super) elector: LeaderElector,
}

impl Election {
    /// This candidate's current view (time-checked: a lease whose bound has passed does not
    /// count as leadership).
    ///
    /// ```no_run
    /// # fn f(e: &redis_lease_client::Election) { println!("{:?}", e.leadership().term); }
    /// ```
    pub fn leadership(&self) -> Leadership {
        let mut l = self.rx.borrow().clone();
        if l.valid_until.is_some_and(|v| v <= Instant::now()) {
            l.is_leader = false;
            l.valid_until = None;
        }
        l
    }

    /// Whether this candidate leads now.
    ///
    /// ```no_run
    /// # fn f(e: &redis_lease_client::Election) { if e.is_leader() { /* ... */ } }
    /// ```
    pub fn is_leader(&self) -> bool {
        self.leadership().is_leader
    }

    /// A watch of (is_leader, term, ...): it changes when leadership is won or lost and at
    /// every renewal.
    ///
    /// ```no_run
    /// # async fn f(e: &redis_lease_client::Election) {
    /// let mut rx = e.watch();
    /// let _ = rx.wait_for(|l| l.is_leader).await;
    /// # }
    /// ```
    pub fn watch(&self) -> watch::Receiver<Leadership> {
        self.rx.clone()
    }

    /// The candidate id.
    ///
    /// ```no_run
    /// # fn f(e: &redis_lease_client::Election) { println!("{}", e.candidate()); }
    /// ```
    pub fn candidate(&self) -> &str {
        &self.elector.candidate
    }

    /// Waits until this candidate leads; answers the term. Fails if the campaign stopped on a
    /// permanent error.
    ///
    /// ```no_run
    /// # async fn f(e: &redis_lease_client::Election) -> redis_lease_client::Result<()> {
    /// let term = e.wait_leader().await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait_leader(&self) -> Result<u64> {
        let mut rx = self.rx.clone();
        let l = rx
            .wait_for(|l| l.is_leader || l.error.is_some())
            .await
            .map_err(|_| Error::CampaignStopped(CampaignError::Ended))?
            .clone();
        match (l.error, l.term) {
            (Some(err), _) => Err(Error::CampaignStopped(err)),
            (None, Some(t)) => Ok(t),
            (None, None) => Err(Error::CampaignStopped(CampaignError::Ended)),
        }
    }

    /// Resolves when this candidate is not (or no longer) the leader: at once if it does not
    /// lead now, else the moment its lease can no longer be proven or is revoked.
    ///
    /// ```no_run
    /// # async fn f(e: &redis_lease_client::Election) {
    /// e.lost().await;
    /// # }
    /// ```
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.rx.clone();
        async move {
            loop {
                let l = rx.borrow_and_update().clone();
                let Some(valid_until) = l.valid_until.filter(|_| l.is_leader) else {
                    return;
                };
                if valid_until <= Instant::now() {
                    return;
                }
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return },
                    _ = tokio::time::sleep_until(valid_until.into()) => {}
                }
            }
        }
    }

    /// Runs `cmd` inside Redis only while this candidate's term is the election's current
    /// one, atomically with the check (`LEASE.EXEC key term cmd...`), and answers its reply;
    /// see [`LockGuard::exec`](crate::LockGuard::exec). It is sent with the term of the
    /// current (or else the last) leadership: the server's check decides. A candidate that
    /// never led gets [`Error::Fenced`] without a request; so does one whose term has ended,
    /// and then, if it still counted that term as leading, it steps down at once (and
    /// campaigns again) instead of at its next renewal. In a Redis Cluster the
    /// command's keys must hash to the election key's slot.
    ///
    /// ```no_run
    /// # async fn f(e: &redis_lease_client::Election) -> redis_lease_client::Result<()> {
    /// let runs: i64 = e.exec(redis::cmd("INCR").arg("{scheduler}:runs")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn exec<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let l = self.leadership();
        let Some(term) = l.term else {
            return Err(Error::Fenced(
                "FENCED this candidate has not been elected".into(),
            ));
        };
        let e = &self.elector;
        let deadline = exec::deadline(l.valid_until, e.client.command_timeout());
        let out = exec::exec(&e.client, &e.key, term, cmd, deadline, e.opts.retry).await;
        if matches!(out, Err(Error::Fenced(_))) {
            self.fenced.send_replace(Some(term));
        }
        out
    }

    /// Stops campaigning (and leading), then sends `LEADER.RESIGN` so that the next candidate
    /// takes over at once. Answers whether this candidate was the leader.
    ///
    /// ```no_run
    /// # async fn f(e: redis_lease_client::Election) -> redis_lease_client::Result<()> {
    /// let was_leader = e.resign().await?;
    /// # Ok(()) }
    /// ```
    pub async fn resign(mut self) -> Result<bool> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        resign(&self.elector).await
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        task.abort();
        let e = self.elector.clone();
        self.elector.client.spawn_cleanup(async move {
            let _ = resign(&e).await;
        });
    }
}

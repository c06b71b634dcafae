//! A candidate ([`LeaderElector`]) and its campaign loop.

use std::time::{Duration, Instant};

use redis::Value;
use tokio::sync::{oneshot, watch};

use crate::acquire::drive::send_acquire;
use crate::acquire::ServerWait;
use crate::connection::Client;
use crate::error::{CampaignError, Error, Result};
use crate::lease::status::{LeaseStatus, LossReason};
use crate::lease::{self, renew_once, Acks, LeaseTiming, Renewal, Renewer};
use crate::reply;
use crate::retry::{classify, Backoff, Failure, RetryPolicy};

use super::{Election, ElectionOptions, Leadership};

/// Campaigns for leadership of one key.
///
/// [`LeaderElector::start`] spawns a task that campaigns with `LEADER.CAMPAIGN ... WAIT` (the
/// server parks the request and answers it the moment leadership passes to this candidate), then
/// renews the lease every third of the ttl, steps down locally as soon as the lease can no
/// longer be proven (before anyone else can be elected), and campaigns again. The returned
/// [`Election`] exposes leadership as a watch of [`Leadership`] and resigns on
/// [`Election::resign`] (or, as a best effort, on drop).
///
/// ```no_run
/// # async fn demo() -> redis_lease_client::Result<()> {
/// use std::time::Duration;
/// use redis_lease_client::Client;
///
/// let client = Client::open("redis://127.0.0.1/").await?;
/// let election = client.elector("scheduler").with_ttl(Duration::from_secs(3))?.start();
/// let term = election.wait_leader().await?;
/// println!("leading in term {term}");
/// election.lost().await; // leadership could no longer be proven
/// election.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct LeaderElector {
    pub(super) client: Client,
    pub(super) key: String,
    pub(super) candidate: String,
    pub(super) opts: ElectionOptions,
}

impl LeaderElector {
    /// A candidate for `key` with a fresh UUIDv4 id and default options (10 s ttl). Same as
    /// [`Client::elector`].
    ///
    /// ```no_run
    /// # fn f(client: redis_lease_client::Client) {
    /// let e = redis_lease_client::LeaderElector::new(&client, "jobs");
    /// # }
    /// ```
    pub fn new(client: &Client, key: impl Into<String>) -> LeaderElector {
        LeaderElector {
            client: client.clone(),
            key: key.into(),
            candidate: uuid::Uuid::new_v4().to_string(),
            opts: ElectionOptions::default(),
        }
    }

    /// Uses `candidate` as the id (instead of a UUIDv4).
    ///
    /// ```no_run
    /// # fn f(client: redis_lease_client::Client) {
    /// let e = client.elector("jobs").with_candidate("host-1");
    /// # }
    /// ```
    pub fn with_candidate(mut self, candidate: impl Into<String>) -> LeaderElector {
        self.candidate = candidate.into();
        self
    }

    /// Sets the lease ttl (and the default timing derived from it). Fails for a ttl too short
    /// to renew (see [`LeaseTiming::new`]).
    ///
    /// ```no_run
    /// # fn f(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
    /// let e = client.elector("jobs").with_ttl(std::time::Duration::from_secs(2))?;
    /// # Ok(()) }
    /// ```
    pub fn with_ttl(mut self, ttl: Duration) -> Result<LeaderElector> {
        self.opts.timing = LeaseTiming::new(ttl)?;
        Ok(self)
    }

    /// Sets how many replicas must acknowledge each win and renewal
    /// ([`ElectionOptions::replicas`]).
    ///
    /// ```no_run
    /// # fn f(client: redis_lease_client::Client) {
    /// let e = client.elector("jobs").with_replicas(1);
    /// # }
    /// ```
    pub fn with_replicas(mut self, replicas: u32) -> LeaderElector {
        self.opts.replicas = replicas;
        self
    }

    /// Sets all options.
    ///
    /// ```no_run
    /// # fn f(client: redis_lease_client::Client) {
    /// use redis_lease_client::ElectionOptions;
    /// let e = client.elector("jobs").with_options(ElectionOptions::default());
    /// # }
    /// ```
    pub fn with_options(mut self, opts: ElectionOptions) -> LeaderElector {
        self.opts = opts;
        self
    }

    /// The candidate id.
    ///
    /// ```no_run
    /// # fn f(e: redis_lease_client::LeaderElector) { println!("{}", e.candidate()); }
    /// ```
    pub fn candidate(&self) -> &str {
        &self.candidate
    }

    /// The key.
    ///
    /// ```no_run
    /// # fn f(e: redis_lease_client::LeaderElector) { println!("{}", e.key()); }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Starts campaigning in a background task (needs a tokio runtime).
    ///
    /// ```no_run
    /// # async fn demo(e: redis_lease_client::LeaderElector) {
    /// let election = e.start();
    /// let mut rx = election.watch();
    /// while rx.changed().await.is_ok() {
    ///     println!("leader now: {}", rx.borrow().is_leader);
    /// }
    /// # }
    /// ```
    pub fn start(&self) -> Election {
        let (tx, rx) = watch::channel(Leadership::default());
        let (stop_tx, stop_rx) = oneshot::channel();
        let (fenced, fenced_rx) = watch::channel(None);
        let task = tokio::spawn(campaign(self.clone(), tx, stop_rx, fenced_rx));
        Election {
            rx,
            fenced,
            stop: Some(stop_tx),
            task: Some(task),
            elector: self.clone(),
        }
    }
}

async fn campaign(
    e: LeaderElector,
    tx: watch::Sender<Leadership>,
    mut stop: oneshot::Receiver<()>,
    fenced: watch::Receiver<Option<u64>>,
) {
    let run = campaign_loop(&e, &tx, fenced);
    tokio::select! {
        _ = run => {}
        _ = &mut stop => {}
    }
    tx.send_modify(|l| {
        l.is_leader = false;
        l.valid_until = None;
    });
}

/// Resolves once `term` is reported fenced (`LEASE.EXEC` answered `FENCED` for it).
async fn fenced_term(rx: &mut watch::Receiver<Option<u64>>, term: u64) {
    loop {
        if *rx.borrow_and_update() == Some(term) {
            return;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn campaign_loop(
    e: &LeaderElector,
    tx: &watch::Sender<Leadership>,
    mut fenced: watch::Receiver<Option<u64>>,
) {
    let timing = e.opts.timing;
    let renew = Renewer {
        cmd: redis::cmd("LEADER.RENEW")
            .arg(&e.key)
            .arg(&e.candidate)
            .arg(timing.ttl_ms())
            .to_owned(),
        acks: Acks::new(e.opts.replicas, e.opts.replica_timeout),
        expect: None,
    };
    let wait = e.opts.campaign_wait.max(Duration::from_millis(1));
    let stop = |err: Error| {
        tx.send_modify(|l| l.error = Some(CampaignError::from_error(err)));
    };
    if let Err(err) = e.client.check_timing(&timing) {
        return stop(err);
    }
    let mut backoff = Backoff::new_now(e.opts.retry);
    loop {
        let mut cmd = redis::cmd("LEADER.CAMPAIGN")
            .arg(&e.key)
            .arg(&e.candidate)
            .arg(timing.ttl_ms())
            .to_owned();
        crate::lock::options::add_max_hold(e.opts.max_hold, &mut cmd);
        let sent = Instant::now();
        let answer = send_acquire(
            &e.client,
            cmd,
            ServerWait::Ms(wait.as_millis().max(1) as u64),
            &renew,
            None,
        )
        .await;
        let (term, acked) = match answer {
            Ok((Value::Nil, _)) => {
                backoff = Backoff::new_now(e.opts.retry);
                continue;
            }
            Ok((v, acked)) => match reply::token(&v) {
                Ok(t) => (t, acked),
                Err(err) => return stop(err),
            },
            Err(err) => {
                match classify(err) {
                    Failure::Transient { .. } => {
                        // LEADER.CAMPAIGN is idempotent: asking again after a lost reply is safe.
                        let d = backoff.next_delay_now(None).unwrap_or_else(|| {
                            backoff = Backoff::new_now(e.opts.retry);
                            e.opts.retry.max_delay
                        });
                        tokio::time::sleep(d).await;
                    }
                    Failure::Fatal(err) => return stop(err),
                }
                continue;
            }
        };
        if let (Some(a), Some(n)) = (renew.acks, acked) {
            if n < a.replicas {
                // Leading on this server, but a failover could lose it: step down, try again.
                tracing::warn!(
                    key = %e.key,
                    candidate = %e.candidate,
                    acked = n,
                    wanted = a.replicas,
                    "the election on {} reached {n} of {} replica(s); resigned, campaigning again",
                    e.key,
                    a.replicas
                );
                tx.send_modify(|l| l.unreplicated = Some((n, a.replicas)));
                let _ = resign(e).await;
                e.client.suspect_master().await;
                let d = backoff
                    .next_delay_now(None)
                    .unwrap_or(e.opts.retry.max_delay);
                tokio::time::sleep(d).await;
                continue;
            }
        }
        backoff = Backoff::new_now(e.opts.retry);
        let mut last_sent = sent;
        let left = timing
            .valid_until(sent)
            .saturating_duration_since(Instant::now());
        if left < timing.ttl() * 2 / 3 {
            let until = lease::confirm_deadline(&timing, sent, e.client.command_timeout());
            match renew_once(&e.client, &renew, until, e.opts.retry).await {
                Renewal::Renewed(at) => last_sent = at,
                // Leader, as granted; the watchdog renews up to the cap.
                Renewal::Capped { .. } => {}
                Renewal::Lost(_) => continue,
                Renewal::Unreplicated { acked } => {
                    let wanted = renew.acks.map_or(0, |a| a.replicas);
                    tx.send_modify(|l| l.unreplicated = Some((acked, wanted)));
                    let _ = resign(e).await;
                    continue;
                }
            }
        }
        let valid_until = timing.valid_until(last_sent);
        tx.send_replace(Leadership {
            is_leader: true,
            term: Some(term),
            valid_until: Some(valid_until),
            error: None,
            unreplicated: None,
        });
        let (ltx, mut lrx) = watch::channel(LeaseStatus::Held { valid_until });
        let dog = lease::watchdog(
            e.client.clone(),
            renew.clone(),
            timing,
            e.opts.retry,
            last_sent,
            ltx,
        );
        let forward = async {
            while lrx.changed().await.is_ok() {
                let s = *lrx.borrow_and_update();
                if let LeaseStatus::Held { valid_until } = s {
                    tx.send_modify(|l| l.valid_until = Some(valid_until));
                }
            }
            std::future::pending::<()>().await
        };
        let (reason, by_fence) = tokio::select! {
            biased;
            r = dog => (r, false),
            _ = forward => (LossReason::Failed, false),
            // The server said this term is over: no need to wait for the next renewal.
            _ = fenced_term(&mut fenced, term) => (LossReason::Revoked, true),
        };
        tx.send_modify(|l| {
            l.is_leader = false;
            l.valid_until = None;
        });
        if reason == LossReason::NotReplicated {
            // Whatever the server thinks, this candidate no longer acts as leader: let the
            // next one take over at once.
            let _ = resign(e).await;
        }
        if reason != LossReason::Revoked || by_fence {
            // The server was unreachable or failing (or said FENCED while a campaign could
            // answer the same term again): do not hammer it.
            if let Some(d) = backoff.next_delay_now(None) {
                tokio::time::sleep(d).await;
            }
        }
    }
}

/// `LEADER.RESIGN`, with retries for at most a ttl. Answers whether this candidate led.
pub(super) async fn resign(e: &LeaderElector) -> Result<bool> {
    let cmd = redis::cmd("LEADER.RESIGN")
        .arg(&e.key)
        .arg(&e.candidate)
        .to_owned();
    let policy = RetryPolicy {
        budget: e.opts.timing.ttl(),
        ..e.opts.retry
    };
    let v = e.client.query_retry(&cmd, None, policy).await?;
    Ok(reply::int(&v) == Some(1))
}

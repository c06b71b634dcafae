//! Leader election (`LEADER.*`) and observation of who leads.

use std::time::{Duration, Instant};

use futures_util::stream::StreamExt;
use redis::Value;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::acquire::ServerWait;
use crate::client::Client;
use crate::drive::send_acquire;
use crate::error::{CampaignError, Error, Result};
use crate::exec;
use crate::lease::{self, renew_once, Acks, LeaseTiming, Renewal, Renewer};
use crate::lease_status::{LeaseStatus, LossReason};
use crate::reply;
use crate::retry::{classify, Backoff, Failure, RetryPolicy};

/// Settings of a [`LeaderElector`].
///
/// ```
/// use std::time::Duration;
/// use redis_lease_client::{ElectionOptions, LeaseTiming};
/// let opts = ElectionOptions { timing: LeaseTiming::new(Duration::from_secs(2))?, ..Default::default() };
/// assert_eq!(opts.campaign_wait, Duration::from_secs(30));
/// # Ok::<(), redis_lease_client::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ElectionOptions {
    /// Lease ttl, renewal period, drift margin. Default: 10 s ttl.
    pub timing: LeaseTiming,
    /// Retry of transient failures.
    pub retry: RetryPolicy,
    /// How long one `LEADER.CAMPAIGN ... WAIT ms` request waits in the server before the
    /// candidate asks again (default 30 s). Bounds how long a silently dead connection can go
    /// unnoticed.
    pub campaign_wait: Duration,
    /// How many replicas must acknowledge each win and renewal before it counts (default 0:
    /// none), as [`LockOptions::replicas`](crate::LockOptions::replicas). A win too few
    /// acknowledged is resigned and campaigned for again; a leader whose renewals stop
    /// reaching enough replicas steps down when its last confirmed bound passes.
    pub replicas: u32,
    /// How long each `WAIT` for replicas may take (default 1 s).
    pub replica_timeout: Duration,
}

impl Default for ElectionOptions {
    fn default() -> Self {
        ElectionOptions {
            timing: LeaseTiming::default(),
            retry: RetryPolicy::default(),
            campaign_wait: Duration::from_secs(30),
            replicas: 0,
            replica_timeout: Duration::from_secs(1),
        }
    }
}

/// Who leads an election (the reply of `LEADER.CURRENT`).
///
/// ```
/// let l = redis_lease_client::LeaderInfo { candidate: "a".into(), term: 7, ttl: std::time::Duration::from_secs(1) };
/// assert_eq!(l.term, 7);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The leader's candidate id.
    pub candidate: String,
    /// Its term (fencing token of the election).
    pub term: u64,
    /// Lease time it had left when read.
    pub ttl: Duration,
}

impl LeaderInfo {
    fn parse(v: Value) -> Result<Option<LeaderInfo>> {
        if v == Value::Nil {
            return Ok(None);
        }
        let bad = || Error::Protocol("LEADER.CURRENT: expected [candidate, term, ttl]".into());
        let items = reply::array(v).ok_or_else(bad)?;
        if items.len() < 3 {
            return Err(bad());
        }
        Ok(Some(LeaderInfo {
            candidate: reply::text(&items[0]).ok_or_else(bad)?,
            term: reply::token(&items[1])?,
            ttl: Duration::from_millis(reply::int(&items[2]).unwrap_or(0).max(0) as u64),
        }))
    }
}

impl Client {
    /// A candidate for the election on `key`, with a fresh UUIDv4 id and default options.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// let election = client.elector("scheduler").start();
    /// # }
    /// ```
    pub fn elector(&self, key: impl Into<String>) -> LeaderElector {
        LeaderElector::new(self, key)
    }

    /// Who leads the election on `key` (`LEADER.CURRENT`, with retries of transient failures).
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
    /// match client.current_leader("jobs").await? {
    ///     Some(l) => println!("{} leads (term {})", l.candidate, l.term),
    ///     None => println!("nobody leads"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn current_leader(&self, key: &str) -> Result<Option<LeaderInfo>> {
        let cmd = redis::cmd("LEADER.CURRENT").arg(key).to_owned();
        LeaderInfo::parse(self.query_retry(&cmd, None, RetryPolicy::default()).await?)
    }

    /// Follows who leads the election on `key` ([`LeaderObserver`]).
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
    /// let mut obs = client.observe("jobs", Default::default()).await?;
    /// println!("{:?}", obs.changed().await?);
    /// # Ok(()) }
    /// ```
    pub async fn observe(&self, key: &str, opts: ObserverOptions) -> Result<LeaderObserver> {
        LeaderObserver::start_with(self, key, opts).await
    }
}

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
}

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
    client: Client,
    key: String,
    candidate: String,
    opts: ElectionOptions,
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
    };
    let wait = e.opts.campaign_wait.max(Duration::from_millis(1));
    let stop = |err: Error| {
        tx.send_modify(|l| l.error = Some(CampaignError::from_error(err)));
    };
    let mut backoff = Backoff::new_now(e.opts.retry);
    loop {
        let cmd = redis::cmd("LEADER.CAMPAIGN")
            .arg(&e.key)
            .arg(&e.candidate)
            .arg(timing.ttl_ms())
            .to_owned();
        let sent = Instant::now();
        let answer = send_acquire(
            &e.client,
            cmd,
            ServerWait::Ms(wait.as_millis().max(1) as u64),
            &renew,
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
                Renewal::Lost(_) => continue,
                Renewal::Unreplicated { .. } => {
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
async fn resign(e: &LeaderElector) -> Result<bool> {
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
pub struct Election {
    rx: watch::Receiver<Leadership>,
    /// A term `exec` found fenced, for the campaign to step down from at once.
    fenced: watch::Sender<Option<u64>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    elector: LeaderElector,
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
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let e = self.elector.clone();
            handle.spawn(async move {
                let _ = resign(&e).await;
            });
        }
    }
}

/// Settings of a [`LeaderObserver`].
///
/// ```
/// let o = redis_lease_client::ObserverOptions::default();
/// assert!(o.configure_notifications);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObserverOptions {
    /// Make sure the server publishes the needed keyspace notifications (`K` plus the module
    /// `d`, generic `g` and expiry `x` classes) by adding what is missing to
    /// `notify-keyspace-events` with `CONFIG SET` (default true). Turn it off where `CONFIG` is
    /// not allowed and configure the server yourself.
    pub configure_notifications: bool,
    /// Retry of transient failures (re-subscription after a lost connection retries forever,
    /// with this backoff).
    pub retry: RetryPolicy,
}

impl Default for ObserverOptions {
    fn default() -> Self {
        ObserverOptions {
            configure_notifications: true,
            retry: RetryPolicy::default(),
        }
    }
}

/// Follows who leads an election, without polling.
///
/// It subscribes to the key's keyspace channel (`__keyspace@<db>__:<key>`, on the node that owns
/// the key), then reads `LEADER.CURRENT`; every notification on the key (`leader.elect`,
/// `leader.resign`, `leader.lapse`, `expired`, `del`, ...) triggers a new read. After a lost
/// subscription it subscribes again and re-reads. Changes are reported when the
/// (candidate, term) pair differs from the last one reported; changes that happen faster than
/// a read can be coalesced (the latest state is always reported).
///
/// ```no_run
/// # async fn demo(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
/// use redis_lease_client::LeaderObserver;
/// let mut obs = LeaderObserver::start(&client, "scheduler").await?;
/// println!("now: {:?}", obs.current());
/// loop {
///     match obs.changed().await? {
///         Some(l) => println!("{} leads, term {}", l.candidate, l.term),
///         None => println!("nobody leads"),
///     }
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct LeaderObserver {
    rx: watch::Receiver<Option<LeaderInfo>>,
    task: JoinHandle<()>,
}

impl LeaderObserver {
    /// Starts observing `key` with default options.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
    /// let obs = redis_lease_client::LeaderObserver::start(&client, "jobs").await?;
    /// # Ok(()) }
    /// ```
    pub async fn start(client: &Client, key: &str) -> Result<LeaderObserver> {
        LeaderObserver::start_with(client, key, ObserverOptions::default()).await
    }

    /// Starts observing `key`.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
    /// use redis_lease_client::{LeaderObserver, ObserverOptions};
    /// let opts = ObserverOptions { configure_notifications: false, ..Default::default() };
    /// let obs = LeaderObserver::start_with(&client, "jobs", opts).await?;
    /// # Ok(()) }
    /// ```
    pub async fn start_with(
        client: &Client,
        key: &str,
        opts: ObserverOptions,
    ) -> Result<LeaderObserver> {
        if opts.configure_notifications {
            ensure_notifications(client, opts.retry).await?;
        }
        let events = client.key_events(key).await?;
        let first = client.current_leader(key).await?;
        let (tx, rx) = watch::channel(first);
        let task = tokio::spawn(observe(client.clone(), key.to_string(), opts, events, tx));
        Ok(LeaderObserver { rx, task })
    }

    /// The leader as last seen.
    ///
    /// ```no_run
    /// # fn f(o: &redis_lease_client::LeaderObserver) { println!("{:?}", o.current()); }
    /// ```
    pub fn current(&self) -> Option<LeaderInfo> {
        self.rx.borrow().clone()
    }

    /// A watch of the leader (it changes when the leader or term changes).
    ///
    /// ```no_run
    /// # fn f(o: &redis_lease_client::LeaderObserver) { let rx = o.watch(); }
    /// ```
    pub fn watch(&self) -> watch::Receiver<Option<LeaderInfo>> {
        self.rx.clone()
    }

    /// Waits for the next change of leader (or term) and answers the new state.
    ///
    /// ```no_run
    /// # async fn f(o: &mut redis_lease_client::LeaderObserver) -> redis_lease_client::Result<()> {
    /// let next = o.changed().await?;
    /// # Ok(()) }
    /// ```
    pub async fn changed(&mut self) -> Result<Option<LeaderInfo>> {
        self.rx
            .changed()
            .await
            .map_err(|_| Error::ObserverStopped)?;
        Ok(self.rx.borrow_and_update().clone())
    }
}

impl Drop for LeaderObserver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Adds the notification classes the observer needs to `notify-keyspace-events`.
/// (With retries of transient failures: just after a reconnection the first request may
/// fail, and an observer without the setting hears nothing.)
async fn ensure_notifications(conn: &Client, policy: RetryPolicy) -> Result<()> {
    let get = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .to_owned();
    let v = conn.query_retry(&get, None, policy).await?;
    let current = match v {
        Value::Map(pairs) => pairs.first().and_then(|(_, v)| reply::text(v)),
        Value::Array(items) => items.get(1).and_then(reply::text),
        _ => None,
    }
    .unwrap_or_default();
    let has = |c: char| current.contains(c) || ("g$lshzxetd".contains(c) && current.contains('A'));
    let missing: String = ['K', 'd', 'g', 'x']
        .into_iter()
        .filter(|c| !has(*c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let set = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg(format!("{current}{missing}"))
        .to_owned();
    conn.query_retry(&set, None, policy).await?;
    Ok(())
}

async fn observe(
    conn: Client,
    key: String,
    opts: ObserverOptions,
    mut events: futures_util::stream::BoxStream<'static, String>,
    tx: watch::Sender<Option<LeaderInfo>>,
) {
    let publish = |l: Option<LeaderInfo>| {
        tx.send_if_modified(|cur| {
            let same = match (&*cur, &l) {
                (None, None) => true,
                (Some(a), Some(b)) => a.candidate == b.candidate && a.term == b.term,
                _ => false,
            };
            if !same {
                *cur = l;
            }
            !same
        });
    };
    // Sentinel: the master changed, so the subscription must move (a demoted master keeps
    // quiet). Never for one server or a cluster.
    let mut moved = conn.master_changes();
    loop {
        loop {
            tokio::select! {
                event = events.next() => {
                    if event.is_none() {
                        break;
                    }
                    if let Ok(l) = conn.current_leader(&key).await {
                        publish(l);
                    }
                }
                () = master_moved(&mut moved) => break,
            }
        }
        // The subscription is gone: subscribe again, then re-read what was missed.
        let mut backoff = Backoff::new_now(opts.retry);
        loop {
            match conn.key_events(&key).await {
                Ok(s) => {
                    if opts.configure_notifications {
                        // A restarted server, or the new master after a failover, may not
                        // have the setting. Set where the subscription now is: after it.
                        let _ = ensure_notifications(&conn, opts.retry).await;
                    }
                    events = s;
                    break;
                }
                Err(_) => {
                    let d = backoff.next_delay_now(None).unwrap_or(opts.retry.max_delay);
                    tokio::time::sleep(d).await;
                }
            }
        }
        if let Ok(l) = conn.current_leader(&key).await {
            publish(l);
        }
    }
}

/// Resolves when requests moved to another master (never without Sentinel).
async fn master_moved(moved: &mut Option<watch::Receiver<u64>>) {
    match moved {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await
            }
        }
        None => std::future::pending().await,
    }
}

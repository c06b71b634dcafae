//! Distributed read-write locks (`RWLOCK.*`).

use std::fmt;
use std::time::{Duration, Instant};

use redis::{Cmd, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::conn::Connector;
use crate::lease::{self, renew_once, LeaseStatus, LeaseTiming, LossReason, Renewal};
use crate::reply;
use crate::retry::{classify, Backoff, Failure, RetryPolicy};
use crate::{Error, Result};

/// Read (shared) or write (exclusive).
///
/// ```
/// use redis_lease_client::LockMode;
/// assert_eq!(LockMode::Write.to_string(), "write");
/// assert_eq!("read".parse::<LockMode>().unwrap(), LockMode::Read);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockMode {
    /// Shared with other readers.
    Read,
    /// Exclusive.
    Write,
}

impl fmt::Display for LockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockMode::Read => "read",
            LockMode::Write => "write",
        })
    }
}

impl std::str::FromStr for LockMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "read" => Ok(LockMode::Read),
            "write" => Ok(LockMode::Write),
            other => Err(Error::Protocol(format!("unknown lock mode {other:?}"))),
        }
    }
}

/// How long an acquisition may wait for the lock.
///
/// ```
/// use std::time::Duration;
/// use redis_lease_client::Wait;
/// let w = Wait::For(Duration::from_secs(5));
/// assert_ne!(w, Wait::No);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Try once (no `WAIT`); transient failures are still retried within the retry budget.
    No,
    /// Wait in the server's queue for at most this long (`WAIT ms`); transient failures are
    /// retried until the same deadline.
    For(Duration),
    /// Wait without a time limit (`WAIT 0`).
    Forever,
}

/// Settings of a [`RwLock`].
///
/// ```
/// use std::time::Duration;
/// use redis_lease_client::{LockOptions, LeaseTiming};
/// let opts = LockOptions { timing: LeaseTiming::new(Duration::from_secs(5)), ..Default::default() };
/// assert_eq!(opts.timing.ttl, Duration::from_secs(5));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LockOptions {
    /// Lease ttl, renewal period, drift margin. Default: 10 s ttl.
    pub timing: LeaseTiming,
    /// Retry of transient failures.
    pub retry: RetryPolicy,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            timing: LeaseTiming::new(Duration::from_secs(10)),
            retry: RetryPolicy::default(),
        }
    }
}

/// One holder in [`LockInfo`].
///
/// ```
/// # fn f(h: &redis_lease_client::Holder) { println!("{} holds {} x{}", h.owner, h.mode, h.count); }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The owner id.
    pub owner: String,
    /// The mode of this hold.
    pub mode: LockMode,
    /// How many (reentrant) grants it counts.
    pub count: u64,
    /// Lease time left.
    pub ttl: Duration,
    /// The fencing token of this hold.
    pub token: u64,
}

/// The reply of `RWLOCK.INFO`.
///
/// ```no_run
/// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
/// let info = lock.info().await?;
/// println!("mode {:?}, {} holders, {} waiting, last token {}",
///          info.mode, info.holders.len(), info.waiters, info.token);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LockInfo {
    /// `None` when nobody holds the lock.
    pub mode: Option<LockMode>,
    /// The current holders.
    pub holders: Vec<Holder>,
    /// How many requests wait.
    pub waiters: u64,
    /// The last token handed out (0 if none yet).
    pub token: u64,
}

impl LockInfo {
    fn parse(v: Value) -> Result<LockInfo> {
        let bad = |what: &str| Error::Protocol(format!("RWLOCK.INFO: {what}"));
        let fields = reply::map(v).ok_or_else(|| bad("not a map"))?;
        let mut info = LockInfo::default();
        for (k, v) in fields {
            match k.as_str() {
                "mode" => {
                    let m = reply::text(&v).ok_or_else(|| bad("mode"))?;
                    info.mode = if m == "none" { None } else { Some(m.parse()?) };
                }
                "waiters" => info.waiters = reply::int(&v).unwrap_or(0).max(0) as u64,
                "token" => info.token = reply::int(&v).unwrap_or(0).max(0) as u64,
                "holders" => {
                    for h in reply::array(v).ok_or_else(|| bad("holders"))? {
                        let mut holder = Holder {
                            owner: String::new(),
                            mode: LockMode::Read,
                            count: 0,
                            ttl: Duration::ZERO,
                            token: 0,
                        };
                        for (hk, hv) in reply::map(h).ok_or_else(|| bad("holder"))? {
                            match hk.as_str() {
                                "owner" => holder.owner = reply::text(&hv).unwrap_or_default(),
                                "mode" => {
                                    holder.mode = reply::text(&hv)
                                        .ok_or_else(|| bad("holder mode"))?
                                        .parse()?
                                }
                                "count" => {
                                    holder.count = reply::int(&hv).unwrap_or(1).max(0) as u64
                                }
                                "ttl" => {
                                    holder.ttl = Duration::from_millis(
                                        reply::int(&hv).unwrap_or(0).max(0) as u64,
                                    )
                                }
                                "token" => {
                                    holder.token = reply::int(&hv).unwrap_or(0).max(0) as u64
                                }
                                _ => {}
                            }
                        }
                        info.holders.push(holder);
                    }
                }
                _ => {}
            }
        }
        Ok(info)
    }

    /// The hold of `owner` in `mode`, if any.
    ///
    /// ```
    /// let info = redis_lease_client::LockInfo::default();
    /// assert!(info.hold_of("me", redis_lease_client::LockMode::Read).is_none());
    /// ```
    pub fn hold_of(&self, owner: &str, mode: LockMode) -> Option<&Holder> {
        self.holders
            .iter()
            .find(|h| h.owner == owner && h.mode == mode)
    }
}

/// A distributed read-write lock on one key.
///
/// Every acquisition uses a fresh UUIDv4 owner id, so guards of one `RwLock` (shared between
/// tasks) exclude each other like guards of different processes. With
/// [`RwLock::with_owner`] all acquisitions use the caller's id, and the server's reentrancy
/// applies (each grant needs its own release).
///
/// Acquisition is one request that waits inside the server (`WAIT`), on a connection of its
/// own: no polling. The client retries only what the server cannot handle: transient failures,
/// with exponential backoff and full jitter, bounded by the caller's deadline.
///
/// **Retries and lost replies.** If a reply is lost (connection reset, timeout), the request may
/// have been granted. Before asking again the client reads `RWLOCK.INFO`: if the owner already
/// holds the lock in that mode, it *adopts* that hold (its token from `INFO`) instead of asking
/// for a second one. A hold that a still-in-flight request adds after that check is not leaked
/// either: with a generated owner, releasing a guard whose acquisition saw an unknown outcome
/// (or that went through a cluster connection, whose client may resend a request by itself)
/// sends `RWLOCK.UNLOCK` until the server answers 0, which releases every hold of that owner;
/// otherwise a release is one `RWLOCK.UNLOCK`. With a caller-chosen owner the client
/// compares the hold count with the one read before the first attempt and releases exactly one
/// hold per guard (a hold duplicated by such a race then lapses with its lease).
///
/// ```no_run
/// # async fn demo() -> redis_lease_client::Result<()> {
/// use std::time::Duration;
/// use redis_lease_client::{Connector, RwLock};
///
/// let conn = Connector::open("redis://127.0.0.1/").await?;
/// let lock = RwLock::new(&conn, "inventory").with_ttl(Duration::from_secs(5));
/// let guard = lock.write().await?;
/// println!("fencing token {}", guard.token());
/// // ... critical section; pass guard.token() along with every write it protects ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    conn: Connector,
    key: String,
    owner: Option<String>,
    opts: LockOptions,
}

impl RwLock {
    /// A lock on `key`, with default options (10 s ttl).
    ///
    /// ```no_run
    /// # async fn demo(conn: redis_lease_client::Connector) {
    /// let lock = redis_lease_client::RwLock::new(&conn, "my-lock");
    /// # }
    /// ```
    pub fn new(conn: &Connector, key: impl Into<String>) -> RwLock {
        RwLock {
            conn: conn.clone(),
            key: key.into(),
            owner: None,
            opts: LockOptions::default(),
        }
    }

    /// Sets the lease ttl (and the default timing derived from it).
    ///
    /// ```no_run
    /// # async fn demo(conn: redis_lease_client::Connector) {
    /// let lock = redis_lease_client::RwLock::new(&conn, "k").with_ttl(std::time::Duration::from_secs(2));
    /// # }
    /// ```
    pub fn with_ttl(mut self, ttl: Duration) -> RwLock {
        self.opts.timing = LeaseTiming::new(ttl);
        self
    }

    /// Sets all options.
    ///
    /// ```no_run
    /// # async fn demo(conn: redis_lease_client::Connector) {
    /// use redis_lease_client::{LockOptions, RwLock};
    /// let lock = RwLock::new(&conn, "k").with_options(LockOptions::default());
    /// # }
    /// ```
    pub fn with_options(mut self, opts: LockOptions) -> RwLock {
        self.opts = opts;
        self
    }

    /// Uses `owner` for every acquisition instead of a fresh UUIDv4 (reentrant holds).
    ///
    /// ```no_run
    /// # async fn demo(conn: redis_lease_client::Connector) {
    /// let lock = redis_lease_client::RwLock::new(&conn, "k").with_owner("worker-7");
    /// # }
    /// ```
    pub fn with_owner(mut self, owner: impl Into<String>) -> RwLock {
        self.owner = Some(owner.into());
        self
    }

    /// The key.
    ///
    /// ```no_run
    /// # async fn demo(conn: redis_lease_client::Connector) {
    /// assert_eq!(redis_lease_client::RwLock::new(&conn, "k").key(), "k");
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The options.
    ///
    /// ```no_run
    /// # async fn demo(conn: redis_lease_client::Connector) {
    /// let ttl = redis_lease_client::RwLock::new(&conn, "k").options().timing.ttl;
    /// # }
    /// ```
    pub fn options(&self) -> &LockOptions {
        &self.opts
    }

    /// Takes a read lock, waiting as long as it takes.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// let guard = lock.read().await?;
    /// # Ok(()) }
    /// ```
    pub async fn read(&self) -> Result<LockGuard> {
        self.acquire_forever(LockMode::Read).await
    }

    /// Takes the write lock, waiting as long as it takes.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// let guard = lock.write().await?;
    /// # Ok(()) }
    /// ```
    pub async fn write(&self) -> Result<LockGuard> {
        self.acquire_forever(LockMode::Write).await
    }

    /// Takes a read lock if it is free now.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// if let Some(guard) = lock.try_read().await? { /* ... */ }
    /// # Ok(()) }
    /// ```
    pub async fn try_read(&self) -> Result<Option<LockGuard>> {
        self.acquire(LockMode::Read, Wait::No).await
    }

    /// Takes the write lock if it is free now.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// match lock.try_write().await? {
    ///     Some(guard) => println!("got it: {}", guard.token()),
    ///     None => println!("busy"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_write(&self) -> Result<Option<LockGuard>> {
        self.acquire(LockMode::Write, Wait::No).await
    }

    /// Takes a read lock, waiting at most `wait`.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// let guard = lock.read_timeout(std::time::Duration::from_secs(3)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn read_timeout(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(LockMode::Read, Wait::For(wait)).await
    }

    /// Takes the write lock, waiting at most `wait`.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// let guard = lock.write_timeout(std::time::Duration::from_secs(3)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn write_timeout(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(LockMode::Write, Wait::For(wait)).await
    }

    async fn acquire_forever(&self, mode: LockMode) -> Result<LockGuard> {
        loop {
            if let Some(g) = self.acquire(mode, Wait::Forever).await? {
                return Ok(g);
            }
        }
    }

    /// Reads `RWLOCK.INFO` (with retries of transient failures).
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// let info = lock.info().await?;
    /// for h in &info.holders { println!("{} {} token {}", h.owner, h.mode, h.token); }
    /// # Ok(()) }
    /// ```
    pub async fn info(&self) -> Result<LockInfo> {
        let cmd = redis::cmd("RWLOCK.INFO").arg(&self.key).to_owned();
        LockInfo::parse(query_retry(&self.conn, &cmd, None, self.opts.retry).await?)
    }

    /// Acquires in `mode`, waiting as `wait` says. `Ok(None)`: not granted in time.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// use redis_lease_client::{LockMode, Wait};
    /// let guard = lock.acquire(LockMode::Write, Wait::For(std::time::Duration::from_secs(1))).await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, mode: LockMode, wait: Wait) -> Result<Option<LockGuard>> {
        self.opts.timing.check()?;
        let generated = self.owner.is_none();
        let owner = self
            .owner
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let timing = self.opts.timing;
        let deadline = match wait {
            Wait::For(d) => Some(Instant::now() + d),
            _ => None,
        };
        // Holds of a caller-chosen owner that existed before (reentrancy), so that an uncertain
        // failure can tell a grant of ours from an older one.
        let baseline = if generated {
            0
        } else {
            self.info()
                .await?
                .hold_of(&owner, mode)
                .map_or(0, |h| h.count)
        };
        let mut cleanup = InflightCleanup::new(&self.conn, &self.key, &owner, generated);
        let mut backoff = Backoff::new(self.opts.retry);
        // When the first request whose outcome is unknown was sent.
        let mut uncertain_since: Option<Instant> = None;
        // Whether any request's outcome was unknown (only then can a surplus hold exist).
        let mut had_uncertain = false;
        // Set when out of time with an unknown outcome: the error to report unless the final
        // RWLOCK.INFO check finds a hold to adopt.
        let mut last_error: Option<redis::RedisError> = None;
        // A grant (by a request sent at `$since` or later) becomes a guard, unless its lease
        // could not be confirmed: lapsed already (ask again while the deadline allows), or
        // unknown (check RWLOCK.INFO, as after a lost reply).
        macro_rules! on_grant {
            ($token:expr, $since:expr) => {{
                let sweep = generated && (had_uncertain || self.conn.is_cluster());
                match self
                    .granted(mode, owner.clone(), sweep, $token, $since, &mut cleanup)
                    .await
                {
                    Ok(g) => return Ok(Some(g)),
                    Err(LossReason::Revoked) => {
                        uncertain_since = None;
                        if wait == Wait::No || deadline.is_some_and(|d| Instant::now() >= d) {
                            cleanup.disarm();
                            return Ok(None);
                        }
                        continue;
                    }
                    Err(reason) => {
                        had_uncertain = true;
                        uncertain_since = Some($since);
                        match backoff.next_delay(deadline) {
                            Some(d) => {
                                tokio::time::sleep(d).await;
                                continue;
                            }
                            None => return Err(Error::LeaseLost(reason)),
                        }
                    }
                }
            }};
        }
        loop {
            if let Some(since) = uncertain_since {
                let info_cmd = redis::cmd("RWLOCK.INFO").arg(&self.key).to_owned();
                match self
                    .conn
                    .query_within(&info_cmd, self.conn.command_timeout())
                    .await
                {
                    Ok(v) => {
                        let info = LockInfo::parse(v)?;
                        match info.hold_of(&owner, mode) {
                            Some(h) if h.count > baseline => {
                                let token = h.token;
                                on_grant!(token, since);
                            }
                            _ => uncertain_since = None,
                        }
                        if let Some(err) = last_error.take() {
                            // The deadline has passed and nothing was granted after all.
                            cleanup.disarm();
                            return Err(backoff.give_up(err));
                        }
                    }
                    Err(e) => match classify(e) {
                        Failure::Transient { err, .. } => {
                            if last_error.is_some() {
                                return Err(backoff.give_up(err));
                            }
                            match backoff.next_delay(deadline) {
                                Some(d) => {
                                    tokio::time::sleep(d).await;
                                    continue;
                                }
                                None => return Err(backoff.give_up(err)),
                            }
                        }
                        Failure::Fatal(e) => return Err(e),
                    },
                }
            }
            let mut cmd = redis::cmd(match mode {
                LockMode::Read => "RWLOCK.RLOCK",
                LockMode::Write => "RWLOCK.WLOCK",
            });
            cmd.arg(&self.key).arg(&owner).arg(timing.ttl_ms());
            let sent = Instant::now();
            let margin = self.conn.command_timeout();
            let result = match (wait, deadline) {
                (Wait::Forever, _) => {
                    cmd.arg("WAIT").arg(0);
                    cleanup.arm();
                    self.conn.query_dedicated(&cmd, None).await
                }
                (Wait::For(_), Some(dl)) if dl > sent + Duration::from_millis(1) => {
                    let left = dl - sent;
                    cmd.arg("WAIT").arg(left.as_millis() as u64);
                    cleanup.arm();
                    self.conn.query_dedicated(&cmd, Some(left + margin)).await
                }
                _ => {
                    cleanup.arm();
                    self.conn.query_within(&cmd, margin).await
                }
            };
            match result {
                Ok(Value::Nil) => {
                    cleanup.disarm();
                    return Ok(None);
                }
                Ok(v) => {
                    let token = reply::token(&v)?;
                    let since = uncertain_since.unwrap_or(sent);
                    on_grant!(token, since);
                }
                Err(e) => match classify(e) {
                    Failure::Transient { uncertain, err } => {
                        if uncertain {
                            had_uncertain = true;
                            uncertain_since.get_or_insert(sent);
                        } else {
                            cleanup.disarm_if_nothing_uncertain(uncertain_since.is_none());
                        }
                        match backoff.next_delay(deadline) {
                            Some(d) => tokio::time::sleep(d).await,
                            // Out of time; but a request whose reply was lost may have been
                            // granted: one last look at RWLOCK.INFO adopts such a hold.
                            None if uncertain_since.is_some() => last_error = Some(err),
                            None => return Err(backoff.give_up(err)),
                        }
                    }
                    Failure::Fatal(e) => {
                        cleanup.disarm_if_nothing_uncertain(uncertain_since.is_none());
                        return Err(e);
                    }
                },
            }
        }
    }

    /// Turns a grant (made by a request sent at `sent` or later) into a guard with a running
    /// watchdog; renews at once if the wait used up much of the lease.
    async fn granted(
        &self,
        mode: LockMode,
        owner: String,
        sweep: bool,
        token: u64,
        sent: Instant,
        cleanup: &mut InflightCleanup,
    ) -> std::result::Result<LockGuard, LossReason> {
        let timing = self.opts.timing;
        let renew_cmd = redis::cmd("RWLOCK.RENEW")
            .arg(&self.key)
            .arg(&owner)
            .arg(timing.ttl_ms())
            .to_owned();
        let mut last_sent = sent;
        let left = timing
            .valid_until(sent)
            .saturating_duration_since(Instant::now());
        if left < timing.ttl * 2 / 3 {
            // The server's answer is authoritative even when the local bound has passed: a
            // renewal that finds the hold proves it from its own send time on.
            let until = lease::confirm_deadline(&timing, sent, self.conn.command_timeout());
            match renew_once(&self.conn, &renew_cmd, until, self.opts.retry).await {
                Renewal::Renewed(at) => last_sent = at,
                // Leave the cleanup armed: it releases whatever may be left.
                Renewal::Lost(reason) => return Err(reason),
            }
        }
        cleanup.disarm();
        let (tx, rx) = watch::channel(LeaseStatus::Held {
            valid_until: timing.valid_until(last_sent),
        });
        let watchdog = tokio::spawn(lease::watchdog(
            self.conn.clone(),
            renew_cmd,
            timing,
            self.opts.retry,
            last_sent,
            tx,
        ));
        Ok(LockGuard {
            conn: self.conn.clone(),
            key: self.key.clone(),
            owner,
            sweep,
            mode,
            token,
            status: rx,
            watchdog: Some(watchdog),
            retry: self.opts.retry,
            ttl: timing.ttl,
        })
    }
}

/// Releases what an interrupted acquisition may have left behind (a request cancelled or
/// failed while its outcome was unknown), in the background, if the owner is ours alone.
struct InflightCleanup {
    conn: Connector,
    key: String,
    owner: String,
    generated: bool,
    armed: bool,
}

impl InflightCleanup {
    fn new(conn: &Connector, key: &str, owner: &str, generated: bool) -> Self {
        InflightCleanup {
            conn: conn.clone(),
            key: key.to_string(),
            owner: owner.to_string(),
            generated,
            armed: false,
        }
    }
    fn arm(&mut self) {
        self.armed = self.generated;
    }
    fn disarm(&mut self) {
        self.armed = false;
    }
    fn disarm_if_nothing_uncertain(&mut self, nothing_uncertain: bool) {
        if nothing_uncertain {
            self.armed = false;
        }
    }
}

impl Drop for InflightCleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let conn = self.conn.clone();
            let key = std::mem::take(&mut self.key);
            let owner = std::mem::take(&mut self.owner);
            handle.spawn(async move {
                let _ = unlock_all(&conn, &key, &owner, RetryPolicy::default(), None).await;
            });
        }
    }
}

/// Sends `RWLOCK.UNLOCK` until the server answers 0 (at most 64 times), or once if `once`.
/// Returns how many holds were released.
async fn unlock_all(
    conn: &Connector,
    key: &str,
    owner: &str,
    policy: RetryPolicy,
    once: Option<()>,
) -> Result<u64> {
    let cmd = redis::cmd("RWLOCK.UNLOCK").arg(key).arg(owner).to_owned();
    let mut released = 0;
    for _ in 0..64 {
        let v = query_retry(conn, &cmd, None, policy).await?;
        match reply::int(&v) {
            Some(1) => released += 1,
            Some(0) => break,
            _ => return Err(Error::Protocol(format!("RWLOCK.UNLOCK answered {v:?}"))),
        }
        if once.is_some() {
            break;
        }
    }
    Ok(released)
}

/// A short request with retries of transient failures until `deadline` (or the budget).
pub(crate) async fn query_retry(
    conn: &Connector,
    cmd: &Cmd,
    deadline: Option<Instant>,
    policy: RetryPolicy,
) -> Result<Value> {
    let mut backoff = Backoff::new(policy);
    loop {
        match conn.query_within(cmd, conn.command_timeout()).await {
            Ok(v) => return Ok(v),
            Err(e) => match classify(e) {
                Failure::Transient { err, .. } => match backoff.next_delay(deadline) {
                    Some(d) => tokio::time::sleep(d).await,
                    None => return Err(backoff.give_up(err)),
                },
                Failure::Fatal(e) => return Err(e),
            },
        }
    }
}

/// A held lock. Its watchdog renews the lease (every third of the ttl by default) for as long as
/// the guard lives.
///
/// Release it with [`LockGuard::release`]. Dropping it releases it too, as a best effort: the
/// `RWLOCK.UNLOCK` is spawned on the current tokio runtime (if there is none, the lease simply
/// lapses after its ttl).
///
/// Watch for loss with [`LockGuard::lost`] or [`LockGuard::status_watch`]: the guard signals
/// it as soon as a renewal fails definitively, or when the local validity bound passes (the
/// send time of the last successful grant or renewal plus the ttl minus a drift margin),
/// which is before the server could grant the lock to anyone else.
///
/// ```no_run
/// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
/// let guard = lock.write().await?;
/// tokio::select! {
///     reason = guard.lost() => eprintln!("lost the lock: {reason}"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(30)) => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct LockGuard {
    conn: Connector,
    key: String,
    owner: String,
    /// Release with `UNLOCK` until the server answers 0 (the owner is ours alone and a
    /// surplus hold may exist: an earlier request's outcome was unknown, or the cluster
    /// client may have resent a request on its own).
    sweep: bool,
    mode: LockMode,
    token: u64,
    status: watch::Receiver<LeaseStatus>,
    watchdog: Option<JoinHandle<LossReason>>,
    retry: RetryPolicy,
    ttl: Duration,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key)
            .field("owner", &self.owner)
            .field("mode", &self.mode)
            .field("token", &self.token)
            .field("status", &*self.status.borrow())
            .finish()
    }
}

impl LockGuard {
    /// The fencing token of this hold.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::LockGuard) { let t: u64 = g.token(); }
    /// ```
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The mode held.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::LockGuard) { println!("{}", g.mode()); }
    /// ```
    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// The owner id this hold is registered under.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::LockGuard) { println!("{}", g.owner()); }
    /// ```
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The key.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::LockGuard) { println!("{}", g.key()); }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The current lease status (a time-checked view: a `Held` whose bound has passed is
    /// reported as lost).
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::LockGuard) { if !g.status().is_held() { /* stop */ } }
    /// ```
    pub fn status(&self) -> LeaseStatus {
        match *self.status.borrow() {
            LeaseStatus::Held { valid_until } if valid_until <= Instant::now() => {
                LeaseStatus::Lost(LossReason::Expired)
            }
            s => s,
        }
    }

    /// Whether the lease is certainly still valid right now.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::LockGuard) { assert!(g.is_held()); }
    /// ```
    pub fn is_held(&self) -> bool {
        self.status().is_held()
    }

    /// The local instant until which the lease is certainly valid, if held.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::LockGuard) { println!("{:?}", g.valid_until()); }
    /// ```
    pub fn valid_until(&self) -> Option<Instant> {
        match self.status() {
            LeaseStatus::Held { valid_until } => Some(valid_until),
            _ => None,
        }
    }

    /// `Ok(())` while the lease is held, [`Error::LeaseLost`] after: a check to make before each
    /// step of the protected work.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::LockGuard) -> redis_lease_client::Result<()> {
    /// g.check()?;
    /// # Ok(()) }
    /// ```
    pub fn check(&self) -> Result<()> {
        match self.status() {
            LeaseStatus::Held { .. } => Ok(()),
            LeaseStatus::Lost(r) => Err(Error::LeaseLost(r)),
            LeaseStatus::Released => Err(Error::LeaseLost(LossReason::Revoked)),
        }
    }

    /// A watch of the lease status (each renewal publishes the new bound; the loss publishes
    /// `Lost`).
    ///
    /// ```no_run
    /// # async fn f(g: &redis_lease_client::LockGuard) {
    /// let mut rx = g.status_watch();
    /// while rx.changed().await.is_ok() {
    ///     if !rx.borrow().is_held() { break; }
    /// }
    /// # }
    /// ```
    pub fn status_watch(&self) -> watch::Receiver<LeaseStatus> {
        self.status.clone()
    }

    /// Resolves when the lease is lost (never, while it is renewed).
    ///
    /// ```no_run
    /// # async fn f(g: &redis_lease_client::LockGuard) {
    /// let reason = g.lost().await;
    /// # }
    /// ```
    pub fn lost(&self) -> impl std::future::Future<Output = LossReason> + Send + 'static {
        let mut rx = self.status.clone();
        async move {
            match lease::wait_lost(&mut rx).await {
                LeaseStatus::Lost(r) => r,
                _ => LossReason::Revoked,
            }
        }
    }

    /// Stops renewing and releases the hold. Answers whether the server still counted it
    /// (false if the lease had already lapsed).
    ///
    /// ```no_run
    /// # async fn f(g: redis_lease_client::LockGuard) -> redis_lease_client::Result<()> {
    /// let was_held = g.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<bool> {
        if let Some(w) = self.watchdog.take() {
            w.abort();
        }
        let n = unlock_all(
            &self.conn,
            &self.key,
            &self.owner,
            RetryPolicy {
                budget: self.ttl,
                ..self.retry
            },
            if self.sweep { None } else { Some(()) },
        )
        .await?;
        Ok(n > 0)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(w) = self.watchdog.take() else {
            return;
        };
        w.abort();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let conn = self.conn.clone();
            let key = std::mem::take(&mut self.key);
            let owner = std::mem::take(&mut self.owner);
            let once = if self.sweep { None } else { Some(()) };
            let policy = RetryPolicy {
                budget: self.ttl,
                ..self.retry
            };
            handle.spawn(async move {
                let _ = unlock_all(&conn, &key, &owner, policy, once).await;
            });
        }
    }
}

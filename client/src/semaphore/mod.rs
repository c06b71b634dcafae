//! Counting semaphores (`SEMAPHORE.*`): the semaphore, which hands out [`SemaphoreGuard`]s.

pub(crate) mod guard;
pub(crate) mod info;
pub(crate) mod key;

use std::fmt;
use std::time::Duration;

use crate::acquire::Wait;
use crate::connection::Client;
use crate::error::{Error, InvalidArgument, Result};
use crate::lease::held::Lease;
use crate::lease::release::{InflightCleanup, Release};
use crate::lease::LeaseTiming;
use crate::lock::options::LockOptions;
use crate::semaphore::guard::SemaphoreGuard;
use crate::semaphore::info::SemaphoreInfo;
use crate::semaphore::key::SemaphoreKey;

/// The largest limit the module accepts.
const MAX_LIMIT: u32 = (1 << 31) - 1;

/// A counting semaphore on one key: at most `limit` permits are held at once, each
/// acquisition taking `permits` of them as **one hold with its own lease** and fencing token.
/// Waiters are served strictly in arrival order inside the server: a large request at the head
/// of the queue is not overtaken by smaller ones behind it, so it never starves.
///
/// Options are a lock's ([`LockOptions`]: ttl, retries, replica acknowledgement), and so is
/// everything around a grant: every acquisition uses a fresh UUIDv4 owner (or
/// [`Semaphore::with_owner`]'s), the [`SemaphoreGuard`]'s watchdog renews the lease every third
/// of the ttl and signals its loss before the server could hand the permits to anyone else,
/// transient failures are retried with backoff and full jitter, and after a lost reply the
/// owner's hold is **adopted** from `SEMAPHORE.INFO` rather than asked for again.
///
/// The server takes the limit from the request that creates the key; while the key exists, a
/// request naming another limit fails with [`Error::LimitMismatch`]. An owner holds at most one
/// hold: asking again with another number of permits fails with [`Error::PermitsMismatch`].
///
/// ```no_run
/// # async fn demo() -> redis_lease_client::Result<()> {
/// use std::time::Duration;
/// use redis_lease_client::Client;
///
/// let client = Client::open("redis://127.0.0.1/").await?;
/// let api = client.semaphore("api-quota", 5).with_ttl(Duration::from_secs(10))?;
/// let guard = api.take(2).await?;          // 2 of the 5 permits
/// println!("token {}", guard.token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    sem: SemaphoreKey,
    owner: Option<String>,
}

// Shown flat, as a semaphore's fields: the key, limit and options it shares with its guards
// are a detail.
impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("client", &self.sem.client)
            .field("key", &self.sem.key)
            .field("limit", &self.sem.limit)
            .field("owner", &self.owner)
            .field("opts", &self.sem.opts)
            .finish()
    }
}

impl Client {
    /// A semaphore of `limit` permits on `key`, with default options (10 s ttl).
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// let sem = client.semaphore("migrations", 2);
    /// # }
    /// ```
    pub fn semaphore(&self, key: impl Into<String>, limit: u32) -> Semaphore {
        Semaphore::new(self, key, limit)
    }
}

impl Semaphore {
    /// A semaphore of `limit` permits on `key`. Same as [`Client::semaphore`]. (The limit is
    /// checked, 1 to 2^31-1, when acquiring.)
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// let sem = redis_lease_client::Semaphore::new(&client, "migrations", 2);
    /// # }
    /// ```
    pub fn new(client: &Client, key: impl Into<String>, limit: u32) -> Semaphore {
        Semaphore {
            sem: SemaphoreKey {
                client: client.clone(),
                key: key.into(),
                limit,
                opts: LockOptions::default(),
            },
            owner: None,
        }
    }

    /// Sets the lease ttl (and the default timing derived from it). Fails for a ttl too short
    /// to renew (see [`LeaseTiming::new`]).
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
    /// let sem = client.semaphore("k", 3).with_ttl(std::time::Duration::from_secs(2))?;
    /// # Ok(()) }
    /// ```
    pub fn with_ttl(mut self, ttl: Duration) -> Result<Semaphore> {
        self.sem.opts.timing = LeaseTiming::new(ttl)?;
        Ok(self)
    }

    /// Sets how many replicas must acknowledge each grant and renewal
    /// ([`LockOptions::replicas`]).
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// let sem = client.semaphore("k", 3).with_replicas(1);
    /// # }
    /// ```
    pub fn with_replicas(mut self, replicas: u32) -> Semaphore {
        self.sem.opts.replicas = replicas;
        self
    }

    /// Sets all options.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// let sem = client.semaphore("k", 3).with_options(Default::default());
    /// # }
    /// ```
    pub fn with_options(mut self, opts: LockOptions) -> Semaphore {
        self.sem.opts = opts;
        self
    }

    /// Uses `owner` for every acquisition instead of a fresh UUIDv4. The server keeps one
    /// hold per owner: a second acquisition with the same permits answers the same hold.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// let sem = client.semaphore("k", 3).with_owner("worker-7");
    /// # }
    /// ```
    pub fn with_owner(mut self, owner: impl Into<String>) -> Semaphore {
        self.owner = Some(owner.into());
        self
    }

    /// The key.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// assert_eq!(client.semaphore("k", 3).key(), "k");
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.sem.key
    }

    /// The limit this semaphore asks for.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// assert_eq!(client.semaphore("k", 3).limit(), 3);
    /// # }
    /// ```
    pub fn limit(&self) -> u32 {
        self.sem.limit
    }

    /// The options.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// let ttl = client.semaphore("k", 3).options().timing.ttl();
    /// # }
    /// ```
    pub fn options(&self) -> &LockOptions {
        &self.sem.opts
    }

    /// Takes `permits` permits, waiting as long as it takes (as [`RwLock::write`](crate::RwLock::write)
    /// does for a lock).
    ///
    /// ```no_run
    /// # async fn demo(sem: redis_lease_client::Semaphore) -> redis_lease_client::Result<()> {
    /// let guard = sem.take(1).await?;
    /// # Ok(()) }
    /// ```
    pub async fn take(&self, permits: u32) -> Result<SemaphoreGuard> {
        loop {
            if let Some(g) = self.acquire(permits, Wait::Forever).await? {
                return Ok(g);
            }
        }
    }

    /// Takes `permits` permits if they are free now and nobody waits before this request.
    ///
    /// ```no_run
    /// # async fn demo(sem: redis_lease_client::Semaphore) -> redis_lease_client::Result<()> {
    /// match sem.try_acquire(1).await? {
    ///     Some(g) => println!("token {}", g.token()),
    ///     None => println!("all permits are taken"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, permits: u32) -> Result<Option<SemaphoreGuard>> {
        self.acquire(permits, Wait::No).await
    }

    /// Takes `permits` permits, waiting at most `wait`. `Ok(None)`: not granted in time.
    ///
    /// ```no_run
    /// # async fn demo(sem: redis_lease_client::Semaphore) -> redis_lease_client::Result<()> {
    /// let g = sem.acquire_timeout(2, std::time::Duration::from_secs(3)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_timeout(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<SemaphoreGuard>> {
        self.acquire(permits, Wait::For(wait)).await
    }

    /// Takes `permits` permits, waiting as `wait` says (as [`RwLock::acquire`](crate::RwLock::acquire)
    /// takes its mode and wait). `Ok(None)`: not granted in time.
    ///
    /// ```no_run
    /// # async fn demo(sem: redis_lease_client::Semaphore) -> redis_lease_client::Result<()> {
    /// use redis_lease_client::Wait;
    /// let g = sem.acquire(1, Wait::For(std::time::Duration::from_secs(1))).await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, permits: u32, wait: Wait) -> Result<Option<SemaphoreGuard>> {
        self.acquire_inner(permits, wait).await
    }

    /// The earlier name of [`Semaphore::acquire`], kept for code written against it.
    #[doc(hidden)]
    pub async fn acquire_with(&self, permits: u32, wait: Wait) -> Result<Option<SemaphoreGuard>> {
        self.acquire_inner(permits, wait).await
    }

    async fn acquire_inner(&self, permits: u32, wait: Wait) -> Result<Option<SemaphoreGuard>> {
        let s = &self.sem;
        check(s.limit, permits)?;
        let generated = self.owner.is_none();
        let owner = self
            .owner
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        // One SEMAPHORE.RELEASE gives back every permit of the owner.
        let mut cleanup = InflightCleanup::new(&s.client, s.release_cmd(&owner), Release::Times(1));
        let held = s
            .drive(&owner, permits, generated, wait, &mut cleanup)
            .await
            .map_err(|e| typed(e, s.limit, permits))?;
        Ok(held.map(|h| {
            let lease = Lease::start(
                &s.client,
                s.renewer(&owner),
                s.opts.timing,
                s.opts.retry,
                h.last_sent,
            );
            SemaphoreGuard::new(s.clone(), owner, permits, h.token, lease)
        }))
    }

    /// Reads `SEMAPHORE.INFO` (with retries of transient failures).
    ///
    /// ```no_run
    /// # async fn demo(sem: redis_lease_client::Semaphore) -> redis_lease_client::Result<()> {
    /// let info = sem.info().await?;
    /// for h in &info.holders { println!("{} holds {} (token {})", h.owner, h.permits, h.token); }
    /// # Ok(()) }
    /// ```
    pub async fn info(&self) -> Result<SemaphoreInfo> {
        let s = &self.sem;
        let cmd = redis::cmd("SEMAPHORE.INFO").arg(&s.key).to_owned();
        SemaphoreInfo::parse(s.client.query_retry(&cmd, None, s.opts.retry).await?)
    }
}

/// The limit and permits, checked before anything is sent.
fn check(limit: u32, permits: u32) -> Result<()> {
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(InvalidArgument::Limit(limit).into());
    }
    if !(1..=limit).contains(&permits) {
        return Err(InvalidArgument::Permits { permits, limit }.into());
    }
    Ok(())
}

/// The number after `prefix` in `text` (`"this semaphore's limit is 3; ..."` -> 3).
fn number_after(text: &str, prefix: &str) -> Option<u32> {
    let rest = text.split_once(prefix)?.1;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The module's refusals of a limit or a number of permits, as typed errors.
fn typed(e: Error, limit: u32, permits: u32) -> Error {
    let Error::Redis(r) = &e else { return e };
    let text = r.detail().unwrap_or_default();
    // The module's codes; an older module said `ERR` with the same words.
    let legacy = r.code() == Some("ERR");
    let is =
        |code: &str, words: &str| r.code() == Some(code) || (legacy && text.starts_with(words));
    if is("LIMIT", "this semaphore's limit is ") {
        if let Some(n) = number_after(text, "this semaphore's limit is ") {
            return Error::LimitMismatch {
                limit: n,
                asked: limit,
            };
        }
    }
    if is("PERMITS", "this owner holds ") {
        if let Some(n) = number_after(text, "this owner holds ") {
            return Error::PermitsMismatch {
                held: n,
                asked: permits,
            };
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::tests::reply_error;

    #[test]
    fn limit_and_permits_are_checked_before_sending() {
        assert!(check(3, 1).is_ok() && check(3, 3).is_ok() && check(MAX_LIMIT, 1).is_ok());
        assert!(matches!(
            check(0, 1),
            Err(Error::InvalidArgument(InvalidArgument::Limit(0)))
        ));
        assert!(matches!(
            check(MAX_LIMIT + 1, 1),
            Err(Error::InvalidArgument(InvalidArgument::Limit(_)))
        ));
        assert!(matches!(
            check(3, 0),
            Err(Error::InvalidArgument(InvalidArgument::Permits { .. }))
        ));
        assert!(matches!(
            check(3, 4),
            Err(Error::InvalidArgument(InvalidArgument::Permits {
                permits: 4,
                limit: 3
            }))
        ));
    }

    #[test]
    fn the_modules_codes_become_typed_errors() {
        let limit =
            reply_error("LIMIT this semaphore's limit is 3; a request must name the same limit");
        assert!(matches!(
            typed(Error::Redis(limit), 4, 1),
            Error::LimitMismatch { limit: 3, asked: 4 }
        ));
        let permits = reply_error(
            "PERMITS this owner holds 2 permits of this semaphore; release them before asking for another number",
        );
        assert!(matches!(
            typed(Error::Redis(permits), 3, 1),
            Error::PermitsMismatch { held: 2, asked: 1 }
        ));
        // Another error that happens to use the words is not one of them.
        let other = reply_error("ERR something else: this owner holds 2 permits");
        assert!(matches!(typed(Error::Redis(other), 3, 1), Error::Redis(_)));
    }

    #[test]
    fn an_older_modules_refusals_become_typed_errors() {
        let limit =
            reply_error("ERR this semaphore's limit is 3; a request must name the same limit");
        assert!(matches!(
            typed(Error::Redis(limit), 4, 1),
            Error::LimitMismatch { limit: 3, asked: 4 }
        ));
        let permits = reply_error(
            "ERR this owner holds 2 permits of this semaphore; release them before asking for another number",
        );
        assert!(matches!(
            typed(Error::Redis(permits), 3, 1),
            Error::PermitsMismatch { held: 2, asked: 1 }
        ));
        let other =
            reply_error("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert!(matches!(typed(Error::Redis(other), 3, 1), Error::Redis(_)));
    }
}

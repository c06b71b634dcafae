//! A held lock ([`LockGuard`]), its upgrade and downgrade.

use std::fmt;
use std::time::Instant;

use redis::{Cmd, FromRedisValue};
use tokio::sync::watch;

use crate::acquire::drive::Held;
use crate::acquire::Wait;
use crate::error::{Error, Result};
use crate::lease::held::Lease;
use crate::lease::release::{InflightCleanup, Release};
use crate::lease::status::{LeaseStatus, LossReason};
use crate::lock::info::LockMode;
use crate::lock::key::LockKey;

/// A held lock. Its watchdog renews the lease (every third of the ttl by default) for as long as
/// the guard lives.
///
/// Release it with [`LockGuard::release`]. Dropping it releases it too, as a best effort: the
/// `RWLOCK.UNLOCK` is spawned on the current tokio runtime, or, dropped outside any runtime,
/// on the one the client was made on (while it runs; else the lease lapses after its ttl).
/// [`Client::settle`](crate::Client::settle) waits for such releases.
///
/// Watch for loss with [`LockGuard::lost`] or [`LockGuard::status_watch`]: the guard signals
/// it as soon as a renewal fails definitively, or when the local validity bound passes (the
/// send time of the last successful grant or renewal plus the ttl minus a drift margin),
/// which is before the server could grant the lock to anyone else.
///
/// A write guard can [`downgrade`](LockGuard::downgrade) to a read guard, and a read guard
/// can [`upgrade`](LockGuard::upgrade) to the write lock, without letting go in between (the
/// server's downgrade and upgrade rules).
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
///
/// A guard that is not kept is released at once, so an unused one is a warning, as for std's
/// `MutexGuard`:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// async fn f(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
///     lock.write().await?; // the guard is dropped here: warning (an error under this deny)
///     Ok(())
/// }
/// ```
///
/// ```no_run
/// #![deny(unused_must_use)]
/// async fn f(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
///     let _guard = lock.write().await?; // held until the end of the scope
///     Ok(())
/// }
/// ```
#[must_use = "dropping a guard releases it at once"]
pub struct LockGuard {
    /// The lock's key and options.
    lock: LockKey,
    owner: String,
    /// Release with `UNLOCK` until the server answers 0 (the owner is ours alone and a
    /// surplus hold may exist: an earlier request's outcome was unknown, or the cluster
    /// client may have resent a request on its own).
    sweep: bool,
    mode: LockMode,
    token: u64,
    /// How many holds of the owner this guard stands for: 2 after an upgrade (the read hold
    /// stays under the write hold).
    holds: u32,
    lease: Lease,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.lock.key)
            .field("owner", &self.owner)
            .field("mode", &self.mode)
            .field("token", &self.token)
            .field("status", &self.lease.status())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(
        lock: LockKey,
        owner: String,
        mode: LockMode,
        held: Held,
        lease: Lease,
    ) -> LockGuard {
        LockGuard {
            lock,
            owner,
            sweep: held.sweep,
            mode,
            token: held.token,
            holds: 1,
            lease,
        }
    }

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
        &self.lock.key
    }

    /// The current lease status (a time-checked view: a `Held` whose bound has passed is
    /// reported as lost).
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::LockGuard) { if !g.status().is_held() { /* stop */ } }
    /// ```
    pub fn status(&self) -> LeaseStatus {
        self.lease.status()
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
        self.lease.valid_until()
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
        self.lease.check()
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
        self.lease.watch()
    }

    /// Resolves when the lease is lost (never, while it is renewed).
    ///
    /// ```no_run
    /// # async fn f(g: &redis_lease_client::LockGuard) {
    /// let reason = g.lost().await;
    /// # }
    /// ```
    pub fn lost(&self) -> impl std::future::Future<Output = LossReason> + Send + 'static {
        self.lease.lost()
    }

    /// Calls `f` once, from a background task, when the lease is lost (at once if it already
    /// is), with the reason; never if the guard is released or dropped first. Register as
    /// many as needed.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::LockGuard) {
    /// g.on_lost(|reason| eprintln!("stop writing: the lease was lost ({reason})"));
    /// # }
    /// ```
    pub fn on_lost(&self, f: impl FnOnce(LossReason) + Send + 'static) {
        self.lease.on_lost(&self.lock.client, f);
    }

    /// Runs `cmd` inside Redis only while this guard's **write** hold is live, atomically
    /// with the check (`LEASE.EXEC key token cmd...`), as the connection's user (ACL applies),
    /// and answers its reply. If the hold is not live (it lapsed, was revoked or released; or
    /// this is a read guard: a read hold does not fence writes) the server runs nothing and
    /// answers `FENCED`: that is [`Error::Fenced`], and a write guard then reports its lease
    /// lost ([`LossReason::Revoked`]).
    ///
    /// The server's check is the one that counts: `exec` does not look at the local status
    /// first. It is retried only where the command certainly did not run (a refused
    /// connection, `LOADING`, `READONLY`, ...); after a lost reply it fails with
    /// [`Error::Unavailable`] and the command may or may not have run. In a Redis Cluster the
    /// command's keys must hash to the lock key's slot (use a hash tag: `{order:42}` and
    /// `{order:42}:data`), else the server answers `CROSSSLOT` and runs nothing; the cluster
    /// client may resend a request after a reconnect by itself, so prefer idempotent commands
    /// there. Blocking commands, `MULTI`, scripts and the module's own commands are refused.
    ///
    /// ```no_run
    /// # async fn f(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// let g = lock.write().await?;
    /// let n: i64 = g.exec(redis::cmd("INCR").arg("{orders}:count")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn exec<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        let (client, retry) = (&self.lock.client, self.lock.opts.retry);
        let write = self.mode == LockMode::Write;
        (self.lease)
            .exec(client, (self.key(), self.token), cmd, retry, write)
            .await
    }

    /// Upgrades a read guard to the write lock, waiting as `wait` says, without giving up the
    /// read hold meanwhile (the server's upgrade: granted at once if this is the only reader,
    /// else it waits ahead of the queue). Answers whether it was granted; the guard then holds
    /// the write lock with a new token, and its release gives back both holds. A second
    /// reader asking to upgrade while one waits gets [`Error::Deadlock`]. A write guard
    /// answers `true` at once.
    ///
    /// ```no_run
    /// # async fn f(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// use redis_lease_client::Wait;
    /// let mut g = lock.read().await?;
    /// if g.upgrade(Wait::For(std::time::Duration::from_secs(2))).await? {
    ///     println!("now writing with token {}", g.token());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn upgrade(&mut self, wait: Wait) -> Result<bool> {
        if self.mode == LockMode::Write {
            return Ok(true);
        }
        self.check()?;
        let acks = self.lock.opts.acks();
        // Never swept on interruption: that would give back the read hold too.
        let mut cleanup = InflightCleanup::unlock(&self.lock.client, &self.lock.key, &self.owner);
        match self
            .lock
            .drive(
                LockMode::Write,
                &self.owner,
                false,
                wait,
                acks,
                &mut cleanup,
            )
            .await?
        {
            Some(h) => {
                self.mode = LockMode::Write;
                self.token = h.token;
                self.holds += 1;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Downgrades a write guard to a read guard without letting go in between (the server's
    /// downgrade: a writer may take a read hold, and `UNLOCK` gives back the write hold
    /// first). Other readers can join as soon as it returns. The token stays. A read guard
    /// returns at once.
    ///
    /// ```no_run
    /// # async fn f(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// let mut g = lock.write().await?;
    /// // ... write ...
    /// g.downgrade().await?;
    /// // ... go on reading what was written, while other readers may read too ...
    /// g.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn downgrade(&mut self) -> Result<()> {
        if self.mode == LockMode::Read {
            return Ok(());
        }
        self.check()?;
        if self.holds < 2 {
            // Take the read hold under the write hold (granted at once: a reentrant request
            // of the holder). It adds no exclusivity, so no replica acknowledgement is needed.
            let mut cleanup =
                InflightCleanup::unlock(&self.lock.client, &self.lock.key, &self.owner);
            self.lock
                .drive(
                    LockMode::Read,
                    &self.owner,
                    false,
                    Wait::No,
                    None,
                    &mut cleanup,
                )
                .await?
                .ok_or_else(|| Error::Protocol("a writer's read request was refused".into()))?;
            self.holds += 1;
        }
        // Give back the write hold (UNLOCK takes the write hold first).
        self.lock.unlock(&self.owner, Release::Times(1)).await?;
        self.holds -= 1;
        self.mode = LockMode::Read;
        Ok(())
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
        self.lease.stop();
        let n = self.lock.unlock(&self.owner, self.how()).await?;
        Ok(n > 0)
    }

    fn how(&self) -> Release {
        if self.sweep {
            Release::Sweep
        } else {
            Release::Times(self.holds)
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.lease.stop() {
            return;
        }
        let lock = self.lock.clone();
        let owner = std::mem::take(&mut self.owner);
        let how = self.how();
        self.lock.client.spawn_cleanup(async move {
            let _ = lock.unlock(&owner, how).await;
        });
    }
}

crate::guard::impl_guard!(LockGuard);

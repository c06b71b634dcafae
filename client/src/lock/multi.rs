//! Several lock keys at once, all or nothing (`RWLOCK.MLOCK`): one guard, one watchdog
//! renewing every key with `RWLOCK.MRENEW`, one lost signal.

use std::fmt;
use std::time::{Duration, Instant};

use redis::{Cmd, FromRedisValue, Value};
use tokio::sync::watch;

use crate::acquire::drive::send_acquire;
use crate::acquire::{ServerWait, Wait};
use crate::connection::Client;
use crate::error::{Error, InvalidArgument, Result};
use crate::lease::held::Lease;
use crate::lease::release::{InflightCleanup, Release};
use crate::lease::status::{LeaseStatus, LossReason};
use crate::lease::{LeaseTiming, Renewer};
use crate::lock::info::LockMode;
use crate::lock::options::LockOptions;
use crate::retry::{classify, Backoff, Failure};

/// The most keys one request takes (the module's limit).
pub const MAX_KEYS: usize = 64;

/// A lock on several keys taken together: granted on every key at once or not at all, and
/// while it waits it keeps its place in every key's queue (the server's FIFO order), so two
/// multi-key locks never deadlock each other. Every acquisition uses a fresh UUIDv4 owner.
///
/// ```no_run
/// # async fn demo() -> redis_lease_client::Result<()> {
/// use redis_lease_client::{Client, Wait};
/// let client = Client::open("redis://127.0.0.1/").await?;
/// let transfer = client.rwlock_many(["{acct}:1", "{acct}:2"])?;
/// if let Some(guard) = transfer.write(Wait::Forever).await? {
///     println!("tokens {:?}", guard.tokens());
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    client: Client,
    keys: Vec<String>,
    opts: LockOptions,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("keys", &self.keys)
            .field("opts", &self.opts)
            .finish()
    }
}

impl Client {
    /// A lock on every key of `keys` at once (1 to 64 distinct keys; in a cluster, one slot).
    pub fn rwlock_many<I, S>(&self, keys: I) -> Result<MultiLock>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        if keys.is_empty() || keys.len() > MAX_KEYS || sorted.len() != keys.len() {
            return Err(InvalidArgument::Unsupported("1 to 64 distinct keys").into());
        }
        Ok(MultiLock {
            client: self.clone(),
            keys,
            opts: LockOptions::default(),
        })
    }
}

impl MultiLock {
    /// Sets the lease ttl of every key (and the timing derived from it).
    pub fn with_ttl(mut self, ttl: Duration) -> Result<MultiLock> {
        self.opts.timing = LeaseTiming::new(ttl)?;
        Ok(self)
    }

    /// Caps each hold at `max_hold` from its grant, renewals included (`MAXHOLD`).
    pub fn with_max_hold(mut self, max_hold: Duration) -> MultiLock {
        self.opts.max_hold = Some(max_hold);
        self
    }

    /// Sets all options (replica acknowledgement is not supported here and is ignored).
    pub fn with_options(mut self, opts: LockOptions) -> MultiLock {
        self.opts = opts;
        self
    }

    /// The keys, in the order given (the order of a guard's tokens).
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// Takes the write lock of every key; `Ok(None)`: not granted within `wait`.
    pub async fn write(&self, wait: Wait) -> Result<Option<MultiGuard>> {
        self.acquire(LockMode::Write, wait).await
    }

    /// Takes a read lock of every key; `Ok(None)`: not granted within `wait`.
    pub async fn read(&self, wait: Wait) -> Result<Option<MultiGuard>> {
        self.acquire(LockMode::Read, wait).await
    }

    fn renewer(&self, owner: &str) -> Renewer {
        let mut cmd = redis::cmd("RWLOCK.MRENEW");
        cmd.arg(self.keys.len()).arg(&self.keys).arg(owner);
        cmd.arg(self.opts.timing.ttl_ms());
        Renewer {
            cmd,
            acks: None,
            expect: Some(self.keys.len() as i64),
        }
    }

    fn unlock_cmd(&self, owner: &str) -> Cmd {
        let mut cmd = redis::cmd("RWLOCK.MUNLOCK");
        cmd.arg(self.keys.len()).arg(&self.keys).arg(owner);
        cmd
    }

    /// One acquisition: the request waits inside the server; a transient failure is retried
    /// within the deadline, after releasing whatever a lost reply may have granted (the owner
    /// is fresh, so its holds are this request's only).
    pub async fn acquire(&self, mode: LockMode, wait: Wait) -> Result<Option<MultiGuard>> {
        let owner = uuid::Uuid::new_v4().to_string();
        let renew = self.renewer(&owner);
        // A request cancelled while its outcome is unknown (the caller's future dropped: a
        // timeout, a signal) gives back what it may have been granted, in the background.
        let mut cleanup =
            InflightCleanup::new(&self.client, self.unlock_cmd(&owner), Release::Times(1));
        let deadline = match wait {
            Wait::For(d) => Some(Instant::now() + d),
            _ => None,
        };
        let mut backoff = Backoff::new_now(self.opts.retry);
        loop {
            let now = Instant::now();
            let server_wait = match (wait, deadline) {
                (Wait::Forever, _) => ServerWait::Forever,
                (Wait::For(_), Some(dl)) if dl > now + Duration::from_millis(1) => {
                    ServerWait::Ms((dl - now).as_millis().min(1_000_000_000_000) as u64)
                }
                _ => ServerWait::Once,
            };
            let mut cmd = redis::cmd("RWLOCK.MLOCK");
            cmd.arg(self.keys.len()).arg(&self.keys).arg(&owner);
            cmd.arg(self.opts.timing.ttl_ms());
            if mode == LockMode::Read {
                cmd.arg("READ");
            }
            self.opts.add_max_hold(&mut cmd);
            cleanup.set_armed(true);
            let sent = send_acquire(&self.client, cmd, server_wait, &renew, deadline).await;
            cleanup.set_armed(false);
            match sent {
                Ok((Value::Nil, _)) => return Ok(None),
                Ok((Value::Array(tokens), _)) => {
                    let tokens: Vec<u64> = tokens
                        .iter()
                        .map(|t| crate::reply::int(t).unwrap_or(0).max(0) as u64)
                        .collect();
                    let lease =
                        Lease::start(&self.client, renew, self.opts.timing, self.opts.retry, now);
                    return Ok(Some(MultiGuard {
                        lock: self.clone(),
                        owner,
                        mode,
                        tokens,
                        lease,
                    }));
                }
                Ok((other, _)) => {
                    return Err(Error::Protocol(format!("RWLOCK.MLOCK answered {other:?}")))
                }
                Err(e) => match classify(e) {
                    Failure::Fatal(e) => return Err(e),
                    Failure::Transient { uncertain, err } => {
                        if uncertain {
                            // A lost reply may hide a grant: give it back before asking again.
                            let _ = self
                                .client
                                .query_retry(
                                    &self.unlock_cmd(&owner),
                                    None,
                                    self.opts.release_policy(),
                                )
                                .await;
                        }
                        match backoff.next_delay_now(deadline) {
                            Some(d) => tokio::time::sleep(d).await,
                            None => return Err(backoff.give_up_now(err)),
                        }
                    }
                },
            }
        }
    }
}

/// The holds of one owner on every key of a [`MultiLock`], renewed together.
#[must_use = "dropping a guard releases it at once"]
pub struct MultiGuard {
    lock: MultiLock,
    owner: String,
    mode: LockMode,
    tokens: Vec<u64>,
    lease: Lease,
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiGuard")
            .field("keys", &self.lock.keys)
            .field("owner", &self.owner)
            .field("mode", &self.mode)
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl MultiGuard {
    /// The fencing token of each key, in the lock's key order.
    pub fn tokens(&self) -> &[u64] {
        &self.tokens
    }

    /// The keys, in the lock's order.
    pub fn keys(&self) -> &[String] {
        &self.lock.keys
    }

    /// The first key's fencing token (as a [`Guard`](crate::Guard), the guard is its hold
    /// on the first key: every key is granted, renewed and lost together).
    pub fn token(&self) -> u64 {
        self.tokens.first().copied().unwrap_or(0)
    }

    /// The first key (see [`MultiGuard::token`]).
    pub fn key(&self) -> &str {
        self.lock.keys.first().map_or("", String::as_str)
    }

    /// The local instant until which every hold is certainly valid, if held.
    pub fn valid_until(&self) -> Option<Instant> {
        self.lease.valid_until()
    }

    /// Calls `f` once, from a background task, when the holds are lost (at once if they
    /// already are); never if they are released first.
    pub fn on_lost(&self, f: impl FnOnce(LossReason) + Send + 'static) {
        self.lease.on_lost(&self.lock.client, f);
    }

    /// Runs `cmd` inside Redis only while the **write** hold on the first key is live
    /// (`LEASE.EXEC key token cmd...`, as [`LockGuard::exec`](crate::LockGuard::exec)); its
    /// keys must be in the locks' slot in a Cluster. A fenced answer reports the holds lost.
    pub async fn exec<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        let (client, retry) = (&self.lock.client, self.lock.opts.retry);
        let write = self.mode == LockMode::Write;
        (self.lease)
            .exec(client, (self.key(), self.token()), cmd, retry, write)
            .await
    }

    /// The owner id the holds are under (a fresh UUIDv4).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Read or write, on every key.
    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// Held (until a local validity bound), lost (and why), or released.
    pub fn status(&self) -> LeaseStatus {
        self.lease.status()
    }

    /// Whether every hold is still live by the local bound.
    pub fn is_held(&self) -> bool {
        matches!(self.status(), LeaseStatus::Held { .. })
    }

    /// `Ok` while every hold is live by the local bound; else why it was lost.
    pub fn check(&self) -> Result<()> {
        self.lease.check()
    }

    /// The status, as it changes.
    pub fn status_watch(&self) -> watch::Receiver<LeaseStatus> {
        self.lease.watch()
    }

    /// Resolves when the holds are lost (one signal for every key).
    pub fn lost(&self) -> impl std::future::Future<Output = LossReason> + Send + 'static {
        self.lease.lost()
    }

    /// Releases every key (`RWLOCK.MUNLOCK`); true if every key was still held.
    pub async fn release(mut self) -> Result<bool> {
        self.lease.stop();
        let cmd = self.lock.unlock_cmd(&self.owner);
        let v = self
            .lock
            .client
            .query_retry(&cmd, None, self.lock.opts.release_policy())
            .await?;
        Ok(crate::reply::int(&v) == Some(self.tokens.len() as i64))
    }
}

/// Dropping the guard releases every key, as a best effort (as a dropped
/// [`LockGuard`](crate::LockGuard) does); [`Client::settle`] waits for it.
impl Drop for MultiGuard {
    fn drop(&mut self) {
        if !self.lease.stop() {
            return;
        }
        let client = self.lock.client.clone();
        let cmd = self.lock.unlock_cmd(&self.owner);
        let policy = self.lock.opts.release_policy();
        self.lock.client.spawn_cleanup(async move {
            let _ = client.query_retry(&cmd, None, policy).await;
        });
    }
}

crate::guard::impl_guard!(MultiGuard);

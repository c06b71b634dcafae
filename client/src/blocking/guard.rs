//! The blocking guard: one type over any async [`crate::Guard`], with what each kind adds
//! (a lock's mode, upgrade and downgrade; a semaphore's permits).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, FromRedisValue};

use super::Rt;
use crate::error::Result;
use crate::lease::status::{LeaseStatus, LossReason};
use crate::lock::info::LockMode;
use crate::Wait;

/// A held lease, for programs without an async runtime: [`blocking::LockGuard`](LockGuard)
/// and [`blocking::SemaphoreGuard`](SemaphoreGuard) are this over the async guards. Its
/// lease is renewed in the background (on the blocking client's runtime) for as long as it
/// lives. Dropping it releases the hold (blocking for the round trip), or, dropped inside an
/// async context, spawns the release.
///
/// ```no_run
/// # fn f(l: &redis_lease_client::blocking::RwLock) -> redis_lease_client::Result<()> {
/// let g = l.write()?;
/// g.check()?; // before each step of the protected work
/// g.release()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping a guard releases it at once"]
pub struct Guard<G: crate::Guard> {
    rt: Arc<Rt>,
    inner: Option<G>,
}

/// A blocking [`crate::LockGuard`].
pub type LockGuard = Guard<crate::LockGuard>;

/// A blocking [`crate::SemaphoreGuard`].
pub type SemaphoreGuard = Guard<crate::SemaphoreGuard>;

impl<G: crate::Guard> Guard<G> {
    pub(super) fn new(rt: Arc<Rt>, g: G) -> Guard<G> {
        Guard { rt, inner: Some(g) }
    }

    fn g(&self) -> &G {
        self.inner.as_ref().expect("guard present until release")
    }

    /// The async guard inside.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) { let inner = g.async_guard(); }
    /// ```
    pub fn async_guard(&self) -> &G {
        self.g()
    }

    /// The fencing token.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) { let t = g.token(); }
    /// ```
    pub fn token(&self) -> u64 {
        self.g().token()
    }

    /// The key.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) { println!("{}", g.key()); }
    /// ```
    pub fn key(&self) -> &str {
        self.g().key()
    }

    /// The owner id.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) { println!("{}", g.owner()); }
    /// ```
    pub fn owner(&self) -> &str {
        self.g().owner()
    }

    /// The lease status.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) { println!("{:?}", g.status()); }
    /// ```
    pub fn status(&self) -> LeaseStatus {
        self.g().status()
    }

    /// Whether the lease is certainly valid now.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) { assert!(g.is_held()); }
    /// ```
    pub fn is_held(&self) -> bool {
        self.g().is_held()
    }

    /// The local instant until which the lease is certainly valid, if held.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) { println!("{:?}", g.valid_until()); }
    /// ```
    pub fn valid_until(&self) -> Option<Instant> {
        self.g().valid_until()
    }

    /// `Ok(())` while held, [`crate::Error::LeaseLost`] after.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) -> redis_lease_client::Result<()> { g.check() }
    /// ```
    pub fn check(&self) -> Result<()> {
        self.g().check()
    }

    /// Blocks until the lease is lost or `timeout` passes; answers the reason if lost. Inside
    /// an async context it watches the status without the runtime (it still blocks).
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) {
    /// if let Some(reason) = g.wait_lost(std::time::Duration::from_secs(1)) { eprintln!("{reason}"); }
    /// # }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Option<LossReason> {
        let lost = self.g().lost();
        match self
            .rt
            .block_on(async { tokio::time::timeout(timeout, lost).await.ok() })
        {
            Ok(r) => r,
            Err(_) => poll_lost(|| self.g().status(), timeout),
        }
    }

    /// Calls `f` once, from a background thread, when the lease is lost; see
    /// [`crate::Guard::on_lost`].
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) {
    /// g.on_lost(|reason| eprintln!("lost: {reason}"));
    /// # }
    /// ```
    pub fn on_lost(&self, f: impl FnOnce(LossReason) + Send + 'static) {
        let _enter = self.rt.enter();
        self.g().on_lost(f);
    }

    /// See [`crate::LockGuard::exec`].
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) -> redis_lease_client::Result<()> {
    /// let n: i64 = g.exec(redis::cmd("INCR").arg("{k}:n"))?;
    /// # Ok(()) }
    /// ```
    pub fn exec<T: FromRedisValue + Send>(&self, cmd: &Cmd) -> Result<T> {
        self.rt.run(self.g().exec(cmd))
    }

    /// Stops renewing and releases the hold; answers whether the server still counted it.
    ///
    /// ```no_run
    /// # fn f(g: redis_lease_client::blocking::LockGuard) -> redis_lease_client::Result<()> {
    /// g.release()?;
    /// # Ok(()) }
    /// ```
    pub fn release(mut self) -> Result<bool> {
        let g = self.inner.take().expect("guard");
        let rt = self.rt.clone();
        match rt.check() {
            Ok(()) => rt.run(g.release()),
            Err(e) => {
                // Inside an async context: the async guard's drop spawns the release.
                let _enter = rt.enter();
                drop(g);
                Err(e)
            }
        }
    }
}

/// The lease's status polled against its bound, for [`Guard::wait_lost`] inside a runtime.
fn poll_lost(status: impl Fn() -> LeaseStatus, timeout: Duration) -> Option<LossReason> {
    let deadline = Instant::now() + timeout;
    loop {
        match status() {
            LeaseStatus::Lost(r) => return Some(r),
            LeaseStatus::Released => return None,
            LeaseStatus::Held { .. } => {}
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(5)));
    }
}

impl Guard<crate::LockGuard> {
    /// The mode held.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) { println!("{}", g.mode()); }
    /// ```
    pub fn mode(&self) -> LockMode {
        self.g().mode()
    }

    /// See [`crate::LockGuard::upgrade`].
    ///
    /// ```no_run
    /// # fn f(mut g: redis_lease_client::blocking::LockGuard) -> redis_lease_client::Result<()> {
    /// let upgraded = g.upgrade(redis_lease_client::Wait::No)?;
    /// # Ok(()) }
    /// ```
    pub fn upgrade(&mut self, wait: Wait) -> Result<bool> {
        let rt = self.rt.clone();
        let g = self.inner.as_mut().expect("guard present until release");
        rt.run(g.upgrade(wait))
    }

    /// See [`crate::LockGuard::downgrade`].
    ///
    /// ```no_run
    /// # fn f(mut g: redis_lease_client::blocking::LockGuard) -> redis_lease_client::Result<()> {
    /// g.downgrade()?;
    /// # Ok(()) }
    /// ```
    pub fn downgrade(&mut self) -> Result<()> {
        let rt = self.rt.clone();
        let g = self.inner.as_mut().expect("guard present until release");
        rt.run(g.downgrade())
    }
}

impl Guard<crate::SemaphoreGuard> {
    /// How many permits this hold takes.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::SemaphoreGuard) { println!("{}", g.permits()); }
    /// ```
    pub fn permits(&self) -> u32 {
        self.g().permits()
    }
}

impl<G: crate::Guard> Drop for Guard<G> {
    fn drop(&mut self) {
        if let Some(g) = self.inner.take() {
            if self.rt.check().is_err() {
                // Inside an async context: the async guard spawns its release.
                let _enter = self.rt.enter();
                drop(g);
            } else {
                let _ = self.rt.run(g.release());
            }
        }
    }
}

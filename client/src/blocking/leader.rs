//! Blocking leader election and observation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, FromRedisValue};

use super::Rt;
use crate::error::Result;
use crate::leader::{ElectionOptions, LeaderInfo, Leadership};

/// Blocking [`crate::LeaderElector`].
///
/// ```no_run
/// # fn f(c: &redis_lease_client::blocking::Client) -> redis_lease_client::Result<()> {
/// let election = c.elector("jobs").with_ttl(std::time::Duration::from_secs(3))?.start();
/// let term = election.wait_leader(None)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct LeaderElector {
    pub(super) rt: Arc<Rt>,
    pub(super) inner: crate::leader::LeaderElector,
}

impl LeaderElector {
    /// See [`crate::LeaderElector::with_candidate`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let e = c.elector("k").with_candidate("me"); }
    /// ```
    pub fn with_candidate(mut self, candidate: impl Into<String>) -> LeaderElector {
        self.inner = self.inner.with_candidate(candidate);
        self
    }

    /// See [`crate::LeaderElector::with_ttl`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) -> redis_lease_client::Result<()> {
    /// let e = c.elector("k").with_ttl(std::time::Duration::from_secs(2))?;
    /// # Ok(()) }
    /// ```
    pub fn with_ttl(mut self, ttl: Duration) -> Result<LeaderElector> {
        self.inner = self.inner.with_ttl(ttl)?;
        Ok(self)
    }

    /// See [`crate::LeaderElector::with_replicas`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let e = c.elector("k").with_replicas(1); }
    /// ```
    pub fn with_replicas(mut self, replicas: u32) -> LeaderElector {
        self.inner = self.inner.with_replicas(replicas);
        self
    }

    /// See [`crate::LeaderElector::with_options`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let e = c.elector("k").with_options(Default::default()); }
    /// ```
    pub fn with_options(mut self, opts: ElectionOptions) -> LeaderElector {
        self.inner = self.inner.with_options(opts);
        self
    }

    /// Starts campaigning in the background.
    ///
    /// ```no_run
    /// # fn f(e: redis_lease_client::blocking::LeaderElector) { let election = e.start(); }
    /// ```
    pub fn start(&self) -> Election {
        let _enter = self.rt.enter();
        Election {
            rt: self.rt.clone(),
            inner: Some(self.inner.start()),
        }
    }
}

/// Blocking [`crate::Election`]. Dropping it resigns (blocking for the round trip).
///
/// ```no_run
/// # fn f(e: redis_lease_client::blocking::Election) -> redis_lease_client::Result<()> {
/// if e.is_leader() { /* lead */ }
/// e.resign()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping an election stops its campaign and resigns"]
pub struct Election {
    pub(super) rt: Arc<Rt>,
    pub(super) inner: Option<crate::leader::Election>,
}

impl Election {
    fn e(&self) -> &crate::leader::Election {
        self.inner.as_ref().expect("election present until resign")
    }

    /// Whether this candidate leads now.
    ///
    /// ```no_run
    /// # fn f(e: &redis_lease_client::blocking::Election) { println!("{}", e.is_leader()); }
    /// ```
    pub fn is_leader(&self) -> bool {
        self.e().is_leader()
    }

    /// This candidate's view of its leadership.
    ///
    /// ```no_run
    /// # fn f(e: &redis_lease_client::blocking::Election) { println!("{:?}", e.leadership()); }
    /// ```
    pub fn leadership(&self) -> Leadership {
        self.e().leadership()
    }

    /// Blocks until this candidate leads (answers the term) or `timeout` passes: `Ok(None)`,
    /// or [`Error::NotReplicated`](crate::Error::NotReplicated) if this candidate was elected
    /// but too few replicas acknowledged it (with `replicas` asked for).
    ///
    /// ```no_run
    /// # fn f(e: &redis_lease_client::blocking::Election) -> redis_lease_client::Result<()> {
    /// let term = e.wait_leader(Some(std::time::Duration::from_secs(10)))?;
    /// # Ok(()) }
    /// ```
    pub fn wait_leader(&self, timeout: Option<Duration>) -> Result<Option<u64>> {
        let fut = self.e().wait_leader();
        let elected = self.rt.run(async {
            match timeout {
                Some(t) => match tokio::time::timeout(t, fut).await {
                    Ok(r) => r.map(Some),
                    Err(_) => Ok(None),
                },
                None => fut.await.map(Some),
            }
        })?;
        match (elected, self.e().leadership().unreplicated) {
            // Not in time because every election reached too few replicas: say so.
            (None, Some((acked, wanted))) => Err(crate::Error::NotReplicated { acked, wanted }),
            (elected, _) => Ok(elected),
        }
    }

    /// Blocks until leadership is lost (or is not held), or `timeout` passes; answers whether
    /// it was lost. Inside an async context it polls the leadership without the runtime (it
    /// still blocks).
    ///
    /// ```no_run
    /// # fn f(e: &redis_lease_client::blocking::Election) {
    /// if e.wait_lost(std::time::Duration::from_secs(1)) { eprintln!("no longer leader"); }
    /// # }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let lost = self.e().lost();
        let deadline = Instant::now() + timeout;
        match self
            .rt
            .block_on(async { tokio::time::timeout_at(deadline.into(), lost).await.is_ok() })
        {
            Ok(lost) => lost,
            Err(_) => loop {
                if !self.e().is_leader() {
                    return true;
                }
                let now = Instant::now();
                if now >= deadline {
                    return false;
                }
                std::thread::sleep((deadline - now).min(Duration::from_millis(5)));
            },
        }
    }

    /// See [`crate::Election::exec`].
    ///
    /// ```no_run
    /// # fn f(e: &redis_lease_client::blocking::Election) -> redis_lease_client::Result<()> {
    /// let n: i64 = e.exec(redis::cmd("INCR").arg("{k}:n"))?;
    /// # Ok(()) }
    /// ```
    pub fn exec<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        self.rt.run(self.e().exec(cmd))
    }

    /// Stops campaigning and resigns.
    ///
    /// ```no_run
    /// # fn f(e: redis_lease_client::blocking::Election) -> redis_lease_client::Result<()> {
    /// e.resign()?;
    /// # Ok(()) }
    /// ```
    pub fn resign(mut self) -> Result<bool> {
        self.rt.check()?;
        let e = self.inner.take().expect("election");
        self.rt.run(e.resign())
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        if let Some(e) = self.inner.take() {
            if self.rt.check().is_err() {
                let _enter = self.rt.enter();
                drop(e);
            } else {
                let _ = self.rt.run(e.resign());
            }
        }
    }
}

/// Blocking [`crate::LeaderObserver`].
///
/// ```no_run
/// # fn f(c: &redis_lease_client::blocking::Client) -> redis_lease_client::Result<()> {
/// let mut obs = c.observe("jobs", Default::default())?;
/// while let Some(next) = obs.next_change(std::time::Duration::from_secs(60))? {
///     println!("{next:?}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LeaderObserver {
    pub(super) rt: Arc<Rt>,
    pub(super) inner: crate::leader::LeaderObserver,
}

impl LeaderObserver {
    /// The leader as last seen.
    ///
    /// ```no_run
    /// # fn f(o: &redis_lease_client::blocking::LeaderObserver) { println!("{:?}", o.current()); }
    /// ```
    pub fn current(&self) -> Option<LeaderInfo> {
        self.inner.current()
    }

    /// Blocks for the next change, at most `timeout`: `Ok(Some(state))` on a change,
    /// `Ok(None)` if none came in time.
    ///
    /// ```no_run
    /// # fn f(o: &mut redis_lease_client::blocking::LeaderObserver) -> redis_lease_client::Result<()> {
    /// let change = o.next_change(std::time::Duration::from_secs(5))?;
    /// # Ok(()) }
    /// ```
    pub fn next_change(&mut self, timeout: Duration) -> Result<Option<Option<LeaderInfo>>> {
        let inner = &mut self.inner;
        self.rt.run(async {
            match tokio::time::timeout(timeout, inner.changed()).await {
                Ok(r) => r.map(Some),
                Err(_) => Ok(None),
            }
        })
    }
}

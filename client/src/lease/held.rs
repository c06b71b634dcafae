//! What every guard has: the lease's status and the watchdog that renews it. The lock guard
//! and the semaphore guard are this plus what their kind adds.

use std::time::Instant;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::connection::Client;
use crate::error::{Error, Result};
use crate::lease::status::{LeaseStatus, LossReason};
use crate::lease::{self, LeaseTiming, Renewer};
use crate::retry::RetryPolicy;

/// A held lease and its running watchdog.
pub(crate) struct Lease {
    status: watch::Receiver<LeaseStatus>,
    /// Kept to publish a loss the watchdog cannot see (a `FENCED` answer).
    tx: watch::Sender<LeaseStatus>,
    watchdog: Option<JoinHandle<LossReason>>,
}

impl Lease {
    /// Starts the watchdog for a lease proven by a request sent at `last_sent`.
    pub(crate) fn start(
        client: &Client,
        renew: Renewer,
        timing: LeaseTiming,
        retry: RetryPolicy,
        last_sent: Instant,
    ) -> Lease {
        let (tx, status) = watch::channel(LeaseStatus::Held {
            valid_until: timing.valid_until(last_sent),
        });
        let watchdog = tokio::spawn(lease::watchdog(
            client.clone(),
            renew,
            timing,
            retry,
            last_sent,
            tx.clone(),
        ));
        Lease {
            status,
            tx,
            watchdog: Some(watchdog),
        }
    }

    /// The status, time-checked: a `Held` whose bound has passed is reported as lost.
    pub(crate) fn status(&self) -> LeaseStatus {
        match *self.status.borrow() {
            LeaseStatus::Held { valid_until } if valid_until <= Instant::now() => {
                LeaseStatus::Lost(LossReason::Expired)
            }
            s => s,
        }
    }

    pub(crate) fn valid_until(&self) -> Option<Instant> {
        match self.status() {
            LeaseStatus::Held { valid_until } => Some(valid_until),
            _ => None,
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        match self.status() {
            LeaseStatus::Held { .. } => Ok(()),
            LeaseStatus::Lost(r) => Err(Error::LeaseLost(r)),
            LeaseStatus::Released => Err(Error::LeaseLost(LossReason::Revoked)),
        }
    }

    pub(crate) fn watch(&self) -> watch::Receiver<LeaseStatus> {
        self.status.clone()
    }

    pub(crate) fn lost(&self) -> impl std::future::Future<Output = LossReason> + Send + 'static {
        let mut rx = self.status.clone();
        async move {
            match lease::wait_lost(&mut rx).await {
                LeaseStatus::Lost(r) => r,
                _ => LossReason::Revoked,
            }
        }
    }

    /// Stops the watchdog and marks the lease released (unless it was lost before); answers
    /// whether the watchdog was still running (false once stopped before).
    pub(crate) fn stop(&mut self) -> bool {
        let running = match self.watchdog.take() {
            Some(w) => {
                w.abort();
                true
            }
            None => false,
        };
        self.tx.send_if_modified(|s| match s {
            LeaseStatus::Held { .. } => {
                *s = LeaseStatus::Released;
                true
            }
            _ => false,
        });
        running
    }

    /// Calls `f` from a background task (on `client`'s runtime) when the lease is lost: at
    /// once if it is already, never if it is released (or the guard dropped) first. The
    /// local bound counts, as for [`Lease::status`]: a watchdog too late to say so still
    /// makes the lease lost when its bound passes.
    pub(crate) fn on_lost(&self, client: &Client, f: impl FnOnce(LossReason) + Send + 'static) {
        let mut rx = self.status.clone();
        let watcher = async move {
            loop {
                let status = *rx.borrow_and_update();
                match status {
                    LeaseStatus::Lost(r) => return f(r),
                    LeaseStatus::Released => return,
                    LeaseStatus::Held { valid_until } => {
                        tokio::select! {
                            changed = rx.changed() => {
                                if changed.is_err() {
                                    return; // the guard is gone: released or dropped
                                }
                            }
                            _ = tokio::time::sleep_until(valid_until.into()) => {
                                let late = matches!(
                                    *rx.borrow(),
                                    LeaseStatus::Held { valid_until: v } if v <= Instant::now()
                                );
                                if late {
                                    return f(LossReason::Expired);
                                }
                            }
                        }
                    }
                }
            }
        };
        if !client.spawn_task(watcher) {
            tracing::warn!(
                "on_lost: no tokio runtime to watch the lease on; the callback will not run"
            );
        }
    }

    /// Runs `cmd` inside Redis only while the hold `token` on `key` is live (`LEASE.EXEC`),
    /// within the lease's bound; a `FENCED` answer loses the lease if this hold's token fences
    /// writes (`fences`: a read hold's never does).
    pub(crate) async fn exec<T: redis::FromRedisValue>(
        &self,
        client: &Client,
        (key, token): (&str, u64),
        cmd: &redis::Cmd,
        retry: RetryPolicy,
        fences: bool,
    ) -> Result<T> {
        let deadline = lease::exec::deadline(self.valid_until(), client.command_timeout());
        let out = lease::exec::exec(client, key, token, cmd, deadline, retry).await;
        if fences && matches!(out, Err(Error::Fenced(_))) {
            self.revoke();
        }
        out
    }

    /// The server answered that the hold is not live (`FENCED`): the lease is lost, whatever
    /// the watchdog last saw. A loss is final (the watchdog never overwrites it).
    pub(crate) fn revoke(&self) {
        if let Some(w) = &self.watchdog {
            w.abort();
        }
        self.tx.send_if_modified(|s| match s {
            LeaseStatus::Held { .. } => {
                *s = LeaseStatus::Lost(LossReason::Revoked);
                true
            }
            _ => false,
        });
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop();
    }
}

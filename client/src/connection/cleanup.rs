//! Clean-ups a client runs in the background: the release of a dropped guard, the resignation
//! of a dropped election, the release of an acquisition cancelled while its outcome was unknown.
//!
//! They run on the runtime of whoever drops the guard, or, when it is dropped outside any
//! runtime (a plain thread, a destructor after `block_on` returned), on the runtime the client
//! was made on, as long as that one runs. They are counted, so a program about to exit can wait
//! for them ([`crate::Client::settle`]).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::Notify;

/// The background clean-ups of one client (shared by its clones).
#[derive(Debug)]
pub(crate) struct Cleanups {
    /// The runtime the client was made on, for clean-ups started outside any runtime.
    home: Option<Handle>,
    pending: AtomicUsize,
    idle: Notify,
}

/// Counts one clean-up until it ends, however it ends (a task dropped by a runtime that shuts
/// down counts as ended).
struct Pending(Arc<Cleanups>);

impl Drop for Pending {
    fn drop(&mut self) {
        if self.0.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Cleanups {
    pub(crate) fn new() -> Arc<Cleanups> {
        Arc::new(Cleanups {
            home: Handle::try_current().ok(),
            pending: AtomicUsize::new(0),
            idle: Notify::new(),
        })
    }

    /// Runs `f` in the background; answers false if there is no runtime to run it on.
    pub(crate) fn spawn(self: &Arc<Self>, f: impl Future<Output = ()> + Send + 'static) -> bool {
        let Some(handle) = Handle::try_current().ok().or_else(|| self.home.clone()) else {
            return false;
        };
        self.pending.fetch_add(1, Ordering::AcqRel);
        let pending = Pending(self.clone());
        handle.spawn(async move {
            let _pending = pending;
            f.await;
        });
        true
    }

    /// Runs `f` in the background, uncounted (a watcher that may run as long as a lease).
    pub(crate) fn spawn_task(&self, f: impl Future<Output = ()> + Send + 'static) -> bool {
        let Some(handle) = Handle::try_current().ok().or_else(|| self.home.clone()) else {
            return false;
        };
        handle.spawn(f);
        true
    }

    /// Waits until no clean-up runs, at most `within`; answers whether none does.
    pub(crate) async fn settle(&self, within: Duration) -> bool {
        let idle = async {
            loop {
                let notified = self.idle.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.pending.load(Ordering::Acquire) == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(within, idle).await.is_ok()
    }
}

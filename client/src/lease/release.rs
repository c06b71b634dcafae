//! Giving holds back: a release sent as many times as a hold needs, the lock's `RWLOCK.UNLOCK`,
//! and the cleanup of an acquisition interrupted while its outcome was unknown.

use redis::Cmd;

use crate::connection::Client;
use crate::error::{Error, Result};
use crate::reply;
use crate::retry::RetryPolicy;

/// How many holds of an owner to give back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Release {
    /// Release until the server answers 0 (at most 64 times): every hold of an owner that is
    /// ours alone, including a surplus one a lost reply may have left.
    Sweep,
    /// At most this many releases (an `RWLOCK.UNLOCK` gives back one hold, the write hold
    /// first; a `SEMAPHORE.RELEASE` all of the owner's permits).
    Times(u32),
}

/// `RWLOCK.UNLOCK key owner`.
pub(crate) fn unlock_cmd(key: &str, owner: &str) -> Cmd {
    redis::cmd("RWLOCK.UNLOCK").arg(key).arg(owner).to_owned()
}

/// Sends `cmd` (a release that answers 1 or 0) as `how` says; answers how many it released.
pub(crate) async fn give_back(
    client: &Client,
    cmd: &Cmd,
    policy: RetryPolicy,
    how: Release,
) -> Result<u64> {
    let times = match how {
        Release::Sweep => 64,
        Release::Times(n) => n,
    };
    let mut released = 0;
    for _ in 0..times {
        let v = client.query_retry(cmd, None, policy).await?;
        match reply::int(&v) {
            Some(1) => released += 1,
            Some(0) => break,
            _ => return Err(Error::Protocol(format!("a release answered {v:?}"))),
        }
    }
    Ok(released)
}

/// Gives back holds of `owner` on the lock `key`; answers how many were released.
pub(crate) async fn unlock(
    client: &Client,
    key: &str,
    owner: &str,
    policy: RetryPolicy,
    how: Release,
) -> Result<u64> {
    give_back(client, &unlock_cmd(key, owner), policy, how).await
}

/// Releases what an interrupted acquisition may have left behind (a request cancelled or
/// failed while its outcome was unknown), in the background, when armed.
pub(crate) struct InflightCleanup {
    client: Client,
    release: Cmd,
    how: Release,
    armed: bool,
}

impl InflightCleanup {
    /// A cleanup that sends `release` as `how` says.
    pub(crate) fn new(client: &Client, release: Cmd, how: Release) -> Self {
        InflightCleanup {
            client: client.clone(),
            release,
            how,
            armed: false,
        }
    }

    /// A lock's cleanup: `RWLOCK.UNLOCK` until 0.
    pub(crate) fn unlock(client: &Client, key: &str, owner: &str) -> Self {
        InflightCleanup::new(client, unlock_cmd(key, owner), Release::Sweep)
    }

    pub(crate) fn set_armed(&mut self, armed: bool) {
        self.armed = armed;
    }
}

impl Drop for InflightCleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let client = self.client.clone();
        let cmd = std::mem::replace(&mut self.release, Cmd::new());
        let how = self.how;
        self.client.spawn_cleanup(async move {
            let _ = give_back(&client, &cmd, RetryPolicy::default(), how).await;
        });
    }
}

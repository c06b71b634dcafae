//! One lock key with its options, as a lock and its guards share it: the `RWLOCK.*` requests
//! of an owner, and what the acquisition driver ([`crate::acquire::drive`]) needs to know of
//! `RWLOCK.*LOCK` and `RWLOCK.INFO`.

use redis::Cmd;

use crate::acquire::drive::{self, Held, Shell};
use crate::acquire::{HoldView, Wait};
use crate::connection::Client;
use crate::error::Result;
use crate::lease::release::{self, InflightCleanup, Release};
use crate::lease::{Acks, LeaseTiming, Renewer};
use crate::lock::info::{LockInfo, LockMode};
use crate::lock::options::LockOptions;
use crate::retry::{classify, Failure, RetryPolicy};

/// A lock key on a client, with the lock's options: what a guard keeps of its lock.
#[derive(Clone, Debug)]
pub(crate) struct LockKey {
    pub client: Client,
    pub key: String,
    pub opts: LockOptions,
}

impl LockKey {
    /// `owner`'s renewal (`RWLOCK.RENEW`), with the replica acknowledgement of the options.
    pub(crate) fn renewer(&self, owner: &str) -> Renewer {
        Renewer {
            cmd: redis::cmd("RWLOCK.RENEW")
                .arg(&self.key)
                .arg(owner)
                .arg(self.opts.timing.ttl_ms())
                .to_owned(),
            acks: self.opts.acks(),
            expect: None,
        }
    }

    /// Runs one acquisition of `mode` by `owner` to its end. `Ok(None)`: not granted in time.
    pub(crate) async fn drive(
        &self,
        mode: LockMode,
        owner: &str,
        generated: bool,
        wait: Wait,
        acks: Option<Acks>,
        cleanup: &mut InflightCleanup,
    ) -> Result<Option<Held>> {
        let mut renew = self.renewer(owner);
        renew.acks = acks;
        let shell = LockShell {
            lock: self,
            mode,
            owner,
            renew,
        };
        drive::drive(&shell, wait, generated, cleanup).await
    }

    /// Gives back holds of `owner` as `how` says; answers how many were released.
    pub(crate) async fn unlock(&self, owner: &str, how: Release) -> Result<u64> {
        let policy = self.opts.release_policy();
        release::unlock(&self.client, &self.key, owner, policy, how).await
    }
}

/// One acquisition of a lock, as the driver sees it.
struct LockShell<'a> {
    lock: &'a LockKey,
    mode: LockMode,
    owner: &'a str,
    renew: Renewer,
}

impl Shell for LockShell<'_> {
    fn client(&self) -> &Client {
        &self.lock.client
    }

    fn timing(&self) -> LeaseTiming {
        self.lock.opts.timing
    }

    fn retry(&self) -> RetryPolicy {
        self.lock.opts.retry
    }

    fn renewer(&self) -> &Renewer {
        &self.renew
    }

    fn acquire_cmd(&self) -> Cmd {
        let mut cmd = redis::cmd(match self.mode {
            LockMode::Read => "RWLOCK.RLOCK",
            LockMode::Write => "RWLOCK.WLOCK",
        });
        cmd.arg(&self.lock.key)
            .arg(self.owner)
            .arg(self.lock.opts.timing.ttl_ms());
        self.lock.opts.add_max_hold(&mut cmd);
        cmd
    }

    async fn read_hold(&self) -> Result<Option<HoldView>, Failure> {
        let client = &self.lock.client;
        let cmd = redis::cmd("RWLOCK.INFO").arg(&self.lock.key).to_owned();
        let v = client
            .query_within(&cmd, client.command_timeout())
            .await
            .map_err(classify)?;
        let info = LockInfo::parse(v).map_err(Failure::Fatal)?;
        Ok(info.hold_of(self.owner, self.mode).map(|h| HoldView {
            count: h.count,
            token: h.token,
        }))
    }

    async fn give_back(&self, sweep: bool) {
        let how = if sweep {
            Release::Sweep
        } else {
            Release::Times(1)
        };
        let _ = self.lock.unlock(self.owner, how).await;
    }
}

//! One semaphore key with its limit and options, as a semaphore and its guards share it: the
//! `SEMAPHORE.*` requests of an owner, and what the acquisition driver ([`crate::acquire::drive`]) needs
//! to know of `SEMAPHORE.ACQUIRE` and `SEMAPHORE.INFO`.

use redis::Cmd;

use crate::acquire::drive::{self, Held, Shell};
use crate::acquire::{HoldView, Wait};
use crate::connection::Client;
use crate::error::Result;
use crate::lease::release::{give_back, InflightCleanup, Release};
use crate::lease::{LeaseTiming, Renewer};
use crate::lock::options::LockOptions;
use crate::retry::{classify, Failure, RetryPolicy};
use crate::semaphore::info::SemaphoreInfo;

/// A semaphore key on a client, with the semaphore's limit and options: what a guard keeps of
/// its semaphore.
#[derive(Clone, Debug)]
pub(crate) struct SemaphoreKey {
    pub client: Client,
    pub key: String,
    pub limit: u32,
    pub opts: LockOptions,
}

impl SemaphoreKey {
    /// `owner`'s renewal (`SEMAPHORE.RENEW`), with the replica acknowledgement of the options.
    pub(crate) fn renewer(&self, owner: &str) -> Renewer {
        Renewer {
            cmd: redis::cmd("SEMAPHORE.RENEW")
                .arg(&self.key)
                .arg(owner)
                .arg(self.opts.timing.ttl_ms())
                .to_owned(),
            acks: self.opts.acks(),
            expect: None,
        }
    }

    /// `SEMAPHORE.RELEASE key owner`: gives back every permit of the owner.
    pub(crate) fn release_cmd(&self, owner: &str) -> Cmd {
        redis::cmd("SEMAPHORE.RELEASE")
            .arg(&self.key)
            .arg(owner)
            .to_owned()
    }

    /// Runs one acquisition of `permits` by `owner` to its end. `Ok(None)`: not granted in
    /// time.
    pub(crate) async fn drive(
        &self,
        owner: &str,
        permits: u32,
        generated: bool,
        wait: Wait,
        cleanup: &mut InflightCleanup,
    ) -> Result<Option<Held>> {
        let shell = SemShell {
            sem: self,
            owner,
            permits,
            renew: self.renewer(owner),
        };
        drive::drive(&shell, wait, generated, cleanup).await
    }

    /// Gives back `owner`'s hold (one `SEMAPHORE.RELEASE`); answers how many were released.
    pub(crate) async fn release(&self, owner: &str) -> Result<u64> {
        let policy = self.opts.release_policy();
        give_back(
            &self.client,
            &self.release_cmd(owner),
            policy,
            Release::Times(1),
        )
        .await
    }
}

/// One acquisition of permits, as the driver sees it.
struct SemShell<'a> {
    sem: &'a SemaphoreKey,
    owner: &'a str,
    permits: u32,
    renew: Renewer,
}

impl Shell for SemShell<'_> {
    fn client(&self) -> &Client {
        &self.sem.client
    }

    fn timing(&self) -> LeaseTiming {
        self.sem.opts.timing
    }

    fn retry(&self) -> RetryPolicy {
        self.sem.opts.retry
    }

    fn renewer(&self) -> &Renewer {
        &self.renew
    }

    fn acquire_cmd(&self) -> Cmd {
        let s = self.sem;
        let mut cmd = redis::cmd("SEMAPHORE.ACQUIRE")
            .arg(&s.key)
            .arg(self.owner)
            .arg(s.limit)
            .arg(s.opts.timing.ttl_ms())
            .arg("PERMITS")
            .arg(self.permits)
            .to_owned();
        s.opts.add_max_hold(&mut cmd);
        cmd
    }

    async fn read_hold(&self) -> Result<Option<HoldView>, Failure> {
        let client = &self.sem.client;
        let cmd = redis::cmd("SEMAPHORE.INFO").arg(&self.sem.key).to_owned();
        let v = client
            .query_within(&cmd, client.command_timeout())
            .await
            .map_err(classify)?;
        let info = SemaphoreInfo::parse(v).map_err(Failure::Fatal)?;
        // A hold of other permits is not what this request asked for: asking again gets the
        // server's refusal (PermitsMismatch) instead of adopting it.
        Ok(info
            .hold_of(self.owner)
            .filter(|h| h.permits == self.permits)
            .map(|h| HoldView {
                count: 1,
                token: h.token,
            }))
    }

    async fn read_baseline(&self) -> Result<Option<HoldView>, Failure> {
        // One hold per owner: a retried ACQUIRE is answered the existing hold, so a hold
        // found after a lost reply is adopted whether it was there before or not.
        Ok(None)
    }

    async fn give_back(&self, _sweep: bool) {
        // One RELEASE gives back the owner's whole hold (a duplicate grant is the same hold).
        let _ = self.sem.release(self.owner).await;
    }
}

//! The I/O around the acquisition state machine ([`crate::acquire`]): it performs each step
//! the machine asks for, for any kind of hold that answers a token or nil and shows the
//! owner's hold in an INFO reply. The lock ([`crate::RwLock`]) is one [`Shell`], the
//! semaphore ([`crate::Semaphore`]: `SEMAPHORE.ACQUIRE` / `SEMAPHORE.INFO`) another.

use std::time::{Duration, Instant};

use redis::{Cmd, Value};

use crate::acquire::{
    Acquisition, Confirmation, Grant, HoldView, Outcome, Reply, ServerWait, Step, Wait,
};
use crate::connection::Client;
use crate::error::Result;
use crate::lease::release::InflightCleanup;
use crate::lease::status::LossReason;
use crate::lease::{self, renew_once, split_acked, LeaseTiming, Renewal, Renewer};
use crate::reply;
use crate::retry::{classify, Failure, RetryPolicy};

/// What one kind of hold tells the driver.
pub(crate) trait Shell {
    fn client(&self) -> &Client;
    fn timing(&self) -> LeaseTiming;
    fn retry(&self) -> RetryPolicy;
    /// The owner's renewal, with the replica acknowledgement asked for.
    fn renewer(&self) -> &Renewer;
    /// The acquire request, without `WAIT` (the driver adds it).
    fn acquire_cmd(&self) -> Cmd;
    /// The owner's hold, from the kind's INFO command.
    async fn read_hold(&self) -> Result<Option<HoldView>, Failure>;
    /// The owner's hold before the first attempt (a caller-chosen owner's). Where grants of
    /// one owner do not add up (one hold per owner), none: a hold INFO shows after a lost
    /// reply is then the very one a retry would be answered, and is adopted.
    async fn read_baseline(&self) -> Result<Option<HoldView>, Failure> {
        self.read_hold().await
    }
    /// Gives back a grant that will not become a guard (best effort: it lapses otherwise).
    async fn give_back(&self, sweep: bool);
}

/// A confirmed grant.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held {
    pub token: u64,
    pub last_sent: Instant,
    pub sweep: bool,
}

/// Runs one acquisition to its end: the state machine decides, this performs its steps.
/// `Ok(None)`: not granted in time. `cleanup` is armed whenever an interrupted acquisition
/// must release what it may have left behind.
pub(crate) async fn drive(
    shell: &impl Shell,
    wait: Wait,
    generated: bool,
    cleanup: &mut InflightCleanup,
) -> Result<Option<Held>> {
    let client = shell.client();
    client.check_timing(&shell.timing())?;
    let (mut m, mut step) = Acquisition::new(
        wait,
        generated,
        client.resends(),
        shell.retry(),
        Instant::now(),
    );
    loop {
        // Set before every await: a cancelled acquisition cleans up as the machine says.
        cleanup.set_armed(m.needs_cleanup());
        step = match step {
            Step::ReadBaseline => {
                let read = shell.read_baseline().await;
                m.on_baseline(Instant::now(), read)
            }
            Step::ReadInfo => {
                let read = shell.read_hold().await;
                m.on_info(Instant::now(), read)
            }
            Step::Send(w) => {
                let reply = send(shell, w, m.deadline()).await;
                m.on_reply(Instant::now(), reply)
            }
            Step::Confirm(g) => {
                let found = confirm(shell, g).await;
                let short = match found {
                    Confirmation::NotReplicated { acked, wanted } => Some((acked, wanted)),
                    _ => None,
                };
                let next = m.on_confirm(Instant::now(), found);
                if let (Some((acked, wanted)), Step::Sleep(_)) = (short, &next) {
                    // A waiting caller would otherwise see nothing while this repeats.
                    let (key, owner) = shell.renewer().subject();
                    tracing::warn!(
                        key = %key,
                        owner = %owner,
                        acked,
                        wanted,
                        "the grant on {key} reached {acked} of {wanted} replica(s); \
                         it was released, asking again"
                    );
                }
                next
            }
            Step::Sleep(d) => {
                tokio::time::sleep(d).await;
                m.on_timeout(Instant::now())
            }
            Step::Done(outcome) => {
                cleanup.set_armed(m.needs_cleanup());
                return match outcome {
                    Outcome::Held {
                        token,
                        last_sent,
                        sweep,
                    } => Ok(Some(Held {
                        token,
                        last_sent,
                        sweep,
                    })),
                    Outcome::NotGranted => Ok(None),
                    Outcome::Failed(e) => Err(e),
                };
            }
        };
    }
}

async fn send(
    shell: &impl Shell,
    wait: ServerWait,
    deadline: Option<Instant>,
) -> Result<Reply, Failure> {
    let answer = send_acquire(
        shell.client(),
        shell.acquire_cmd(),
        wait,
        shell.renewer(),
        deadline,
    )
    .await;
    match answer {
        Ok((Value::Nil, _)) => Ok(Reply::NotGranted),
        Ok((v, acked)) => reply::token(&v)
            .map(|token| Reply::Granted { token, acked })
            .map_err(Failure::Fatal),
        Err(e) => Err(classify(e)),
    }
}

/// Proves a grant before it becomes a guard: enough replicas acknowledged it, and a renewal
/// if the wait used up much of the lease (or if the grant was adopted from INFO and
/// acknowledgements are asked for, so its replicas are unknown).
async fn confirm(shell: &impl Shell, g: Grant) -> Confirmation {
    let (client, timing, renew) = (shell.client(), shell.timing(), shell.renewer());
    if let (Some(a), Some(n)) = (renew.acks, g.acked) {
        if n < a.replicas {
            shell.give_back(g.sweep).await;
            client.suspect_master().await;
            return Confirmation::NotReplicated {
                acked: n,
                wanted: a.replicas,
            };
        }
    }
    let left = timing
        .valid_until(g.since)
        .saturating_duration_since(Instant::now());
    let unknown_acks = renew.acks.is_some() && g.acked.is_none();
    if left >= timing.ttl() * 2 / 3 && !unknown_acks {
        return Confirmation::Held(g.since);
    }
    // The server's answer is authoritative even when the local bound has passed: a renewal
    // that finds the hold proves it from its own send time on.
    let until = lease::confirm_deadline(&timing, g.since, client.command_timeout());
    match renew_once(client, renew, until, shell.retry()).await {
        Renewal::Renewed(at) => Confirmation::Held(at),
        // The server found the hold and refused only to pass its cap: held, as granted.
        Renewal::Capped { .. } => Confirmation::Held(g.since),
        Renewal::Lost(LossReason::Revoked) => Confirmation::Revoked,
        Renewal::Lost(reason) => Confirmation::Unsure(reason),
        Renewal::Unreplicated { acked } => {
            shell.give_back(g.sweep).await;
            Confirmation::NotReplicated {
                acked,
                wanted: renew.acks.map_or(0, |a| a.replicas),
            }
        }
    }
}

/// Sends an acquire command (`RWLOCK.*LOCK`, `LEADER.CAMPAIGN`, ...) that answers a token or
/// nil, waiting in the server as `wait` says, on the shared connection if it answers at once
/// and on a dedicated one otherwise. With acknowledgements asked for it is followed by
/// `WAIT replicas` on the same (dedicated) connection; a request that may be granted by a
/// hand-off is also followed by the owner's renewal, whose write makes sure that `WAIT`
/// counts the grant. (Redis 7.0 counts a hand-off in the waiting client's offset by itself:
/// `tests/replicas.rs` checks it; the renewal covers servers that may not.)
///
/// With a `deadline`, the wait for acknowledgements fits inside it: the server's `WAIT ms`
/// for the grant is shortened by the acknowledgement wait, so that both end by the deadline.
pub(crate) async fn send_acquire(
    client: &Client,
    mut cmd: Cmd,
    wait: ServerWait,
    renew: &Renewer,
    deadline: Option<Instant>,
) -> redis::RedisResult<(Value, Option<u32>)> {
    let margin = client.command_timeout();
    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let ack_wait = match (renew.acks, left) {
        (Some(a), Some(l)) => a.timeout.min(l).max(Duration::from_millis(1)),
        (Some(a), None) => a.timeout,
        (None, _) => Duration::ZERO,
    };
    let (blocking, limit) = match wait {
        ServerWait::Once => (false, Some(margin)),
        ServerWait::Ms(ms) => {
            let ms = if renew.acks.is_some() && left.is_some() {
                ms.saturating_sub(ack_wait.as_millis() as u64).max(1)
            } else {
                ms
            };
            cmd.arg("WAIT").arg(ms);
            (true, Some(Duration::from_millis(ms) + margin))
        }
        ServerWait::Forever => {
            cmd.arg("WAIT").arg(0);
            (true, None)
        }
    };
    match renew.acks {
        None if !blocking => client.query_within(&cmd, margin).await.map(|v| (v, None)),
        None => client.query_dedicated(&cmd, limit).await.map(|v| (v, None)),
        Some(a) => {
            let mut pipe = redis::pipe();
            pipe.add_command(cmd);
            if blocking {
                pipe.add_command(renew.cmd.clone());
            }
            pipe.add_command(a.wait_cmd(ack_wait));
            client
                .pipe_dedicated(&pipe, limit.map(|l| l + ack_wait))
                .await
                .and_then(split_acked)
                .map(|(v, n)| (v, Some(n)))
        }
    }
}

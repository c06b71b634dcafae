//! Renewing a lease: one renewal (with replica acknowledgement) and the watchdog that renews
//! until the lease is released or lost.

use std::time::{Duration, Instant};

use redis::{Cmd, Value};
use tokio::sync::watch;

use crate::connection::Client;
use crate::lease::status::{LeaseStatus, LossReason};
use crate::reply;
use crate::retry::{classify, Backoff, Failure, RetryPolicy};

use super::LeaseTiming;

/// Replica acknowledgement of grants and renewals: `WAIT replicas timeout` after each, on the
/// same connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Acks {
    pub replicas: u32,
    pub timeout: Duration,
}

impl Acks {
    pub(crate) fn new(replicas: u32, timeout: Duration) -> Option<Acks> {
        (replicas > 0).then_some(Acks { replicas, timeout })
    }

    /// `WAIT replicas ms`, waiting at most `left` (never 0, which would wait forever).
    pub(crate) fn wait_cmd(&self, left: Duration) -> Cmd {
        let ms = self
            .timeout
            .min(left)
            .as_millis()
            .clamp(1, u64::MAX as u128) as u64;
        redis::cmd("WAIT").arg(self.replicas).arg(ms).to_owned()
    }
}

/// Splits the replies of `[command..., WAIT]`: the first command's reply (errors raised) and
/// how many replicas acknowledged.
pub(crate) fn split_acked(replies: Vec<Value>) -> redis::RedisResult<(Value, u32)> {
    let mut it = replies.into_iter();
    let first = it.next().unwrap_or(Value::Nil).extract_error()?;
    let acked = it.last().unwrap_or(Value::Nil).extract_error()?;
    let acked = reply::int(&acked).unwrap_or(0).clamp(0, u32::MAX as i64) as u32;
    Ok((first, acked))
}

/// How a lease is renewed: the command, and the replica acknowledgement asked for.
#[derive(Clone, Debug)]
pub(crate) struct Renewer {
    pub cmd: Cmd,
    pub acks: Option<Acks>,
    /// A multi-key renewal (`RWLOCK.MRENEW`) answers how many keys it renewed: fewer than
    /// this means some hold is gone.
    pub expect: Option<i64>,
}

impl Renewer {
    /// The same renewal asking for `ttl_ms` instead (every renewal command ends with its ttl).
    pub(crate) fn with_ttl(&self, ttl_ms: u64) -> Renewer {
        let args: Vec<Vec<u8>> = self
            .cmd
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(b) => Some(b.to_vec()),
                _ => None,
            })
            .collect();
        let mut cmd = Cmd::new();
        for a in args.iter().take(args.len().saturating_sub(1)) {
            cmd.arg(a.as_slice());
        }
        cmd.arg(ttl_ms);
        Renewer {
            cmd,
            acks: self.acks,
            expect: self.expect,
        }
    }

    /// The key and the owner (or candidate) this renewal is for: its first two arguments.
    pub(crate) fn subject(&self) -> (String, String) {
        let mut args = self.cmd.args_iter().skip(1).filter_map(|a| match a {
            redis::Arg::Simple(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        });
        (
            args.next().unwrap_or_default(),
            args.next().unwrap_or_default(),
        )
    }
}

/// Outcome of one renewal with retries.
#[derive(Debug)]
pub(crate) enum Renewal {
    /// Renewed (and acknowledged as asked) by a request sent at that instant.
    Renewed(Instant),
    Lost(LossReason),
    /// Out of time, the last renewal reaching only `acked` replicas.
    Unreplicated {
        acked: u32,
    },
    /// The server renews it no further than its cap (its max hold): `left` remained until it
    /// when the refused request was `sent`.
    Capped {
        left: Duration,
        sent: Instant,
    },
}

/// Renews until success, a definitive answer, or `valid_until`. It gives up just before the
/// bound, so that the loss (and its reason) is published before the guard's own check of the
/// bound would report it as expired.
pub(crate) async fn renew_once(
    client: &Client,
    renew: &Renewer,
    valid_until: Instant,
    policy: RetryPolicy,
) -> Renewal {
    // A few ms ahead (at most 5 ms, a quarter of what is left): the last try's reply limit
    // ends there, and the watchdog still has time to publish the reason on a busy machine.
    let left = valid_until.saturating_duration_since(Instant::now());
    let stop = valid_until - (left / 4).min(Duration::from_millis(5));
    let mut backoff = Backoff::new_now(policy);
    // Replicas that acknowledged the last renewal the server granted, if too few.
    let mut short: Option<u32> = None;
    loop {
        let now = Instant::now();
        if now >= stop {
            return match short {
                Some(acked) => Renewal::Unreplicated { acked },
                None => Renewal::Lost(LossReason::Expired),
            };
        }
        let left = stop - now;
        let answer = match renew.acks {
            None => client
                .query_within(&renew.cmd, client.command_timeout().min(left))
                .await
                .map(|v| (v, None)),
            Some(a) => {
                let mut pipe = redis::pipe();
                pipe.add_command(renew.cmd.clone())
                    .add_command(a.wait_cmd(left));
                let limit = (client.command_timeout() + a.timeout).min(left);
                client
                    .pipe_dedicated(&pipe, Some(limit))
                    .await
                    .and_then(split_acked)
                    .map(|(v, acked)| (v, Some(acked)))
            }
        };
        match answer {
            Ok((Value::Nil, _)) => return Renewal::Lost(LossReason::Revoked),
            Ok((Value::Int(n), _)) if renew.expect.is_some_and(|all| n < all) => {
                return Renewal::Lost(LossReason::Revoked)
            }
            Ok((Value::Int(_), acked)) => match (renew.acks, acked) {
                (Some(a), Some(n)) if n < a.replicas => {
                    // Held on this server, but a failover could lose the renewal: it does not
                    // count. Perhaps this server is not the master any more.
                    let (key, owner) = renew.subject();
                    tracing::warn!(
                        key = %key,
                        owner = %owner,
                        acked = n,
                        wanted = a.replicas,
                        "the renewal of the lease on {key} reached {n} of {} replica(s); \
                         retrying until its bound",
                        a.replicas
                    );
                    short = Some(n);
                    client.suspect_master().await;
                }
                _ => return Renewal::Renewed(now),
            },
            Ok(v) => {
                let (key, owner) = renew.subject();
                tracing::warn!(key = %key, owner = %owner, "the renewal of the lease on {key} answered {v:?}");
                return Renewal::Lost(LossReason::Failed);
            }
            Err(e) => {
                if e.code() == Some("MAXHOLD") {
                    // The hold's cap: `MAXHOLD <ms left> ...`. Nothing changed on the server.
                    let left = e
                        .detail()
                        .and_then(|d| d.split_whitespace().next())
                        .and_then(|n| n.parse::<u64>().ok())
                        .unwrap_or(0);
                    return Renewal::Capped {
                        left: Duration::from_millis(left),
                        sent: now,
                    };
                }
                let (key, owner) = renew.subject();
                let text = e.to_string();
                if let Failure::Fatal(_) = classify(e) {
                    tracing::warn!(key = %key, owner = %owner, error = %text, "the renewal of the lease on {key} failed: {text}");
                    return Renewal::Lost(LossReason::Failed);
                }
                tracing::warn!(
                    key = %key,
                    owner = %owner,
                    error = %text,
                    "the renewal of the lease on {key} failed: {text}; retrying until its bound"
                );
            }
        }
        if let Some(d) = backoff.next_delay_now(Some(stop)) {
            tokio::time::sleep(d).await;
        }
    }
}

/// Keeps a lease alive until it is lost; publishes every new validity bound on `tx`.
/// Returns the reason of the loss (after publishing it). Cancel it by dropping the future.
pub(crate) async fn watchdog(
    client: Client,
    renew: Renewer,
    timing: LeaseTiming,
    policy: RetryPolicy,
    mut last_sent: Instant,
    tx: watch::Sender<LeaseStatus>,
) -> LossReason {
    let mut valid_until = timing.valid_until(last_sent);
    let reason = loop {
        let renew_at = (last_sent + timing.renew_every()).min(valid_until);
        tokio::time::sleep_until(renew_at.into()).await;
        match renew_once(&client, &renew, valid_until, policy).await {
            Renewal::Renewed(sent) => {
                last_sent = sent;
                valid_until = timing.valid_until(sent);
                // A loss published by someone else (a FENCED answer) is final.
                let still_held = tx.send_if_modified(|s| match s {
                    LeaseStatus::Held { .. } => {
                        *s = LeaseStatus::Held { valid_until };
                        true
                    }
                    _ => false,
                });
                if !still_held {
                    return LossReason::Revoked;
                }
            }
            Renewal::Lost(r) => break r,
            Renewal::Unreplicated { .. } => break LossReason::NotReplicated,
            Renewal::Capped { left, sent } => {
                // The last renewal: up to the cap. The lease then ends there, and is reported
                // lost (MaxHold) just before its bound.
                let last = last_renewal(&client, &renew, (left, sent), valid_until, policy).await;
                if let Some(until) = last {
                    let v = until;
                    if !tx.send_if_modified(|s| match s {
                        LeaseStatus::Held { .. } => {
                            *s = LeaseStatus::Held { valid_until: v };
                            true
                        }
                        _ => false,
                    }) {
                        return LossReason::Revoked;
                    }
                    valid_until = until;
                }
                let early = valid_until
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(5));
                tokio::time::sleep_until((valid_until - early).into()).await;
                break LossReason::MaxHold;
            }
        }
    };
    let published = tx.send_if_modified(|s| match s {
        LeaseStatus::Held { .. } => {
            *s = LeaseStatus::Lost(reason);
            true
        }
        _ => false,
    });
    if published {
        let (key, owner) = renew.subject();
        tracing::warn!(key = %key, owner = %owner, reason = %reason, "the lease on {key} was lost: {reason}");
    }
    reason
}

/// Renews once more, up to the hold's cap (`left` remained when the refused request was
/// `sent`; asked again from a new refusal if this one came too late): the new validity bound,
/// or `None` where none can be had (too short to be worth it, or it failed: the lease then
/// ends at its current bound).
async fn last_renewal(
    client: &Client,
    renew: &Renewer,
    (mut left, mut sent): (Duration, Instant),
    valid_until: Instant,
    policy: RetryPolicy,
) -> Option<Instant> {
    for _ in 0..3 {
        // A few ms short of the cap: the server refuses a lease past it by even one, and the
        // request takes a moment to arrive.
        let ttl = left
            .saturating_sub(sent.elapsed())
            .saturating_sub(Duration::from_millis(5) + left / 100);
        let timing = LeaseTiming::new(ttl).ok()?;
        if timing.valid_until(Instant::now()) <= valid_until {
            return None;
        }
        let again = renew.with_ttl(timing.ttl_ms());
        match renew_once(client, &again, valid_until, policy).await {
            Renewal::Renewed(at) => return Some(timing.valid_until(at)),
            Renewal::Capped { left: l, sent: s } => (left, sent) = (l, s),
            _ => return None,
        }
    }
    None
}

/// Waits until the status on `rx` is no longer `Held`, also noticing on its own when the
/// validity bound passes (should the watchdog be late).
pub(crate) async fn wait_lost(rx: &mut watch::Receiver<LeaseStatus>) -> LeaseStatus {
    loop {
        let status = *rx.borrow_and_update();
        match status {
            LeaseStatus::Held { valid_until } => {
                tokio::select! {
                    changed = rx.changed() => {
                        if changed.is_err() {
                            // The watchdog is gone without a word: trust only the bound.
                            tokio::time::sleep_until(valid_until.into()).await;
                            return LeaseStatus::Lost(LossReason::Expired);
                        }
                    }
                    _ = tokio::time::sleep_until(valid_until.into()) => {
                        if matches!(*rx.borrow(), LeaseStatus::Held { valid_until: v } if v <= Instant::now()) {
                            return LeaseStatus::Lost(LossReason::Expired);
                        }
                    }
                }
            }
            other => return other,
        }
    }
}

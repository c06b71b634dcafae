//! Fenced writes: `LEASE.EXEC key token command [arg ...]` runs `command` inside Redis only
//! while the hold with `token` is live on `key`, atomically with the check.

use std::time::{Duration, Instant};

use redis::{Arg, Cmd, FromRedisValue, Value};

use crate::connection::Client;
use crate::error::{Error, InvalidArgument, Result};
use crate::retry::{classify, Backoff, Failure, RetryPolicy};

/// `LEASE.EXEC key token` followed by every argument of `cmd` (its name first).
pub(crate) fn exec_cmd(key: &str, token: u64, cmd: &Cmd) -> Result<Cmd> {
    let mut out = redis::cmd("LEASE.EXEC");
    out.arg(key).arg(token);
    let mut any = false;
    for a in cmd.args_iter() {
        match a {
            Arg::Simple(bytes) => {
                out.arg(bytes);
                any = true;
            }
            _ => {
                return Err(Error::InvalidArgument(InvalidArgument::Unsupported(
                    "a cursor command inside LEASE.EXEC",
                )))
            }
        }
    }
    if !any {
        return Err(Error::InvalidArgument(InvalidArgument::Unsupported(
            "LEASE.EXEC needs a command",
        )));
    }
    Ok(out)
}

/// Sends `LEASE.EXEC key token cmd...` and answers the command's reply.
///
/// Retried only where the command certainly did not run (a refused connection, `LOADING`,
/// `READONLY`, `TRYAGAIN`, ...), until `deadline`. A reply that may have been lost is not asked
/// for again (the write may have run): that is [`Error::Unavailable`]. `FENCED` is
/// [`Error::Fenced`], never retried.
pub(crate) async fn exec<T: FromRedisValue>(
    client: &Client,
    key: &str,
    token: u64,
    cmd: &Cmd,
    deadline: Instant,
    policy: RetryPolicy,
) -> Result<T> {
    let full = exec_cmd(key, token, cmd)?;
    let mut backoff = Backoff::new_now(policy);
    let v: Value = loop {
        match client.query_within(&full, client.command_timeout()).await {
            Ok(v) => break v,
            Err(e) => match classify(e) {
                Failure::Fatal(e) => return Err(e),
                Failure::Transient {
                    uncertain: true,
                    err,
                } => return Err(backoff.give_up_now(err)),
                Failure::Transient { err, .. } => match backoff.next_delay_now(Some(deadline)) {
                    Some(d) => tokio::time::sleep(d).await,
                    None => return Err(backoff.give_up_now(err)),
                },
            },
        }
    };
    T::from_redis_value(v).map_err(|e| Error::Redis(e.into()))
}

/// How long an exec may retry: until the lease's validity bound, and at least one command
/// timeout (a refused connection right at the end of a lease still gets a try).
pub(crate) fn deadline(valid_until: Option<Instant>, timeout: Duration) -> Instant {
    let floor = Instant::now() + timeout;
    valid_until.map_or(floor, |v| v.max(floor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(c: &Cmd) -> Vec<String> {
        c.args_iter()
            .map(|a| match a {
                Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "<cursor>".into(),
            })
            .collect()
    }

    #[test]
    fn the_command_follows_key_and_token() {
        let inner = redis::cmd("SET").arg("{k}:data").arg(b"v\x00").to_owned();
        let c = exec_cmd("{k}", 42, &inner).unwrap();
        assert_eq!(
            words(&c),
            ["LEASE.EXEC", "{k}", "42", "SET", "{k}:data", "v\u{0}"]
        );
    }

    #[test]
    fn an_empty_command_is_refused_before_sending() {
        let err = exec_cmd("k", 1, &Cmd::new()).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
}

//! `redis-lease status KEY`: one key's holders and queue, whatever its kind.

use std::time::Duration;

use redis_lease_client::{Client, Holder, SemaphoreHolder, Waiting};

use crate::out;
use crate::Failure;

/// Prints `key`'s kind, holders and waiting requests in queue order (at most 100 are shown;
/// the count is every waiter).
pub async fn status(client: &Client, key: &str) -> Result<u8, Failure> {
    let kind = client.query(redis::cmd("TYPE").arg(key)).await?;
    let kind = redis::from_redis_value::<String>(kind).unwrap_or_default();
    out::line(format_args!("key: {key}"))?;
    let (queue, waiters) = match kind.as_str() {
        "lease-sem" => {
            let i = client.semaphore(key, 1).info().await?;
            out::line(format_args!("type: semaphore"))?;
            out::line(format_args!(
                "limit: {}  used: {}  token: {}",
                i.limit, i.used, i.token
            ))?;
            out::line(format_args!("holders: {}", i.holders.len()))?;
            for h in &i.holders {
                out::line(format_args!("  {}", semaphore_holder(h)))?;
            }
            (i.queue, i.waiters)
        }
        "lease-ldr" => {
            let i = client.election_info(key).await?;
            out::line(format_args!("type: election"))?;
            match &i.leader {
                Some(l) => out::line(format_args!(
                    "leader: {}\tterm={}\tttl={}ms",
                    l.candidate,
                    l.term,
                    l.ttl.as_millis()
                ))?,
                None => out::line(format_args!("leader: (none)"))?,
            }
            (i.queue, i.waiters)
        }
        _ => {
            let i = client.rwlock(key).info().await?;
            let mode = i.mode.map_or("none".to_string(), |m| m.to_string());
            out::line(format_args!("type: lock"))?;
            out::line(format_args!("mode: {mode}  token: {}", i.token))?;
            out::line(format_args!("holders: {}", i.holders.len()))?;
            for h in &i.holders {
                out::line(format_args!("  {}", lock_holder(h)))?;
            }
            (i.queue, i.waiters)
        }
    };
    out::line(format_args!("waiters: {waiters}"))?;
    for (n, w) in queue.iter().enumerate() {
        out::line(format_args!("  {:>3}. {}", n + 1, waiting(w)))?;
    }
    if (queue.len() as u64) < waiters {
        out::line(format_args!("  ... {} more", waiters - queue.len() as u64))?;
    }
    Ok(0)
}

/// `owner  write  count=1  ttl=5000ms  token=N` (and `cap=Nms` for a hold with a max hold).
pub fn lock_holder(h: &Holder) -> String {
    format!(
        "{}\t{}\tcount={}\tttl={}ms\ttoken={}{}",
        h.owner,
        h.mode,
        h.count,
        h.ttl.as_millis(),
        h.token,
        cap(h.cap)
    )
}

/// `owner  permits=2  ttl=5000ms  token=N` (and `cap=Nms`).
pub fn semaphore_holder(h: &SemaphoreHolder) -> String {
    format!(
        "{}\tpermits={}\tttl={}ms\ttoken={}{}",
        h.owner,
        h.permits,
        h.ttl.as_millis(),
        h.token,
        cap(h.cap)
    )
}

fn cap(cap: Option<Duration>) -> String {
    cap.map_or(String::new(), |c| format!("\tcap={}ms", c.as_millis()))
}

/// `owner  write  waited=1200ms  left=800ms` (left `-` for a wait without a limit).
pub fn waiting(w: &Waiting) -> String {
    let what = match (w.mode, w.permits) {
        (Some(m), _) => m.to_string(),
        (None, Some(p)) => format!("permits={p}"),
        (None, None) => String::new(),
    };
    let left = w
        .left
        .map_or("-".to_string(), |l| format!("{}ms", l.as_millis()));
    format!(
        "{}\t{what}\twaited={}ms\tleft={left}",
        w.owner,
        w.waited.as_millis()
    )
}

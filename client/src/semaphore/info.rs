//! What `SEMAPHORE.INFO` tells: the limit, the permits in use, the holders, the waiters.

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
use crate::reply;

/// One holder in [`SemaphoreInfo`].
///
/// ```
/// # fn f(h: &redis_lease_client::SemaphoreHolder) { println!("{} holds {}", h.owner, h.permits); }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemaphoreHolder {
    /// The owner id.
    pub owner: String,
    /// How many permits this hold takes.
    pub permits: u32,
    /// Lease time left.
    pub ttl: Duration,
    /// The fencing token of this hold.
    pub token: u64,
    /// Time left until the hold's cap (its first grant + its max hold), if it has one.
    pub cap: Option<Duration>,
}

/// The reply of `SEMAPHORE.INFO`. A key that does not exist reads as limit 0, nothing held.
///
/// ```no_run
/// # async fn demo(sem: redis_lease_client::Semaphore) -> redis_lease_client::Result<()> {
/// let info = sem.info().await?;
/// println!("{} of {} permits used, {} waiting", info.used, info.limit, info.waiters);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SemaphoreInfo {
    /// The key's limit (0 when the key does not exist).
    pub limit: u32,
    /// Permits held now.
    pub used: u32,
    /// The current holders, in grant order.
    pub holders: Vec<SemaphoreHolder>,
    /// The waiting requests, in queue order (at most 100: `waiters` counts them all).
    pub queue: Vec<crate::Waiting>,
    /// How many requests wait.
    pub waiters: u64,
    /// The last token handed out (0 if none yet).
    pub token: u64,
}

fn count(v: &Value) -> u64 {
    reply::int(v).unwrap_or(0).max(0) as u64
}

fn small(v: &Value) -> u32 {
    count(v).min(u32::MAX as u64) as u32
}

impl SemaphoreInfo {
    pub(crate) fn parse(v: Value) -> Result<SemaphoreInfo> {
        let bad = |what: &str| Error::Protocol(format!("SEMAPHORE.INFO: {what}"));
        let mut info = SemaphoreInfo::default();
        for (k, v) in reply::map(v).ok_or_else(|| bad("not a map"))? {
            match k.as_str() {
                "limit" => info.limit = small(&v),
                "used" => info.used = small(&v),
                "waiters" => info.waiters = count(&v),
                "queue" => info.queue = crate::queue_info::parse(v, "SEMAPHORE.INFO")?,
                "token" => info.token = count(&v),
                "holders" => {
                    for h in reply::array(v).ok_or_else(|| bad("holders"))? {
                        let mut holder = SemaphoreHolder {
                            owner: String::new(),
                            permits: 0,
                            ttl: Duration::ZERO,
                            token: 0,
                            cap: None,
                        };
                        for (hk, hv) in reply::map(h).ok_or_else(|| bad("holder"))? {
                            match hk.as_str() {
                                "owner" => holder.owner = reply::text(&hv).unwrap_or_default(),
                                "permits" => holder.permits = small(&hv),
                                "ttl" => holder.ttl = Duration::from_millis(count(&hv)),
                                "token" => holder.token = count(&hv),
                                "cap" => holder.cap = reply::cap(&hv),
                                _ => {}
                            }
                        }
                        info.holders.push(holder);
                    }
                }
                _ => {}
            }
        }
        Ok(info)
    }

    /// The hold of `owner`, if any (one per owner).
    ///
    /// ```
    /// let info = redis_lease_client::SemaphoreInfo::default();
    /// assert!(info.hold_of("me").is_none());
    /// ```
    pub fn hold_of(&self, owner: &str) -> Option<&SemaphoreHolder> {
        self.holders.iter().find(|h| h.owner == owner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn pairs(items: Vec<Value>) -> Vec<(Value, Value)> {
        let mut it = items.into_iter();
        let mut out = Vec::new();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            out.push((k, v));
        }
        out
    }

    #[test]
    fn resp2_and_resp3_replies_read_alike() {
        let holder = vec![
            bulk("owner"),
            bulk("a"),
            bulk("permits"),
            Value::Int(2),
            bulk("token"),
            Value::Int(7),
            bulk("ttl"),
            Value::Int(900),
        ];
        let top = |holders: Value| {
            vec![
                bulk("holders"),
                holders,
                bulk("limit"),
                Value::Int(3),
                bulk("token"),
                Value::Int(9),
                bulk("used"),
                Value::Int(2),
                bulk("waiters"),
                Value::Int(1),
            ]
        };
        let resp2 = Value::Array(top(Value::Array(vec![Value::Array(holder.clone())])));
        let resp3 = Value::Map(pairs(top(Value::Array(vec![Value::Map(pairs(holder))]))));
        for v in [resp2, resp3] {
            let info = SemaphoreInfo::parse(v).unwrap();
            assert_eq!(
                (info.limit, info.used, info.waiters, info.token),
                (3, 2, 1, 9)
            );
            let h = info.hold_of("a").unwrap();
            assert_eq!(
                (h.permits, h.ttl, h.token),
                (2, Duration::from_millis(900), 7)
            );
            assert!(info.hold_of("b").is_none());
        }
    }

    #[test]
    fn a_reply_that_is_not_a_map_is_a_protocol_error() {
        assert!(matches!(
            SemaphoreInfo::parse(Value::Int(1)),
            Err(Error::Protocol(_))
        ));
    }
}

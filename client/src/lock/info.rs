//! What `RWLOCK.INFO` tells: the mode, the holders, the waiters.

use std::fmt;
use std::time::Duration;

use redis::Value;

use crate::error::{Error, InvalidArgument, Result};
use crate::reply;

/// Read (shared) or write (exclusive).
///
/// ```
/// use redis_lease_client::LockMode;
/// assert_eq!(LockMode::Write.to_string(), "write");
/// assert_eq!("read".parse::<LockMode>().unwrap(), LockMode::Read);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockMode {
    /// Shared with other readers.
    Read,
    /// Exclusive.
    Write,
}

impl fmt::Display for LockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockMode::Read => "read",
            LockMode::Write => "write",
        })
    }
}

impl std::str::FromStr for LockMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "read" => Ok(LockMode::Read),
            "write" => Ok(LockMode::Write),
            other => Err(InvalidArgument::UnknownMode(other.to_string()).into()),
        }
    }
}

/// One holder in [`LockInfo`].
///
/// ```
/// # fn f(h: &redis_lease_client::Holder) { println!("{} holds {} x{}", h.owner, h.mode, h.count); }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The owner id.
    pub owner: String,
    /// The mode of this hold.
    pub mode: LockMode,
    /// How many (reentrant) grants it counts.
    pub count: u64,
    /// Lease time left.
    pub ttl: Duration,
    /// The fencing token of this hold.
    pub token: u64,
    /// Time left until the hold's cap (its first grant + its max hold), if it has one.
    pub cap: Option<Duration>,
}

/// The reply of `RWLOCK.INFO`.
///
/// ```no_run
/// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
/// let info = lock.info().await?;
/// println!("mode {:?}, {} holders, {} waiting, last token {}",
///          info.mode, info.holders.len(), info.waiters, info.token);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LockInfo {
    /// `None` when nobody holds the lock.
    pub mode: Option<LockMode>,
    /// The current holders.
    pub holders: Vec<Holder>,
    /// The waiting requests, in queue order (at most 100: `waiters` counts them all).
    pub queue: Vec<crate::Waiting>,
    /// How many requests wait.
    pub waiters: u64,
    /// The last token handed out (0 if none yet).
    pub token: u64,
}

impl LockInfo {
    pub(crate) fn parse(v: Value) -> Result<LockInfo> {
        let bad = |what: &str| Error::Protocol(format!("RWLOCK.INFO: {what}"));
        let fields = reply::map(v).ok_or_else(|| bad("not a map"))?;
        let mut info = LockInfo::default();
        for (k, v) in fields {
            match k.as_str() {
                "mode" => {
                    let m = reply::text(&v).ok_or_else(|| bad("mode"))?;
                    info.mode = if m == "none" {
                        None
                    } else {
                        Some(m.parse().map_err(|_| bad("mode"))?)
                    };
                }
                "waiters" => info.waiters = reply::int(&v).unwrap_or(0).max(0) as u64,
                "queue" => info.queue = crate::queue_info::parse(v, "RWLOCK.INFO")?,
                "token" => info.token = reply::int(&v).unwrap_or(0).max(0) as u64,
                "holders" => {
                    for h in reply::array(v).ok_or_else(|| bad("holders"))? {
                        let mut holder = Holder {
                            owner: String::new(),
                            mode: LockMode::Read,
                            count: 0,
                            ttl: Duration::ZERO,
                            token: 0,
                            cap: None,
                        };
                        for (hk, hv) in reply::map(h).ok_or_else(|| bad("holder"))? {
                            match hk.as_str() {
                                "owner" => holder.owner = reply::text(&hv).unwrap_or_default(),
                                "mode" => {
                                    holder.mode = reply::text(&hv)
                                        .and_then(|m| m.parse().ok())
                                        .ok_or_else(|| bad("holder mode"))?
                                }
                                "count" => {
                                    holder.count = reply::int(&hv).unwrap_or(1).max(0) as u64
                                }
                                "ttl" => {
                                    holder.ttl = Duration::from_millis(
                                        reply::int(&hv).unwrap_or(0).max(0) as u64,
                                    )
                                }
                                "token" => {
                                    holder.token = reply::int(&hv).unwrap_or(0).max(0) as u64
                                }
                                "cap" => holder.cap = crate::reply::cap(&hv),
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

    /// The hold of `owner` in `mode`, if any.
    ///
    /// ```
    /// let info = redis_lease_client::LockInfo::default();
    /// assert!(info.hold_of("me", redis_lease_client::LockMode::Read).is_none());
    /// ```
    pub fn hold_of(&self, owner: &str, mode: LockMode) -> Option<&Holder> {
        self.holders
            .iter()
            .find(|h| h.owner == owner && h.mode == mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn resp2_and_resp3_replies_read_alike() {
        let holder = vec![
            bulk("owner"),
            bulk("a"),
            bulk("mode"),
            bulk("write"),
            bulk("count"),
            Value::Int(2),
            bulk("ttl"),
            Value::Int(900),
            bulk("token"),
            Value::Int(7),
        ];
        let resp2 = Value::Array(vec![
            bulk("mode"),
            bulk("write"),
            bulk("holders"),
            Value::Array(vec![Value::Array(holder.clone())]),
            bulk("waiters"),
            Value::Int(3),
            bulk("token"),
            Value::Int(7),
        ]);
        let pairs = |items: Vec<Value>| {
            let mut it = items.into_iter();
            let mut out = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                out.push((k, v));
            }
            out
        };
        let resp3 = Value::Map(vec![
            (bulk("mode"), bulk("write")),
            (
                bulk("holders"),
                Value::Array(vec![Value::Map(pairs(holder))]),
            ),
            (bulk("waiters"), Value::Int(3)),
            (bulk("token"), Value::Int(7)),
        ]);
        for v in [resp2, resp3] {
            let info = LockInfo::parse(v).unwrap();
            assert_eq!(info.mode, Some(LockMode::Write));
            assert_eq!((info.waiters, info.token), (3, 7));
            let h = info.hold_of("a", LockMode::Write).unwrap();
            assert_eq!(
                (h.count, h.ttl, h.token),
                (2, Duration::from_millis(900), 7)
            );
            assert!(info.hold_of("a", LockMode::Read).is_none());
        }
    }

    #[test]
    fn an_unknown_mode_is_a_protocol_error_in_a_reply_and_bad_input_from_a_caller() {
        let v = Value::Array(vec![bulk("mode"), bulk("sideways")]);
        assert!(matches!(LockInfo::parse(v), Err(Error::Protocol(_))));
        assert!(matches!(
            "sideways".parse::<LockMode>(),
            Err(Error::InvalidArgument(InvalidArgument::UnknownMode(_)))
        ));
    }
}

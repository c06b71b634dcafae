//! The `queue` of `RWLOCK.INFO`, `SEMAPHORE.INFO` and `LEADER.INFO`: who waits, in order.

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
use crate::reply;
use crate::LockMode;

/// One waiting request, as `*.INFO` shows it (at most 100 per key; the count is `waiters`).
///
/// ```
/// # fn f(w: &redis_lease_client::Waiting) {
/// println!("{} waited {:?}, {:?} left", w.owner, w.waited, w.left);
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Waiting {
    /// The owner id (an election's candidate).
    pub owner: String,
    /// The mode asked for (locks only).
    pub mode: Option<LockMode>,
    /// The permits asked for (semaphores only).
    pub permits: Option<u32>,
    /// How long it has waited.
    pub waited: Duration,
    /// How long it may still wait; `None`: it waits without a limit (`WAIT 0`).
    pub left: Option<Duration>,
}

fn ms(v: &Value) -> Duration {
    Duration::from_millis(reply::int(v).unwrap_or(0).max(0) as u64)
}

/// The `queue` array of `what`'s reply.
pub(crate) fn parse(v: Value, what: &str) -> Result<Vec<Waiting>> {
    let bad = |field: &str| Error::Protocol(format!("{what}: queue {field}"));
    let mut out = Vec::new();
    for w in reply::array(v).ok_or_else(|| bad("is not an array"))? {
        let mut waiting = Waiting::default();
        for (k, v) in reply::map(w).ok_or_else(|| bad("entry is not a map"))? {
            match k.as_str() {
                "owner" | "candidate" => waiting.owner = reply::text(&v).unwrap_or_default(),
                "mode" => {
                    let m = reply::text(&v).and_then(|m| m.parse().ok());
                    waiting.mode = Some(m.ok_or_else(|| bad("mode"))?);
                }
                "permits" => {
                    let n = reply::int(&v).ok_or_else(|| bad("permits"))?;
                    waiting.permits = Some(n.clamp(0, u32::MAX.into()) as u32);
                }
                "waited" => waiting.waited = ms(&v),
                "left" => {
                    waiting.left = match reply::int(&v) {
                        Some(n) if n < 0 => None,
                        _ => Some(ms(&v)),
                    }
                }
                _ => {}
            }
        }
        out.push(waiting);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn entries_of_each_kind_read_in_order_with_no_limit_as_none() {
        let lock = Value::Array(vec![
            bulk("owner"),
            bulk("a"),
            bulk("mode"),
            bulk("write"),
            bulk("waited"),
            Value::Int(1500),
            bulk("left"),
            Value::Int(-1),
        ]);
        let sem = Value::Map(vec![
            (bulk("owner"), bulk("b")),
            (bulk("permits"), Value::Int(3)),
            (bulk("waited"), Value::Int(2)),
            (bulk("left"), Value::Int(900)),
        ]);
        let q = parse(Value::Array(vec![lock, sem]), "RWLOCK.INFO").unwrap();
        assert_eq!(q[0].owner, "a");
        assert_eq!(q[0].mode, Some(LockMode::Write));
        assert_eq!(q[0].waited, Duration::from_millis(1500));
        assert_eq!(q[0].left, None);
        assert_eq!((q[1].permits, q[1].mode), (Some(3), None));
        assert_eq!(q[1].left, Some(Duration::from_millis(900)));
        let bad = Value::Array(vec![Value::Array(vec![bulk("mode"), bulk("up")])]);
        assert!(matches!(parse(bad, "X"), Err(Error::Protocol(_))));
        assert!(matches!(parse(Value::Int(1), "X"), Err(Error::Protocol(_))));
    }
}

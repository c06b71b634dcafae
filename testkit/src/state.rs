//! A key's state as `RWLOCK.INFO` and `LEADER.CURRENT` report it, with each lease also as an
//! absolute deadline (local clock), so that two servers or two moments can be compared: holders,
//! tokens and terms exactly, deadlines within `DEADLINE_TOLERANCE_MS`.

use std::time::Duration;

use redis::{Connection, Value};

use crate::poll::{eventually, now_ms};
use crate::r;
use crate::reply::{array, field, int, pairs, text};

/// How far two readings of one absolute deadline may differ (query latency, not clock drift:
/// deadlines are stored absolute, so only the time between the reply and our clock counts).
pub const DEADLINE_TOLERANCE_MS: i64 = 250;

/// The tolerance for this run: a server under valgrind (`REDIS_LEASE_SLOW`) may take longer
/// than that between computing a ttl and the reply reaching us (300 ms was seen on a loaded
/// machine).
pub fn deadline_tolerance() -> i64 {
    if std::env::var_os("REDIS_LEASE_SLOW").is_some() {
        2_000
    } else {
        DEADLINE_TOLERANCE_MS
    }
}

/// One entry of `RWLOCK.INFO`'s holders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub owner: String,
    pub mode: String,
    pub count: i64,
    pub ttl: i64,
    pub token: i64,
    /// When the lease ends: the local clock at the reply plus `ttl`.
    pub deadline: i64,
}

/// A decoded `RWLOCK.INFO` reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    pub mode: String,
    /// Sorted by (owner, mode).
    pub holders: Vec<Holder>,
    pub waiters: i64,
    pub token: i64,
}

/// `LockInfo` without the ttls: (mode, [(owner, mode, count, token)], waiters, token).
pub type Shape = (String, Vec<(String, String, i64, i64)>, i64, i64);

impl LockInfo {
    /// The state without the ttls and deadlines (which run down by themselves).
    pub fn shape(&self) -> Shape {
        (
            self.mode.clone(),
            self.holders
                .iter()
                .map(|h| (h.owner.clone(), h.mode.clone(), h.count, h.token))
                .collect(),
            self.waiters,
            self.token,
        )
    }

    pub fn holder(&self, owner: &str, mode: &str) -> Option<&Holder> {
        self.holders
            .iter()
            .find(|h| h.owner == owner && h.mode == mode)
    }

    /// The holders' owners, sorted, each once.
    pub fn owners(&self) -> Vec<String> {
        let mut o: Vec<String> = self.holders.iter().map(|h| h.owner.clone()).collect();
        o.dedup();
        o
    }

    /// The largest token of any holder, or the key's last token if larger.
    pub fn max_token(&self) -> i64 {
        self.holders
            .iter()
            .map(|h| h.token)
            .max()
            .unwrap_or(0)
            .max(self.token)
    }
}

/// Decodes a `RWLOCK.INFO` reply (RESP2 or RESP3), deadlines from the local clock now.
pub fn parse_lock_info(v: &Value) -> LockInfo {
    let now = now_ms();
    let p = pairs(v);
    let mut holders: Vec<Holder> = array(field(&p, "holders"))
        .iter()
        .map(|h| {
            let hp = pairs(h);
            let ttl = int(field(&hp, "ttl"));
            Holder {
                owner: text(field(&hp, "owner")),
                mode: text(field(&hp, "mode")),
                count: int(field(&hp, "count")),
                ttl,
                token: int(field(&hp, "token")),
                deadline: now + ttl,
            }
        })
        .collect();
    holders.sort_by(|a, b| (&a.owner, &a.mode).cmp(&(&b.owner, &b.mode)));
    LockInfo {
        mode: text(field(&p, "mode")),
        holders,
        waiters: int(field(&p, "waiters")),
        token: int(field(&p, "token")),
    }
}

/// `RWLOCK.INFO key`, decoded.
pub fn lock_info(c: &mut Connection, key: &str) -> LockInfo {
    parse_lock_info(&r!(c, "RWLOCK.INFO", key))
}

/// Waits (up to 10 s) until `key` has exactly `n` waiters.
pub fn await_waiters(c: &mut Connection, key: &str, n: i64) {
    let mut last = -1;
    let ok = eventually(Duration::from_secs(10), || {
        last = lock_info(c, key).waiters;
        last == n
    });
    assert!(ok, "{key}: expected {n} waiters, still {last}");
}

/// How two readings of a lock differ: mode, holders (owner, mode, count, token) exactly and
/// deadlines within the tolerance; the key's last `token` only if `last_token`.
pub fn lock_diff(expected: &LockInfo, actual: &LockInfo, last_token: bool) -> Option<String> {
    if expected.mode != actual.mode {
        return Some(format!("mode {} then {}", expected.mode, actual.mode));
    }
    let key = |h: &Holder| (h.owner.clone(), h.mode.clone(), h.count, h.token);
    let e: Vec<_> = expected.holders.iter().map(key).collect();
    let a: Vec<_> = actual.holders.iter().map(key).collect();
    if e != a {
        return Some(format!(
            "holders (owner, mode, count, token) {e:?} then {a:?}"
        ));
    }
    for (x, y) in expected.holders.iter().zip(&actual.holders) {
        if (x.deadline - y.deadline).abs() > deadline_tolerance() {
            return Some(format!(
                "deadline of {} {} moved: {} then {} (ttl {} then {})",
                x.owner, x.mode, x.deadline, y.deadline, x.ttl, y.ttl
            ));
        }
    }
    if last_token && expected.token != actual.token {
        return Some(format!(
            "last token {} then {}",
            expected.token, actual.token
        ));
    }
    None
}

/// Asserts two readings of a lock agree (see `lock_diff`).
pub fn assert_same_lock(what: &str, expected: &LockInfo, actual: &LockInfo, last_token: bool) {
    if let Some(d) = lock_diff(expected, actual, last_token) {
        panic!("{what}: {d}\nexpected {expected:?}\nactual {actual:?}");
    }
}

/// LEADER.CURRENT: (candidate, term, absolute deadline).
#[derive(Clone, Debug)]
pub struct Leader {
    pub candidate: String,
    pub term: i64,
    pub ttl: i64,
    pub deadline: i64,
}

/// `LEADER.CURRENT key`, decoded; None when there is no leader.
pub fn leader(c: &mut Connection, key: &str) -> Option<Leader> {
    let v = r!(c, "LEADER.CURRENT", key);
    let now = now_ms();
    match v {
        Value::Nil => None,
        Value::Array(items) if items.len() == 3 => {
            let ttl = int(&items[2]);
            Some(Leader {
                candidate: text(&items[0]),
                term: int(&items[1]),
                ttl,
                deadline: now + ttl,
            })
        }
        other => panic!("LEADER.CURRENT {key}: {other:?}"),
    }
}

/// How two readings of an election differ: candidate and term exactly, deadline within the
/// tolerance.
pub fn leader_diff(expected: &Option<Leader>, actual: &Option<Leader>) -> Option<String> {
    match (expected, actual) {
        (None, None) => None,
        (Some(e), Some(a)) => {
            if (&e.candidate, e.term) != (&a.candidate, a.term) {
                Some(format!("leader {e:?} then {a:?}"))
            } else if (e.deadline - a.deadline).abs() > deadline_tolerance() {
                Some(format!(
                    "leader deadline moved: {} then {} (ttl {} then {})",
                    e.deadline, a.deadline, e.ttl, a.ttl
                ))
            } else {
                None
            }
        }
        _ => Some(format!("leader {expected:?} then {actual:?}")),
    }
}

pub fn assert_same_leader(what: &str, expected: &Option<Leader>, actual: &Option<Leader>) {
    if let Some(d) = leader_diff(expected, actual) {
        panic!("{what}: {d}");
    }
}

/// The state of some lock and election keys on one server.
#[derive(Clone, Debug)]
pub struct State {
    pub locks: Vec<(String, LockInfo)>,
    pub leaders: Vec<(String, Option<Leader>)>,
}

pub fn state(c: &mut Connection, locks: &[&str], leaders: &[&str]) -> State {
    State {
        locks: locks
            .iter()
            .map(|k| (k.to_string(), lock_info(c, k)))
            .collect(),
        leaders: leaders
            .iter()
            .map(|k| (k.to_string(), leader(c, k)))
            .collect(),
    }
}

/// The first difference between two `State`s of the same keys (see `lock_diff`, with the
/// last token, and `leader_diff`).
pub fn state_diff(expected: &State, actual: &State) -> Option<String> {
    for ((k, e), (_, a)) in expected.locks.iter().zip(&actual.locks) {
        if let Some(d) = lock_diff(e, a, true) {
            return Some(format!("{k}: {d}"));
        }
    }
    for ((k, e), (_, a)) in expected.leaders.iter().zip(&actual.leaders) {
        if let Some(d) = leader_diff(e, a) {
            return Some(format!("{k}: {d}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn holder(owner: &str, mode: &str, token: i64) -> Value {
        Value::Array(vec![
            bulk("owner"),
            bulk(owner),
            bulk("mode"),
            bulk(mode),
            bulk("count"),
            Value::Int(1),
            bulk("ttl"),
            Value::Int(1000),
            bulk("token"),
            Value::Int(token),
        ])
    }

    fn reply(holders: Vec<Value>) -> Value {
        Value::Array(vec![
            bulk("mode"),
            bulk("read"),
            bulk("holders"),
            Value::Array(holders),
            bulk("waiters"),
            Value::Int(0),
            bulk("token"),
            Value::Int(7),
        ])
    }

    #[test]
    fn holders_are_sorted_and_deadlines_absolute() {
        let before = now_ms();
        let i = parse_lock_info(&reply(vec![holder("b", "read", 7), holder("a", "read", 6)]));
        assert_eq!(i.owners(), ["a", "b"]);
        assert_eq!(i.max_token(), 7);
        let d = i.holder("a", "read").unwrap().deadline;
        assert!(d >= before + 1000 && d <= now_ms() + 1000);
    }

    #[test]
    fn a_changed_token_is_a_difference_and_a_close_deadline_is_not() {
        let a = parse_lock_info(&reply(vec![holder("a", "read", 6)]));
        let mut b = a.clone();
        b.holders[0].deadline += DEADLINE_TOLERANCE_MS;
        assert_eq!(lock_diff(&a, &b, true), None);
        b.holders[0].deadline += 1;
        assert!(lock_diff(&a, &b, true).unwrap().contains("deadline"));
        let mut c = a.clone();
        c.holders[0].token = 9;
        assert!(lock_diff(&a, &c, false).unwrap().contains("holders"));
        let mut d = a.clone();
        d.token = 8;
        assert_eq!(lock_diff(&a, &d, false), None);
        assert!(lock_diff(&a, &d, true).unwrap().contains("last token"));
    }
}

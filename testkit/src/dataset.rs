//! Two servers' whole datasets, key by key: a replica's must equal its master's (every key,
//! its type, its DUMP, and for a lock its RWLOCK.INFO without the ttls and the waiters).

use std::collections::BTreeMap;
use std::time::Duration;

use redis::{Connection, Value};

use crate::poll::eventually;
use crate::r;
use crate::reply::{array, text};
use crate::server::{conn, Server};
use crate::state::lock_info;

/// Key -> what it is, on db 0.
pub type Dataset = BTreeMap<String, String>;

/// Every key of db 0 with its type, its DUMP (hex), and a lock's mode, holders and last token.
pub fn dataset(c: &mut Connection) -> Dataset {
    let mut keys: Vec<String> = array(&r!(c, "KEYS", "*")).iter().map(text).collect();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let ty = text(&r!(c, "TYPE", &k));
            let dump = match r!(c, "DUMP", &k) {
                Value::BulkString(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
                Value::Nil => "gone".to_string(),
                other => format!("{other:?}"),
            };
            // Waiters are connections of one server, not data: left out.
            let state = if ty == "lease-rwl" {
                let (mode, holders, _waiters, token) = lock_info(c, &k).shape();
                format!(" {mode} {holders:?} last {token}")
            } else {
                String::new()
            };
            (k, format!("{ty}{state} dump {dump}"))
        })
        .collect()
}

/// The first difference between two datasets, if any.
pub fn dataset_diff(a: &Dataset, b: &Dataset) -> Option<String> {
    if a.len() != b.len() || a.keys().ne(b.keys()) {
        return Some(format!(
            "keys {:?} vs {:?}",
            a.keys().collect::<Vec<_>>(),
            b.keys().collect::<Vec<_>>()
        ));
    }
    a.iter()
        .zip(b)
        .find(|((_, x), (_, y))| x != y)
        .map(|((k, x), (_, y))| format!("{k}: {x} vs {y}"))
}

/// Waits (up to `limit`) until `a` and `b` hold the same dataset (and DBSIZE); panics with the
/// last difference otherwise. Answers the dataset.
pub fn converge(a: &Server, b: &Server, limit: Duration, what: &str) -> Dataset {
    let (mut ca, mut cb) = (conn(a), conn(b));
    let mut last = String::new();
    let mut seen = Dataset::new();
    let same = eventually(limit, || {
        let (x, y) = (dataset(&mut ca), dataset(&mut cb));
        let (nx, ny) = (crate::cmd::dbsize(&mut ca), crate::cmd::dbsize(&mut cb));
        match dataset_diff(&x, &y) {
            Some(d) => last = d,
            None if nx != ny => last = format!("DBSIZE {nx} vs {ny}"),
            None => {
                seen = x;
                return true;
            }
        }
        false
    });
    assert!(
        same,
        "{what}: datasets differ after {limit:?}: {last}\nlog of :{}:\n{}\nlog of :{}:\n{}",
        a.port,
        a.log(),
        b.port,
        b.log()
    );
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_key_or_another_value_is_a_difference() {
        let a: Dataset = [("k".to_string(), "x".to_string())].into();
        let b: Dataset = [("k".to_string(), "y".to_string())].into();
        assert!(dataset_diff(&a, &b).unwrap().starts_with("k: x vs y"));
        assert!(dataset_diff(&a, &Dataset::new())
            .unwrap()
            .starts_with("keys"));
        assert_eq!(dataset_diff(&a, &a.clone()), None);
    }
}

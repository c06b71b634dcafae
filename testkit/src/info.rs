//! `INFO` readers: one field, the whole `lease` section, and waits on server-wide counters.

use std::collections::HashMap;
use std::time::Duration;

use redis::Connection;

use crate::poll::eventually;
use crate::r;
use crate::reply::text;

/// The text of `INFO section`.
fn section(c: &mut Connection, section: &str) -> String {
    text(&r!(c, "INFO", section))
}

/// Field -> value of an INFO text (comment and blank lines skipped).
fn fields(info: &str) -> HashMap<String, String> {
    info.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// `INFO lease` as field -> value.
pub fn lease_info(c: &mut Connection) -> HashMap<String, String> {
    fields(&section(c, "lease"))
}

/// One field of `INFO section` (e.g. `info_field(c, "replication", "role")`), if present.
pub fn info_field(c: &mut Connection, section_name: &str, field: &str) -> Option<String> {
    fields(&section(c, section_name)).remove(field)
}

/// An integer field of `INFO section`; panics if it is missing or not an integer.
pub fn info_int(c: &mut Connection, section: &str, field: &str) -> i64 {
    info_field(c, section, field)
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
        .parse()
        .unwrap_or_else(|_| panic!("INFO {section} {field} is not an integer"))
}

/// Waits (up to 10 s) until `lease_waiters` on the server is `n`.
pub fn await_lease_waiters(c: &mut Connection, n: i64) {
    assert!(
        eventually(Duration::from_secs(10), || info_int(
            c,
            "lease",
            "lease_waiters"
        ) == n),
        "lease_waiters never reached {n}"
    );
}

/// Waits (up to 30 s) until no background save or AOF rewrite runs or is scheduled.
pub fn wait_persistence_idle(c: &mut Connection) {
    let idle = eventually(Duration::from_secs(30), || {
        info_int(c, "persistence", "rdb_bgsave_in_progress") == 0
            && info_int(c, "persistence", "aof_rewrite_in_progress") == 0
            && info_int(c, "persistence", "aof_rewrite_scheduled") == 0
    });
    assert!(idle, "background save/rewrite did not finish");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_skip_headers_and_trim_values() {
        let f = fields("# Lease\r\nlease_keys:3\r\nlease_holders:4\r\n\r\n");
        assert_eq!(f.len(), 2);
        assert_eq!(f["lease_keys"], "3");
        assert_eq!(f["lease_holders"], "4");
    }

    #[test]
    fn a_field_is_matched_whole_not_by_prefix() {
        let f = fields("lease_waiters_left:1\r\nlease_waiters:2\r\n");
        assert_eq!(f["lease_waiters"], "2");
    }
}

//! What a server spends: memory (`INFO memory`) and command time (`INFO commandstats`).

use std::collections::HashMap;

use redis::Connection;

use crate::info::{info_field, info_int};

/// `used_memory`, in bytes.
pub fn used_memory(c: &mut Connection) -> i64 {
    info_int(c, "memory", "used_memory")
}

/// One command's `INFO commandstats` entry (`calls`, `usec`, `usec_per_call`, ...), empty if
/// the command has not run since the last `CONFIG RESETSTAT`.
pub fn command_stats(c: &mut Connection, command: &str) -> HashMap<String, f64> {
    let name = format!("cmdstat_{}", command.to_ascii_lowercase());
    info_field(c, "commandstats", &name)
        .map(|v| parse_stats(&v))
        .unwrap_or_default()
}

fn parse_stats(v: &str) -> HashMap<String, f64> {
    v.split(',')
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commandstats_entry_parses_by_name() {
        let s = parse_stats("calls=12,usec=34,usec_per_call=2.83,rejected_calls=0,failed_calls=1");
        assert_eq!(s["calls"], 12.0);
        assert_eq!(s["usec_per_call"], 2.83);
        assert_eq!(s["failed_calls"], 1.0);
    }
}

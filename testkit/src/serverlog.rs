//! What a server's log may not contain after a test: a crash report, a failed assertion, a
//! module panic; and what every line must be: printable ASCII (owners and keys are escaped).

use crate::server::Server;

/// Lines that mean the server or the module broke.
pub const BROKEN: &[&str] = &[
    "ASSERTION FAILED",
    // The detail line of a failed assertion ("==> networking.c:2066 'c->duration == 0' ...").
    "==> ",
    "Guru Meditation",
    "crashed by signal",
    "REDIS BUG REPORT",
    "VALKEY BUG REPORT",
    "panicked",
];

/// The log's lines that match one of `BROKEN`.
pub fn broken_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| BROKEN.iter().any(|b| l.contains(b)))
        .collect()
}

/// Lines that are not printable ASCII (a tab is allowed), with their line number.
pub fn unprintable_lines(log: &[u8]) -> Vec<(usize, String)> {
    log.split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, l)| {
            l.iter()
                .any(|&b| !(0x20..0x7f).contains(&b) && b != b'\t' && b != b'\r')
        })
        .map(|(i, l)| (i + 1, l.escape_ascii().to_string()))
        .collect()
}

/// Panics (with the log) if the server's log shows a crash, an assertion or a panic.
pub fn assert_log_clean(s: &Server, what: &str) {
    let log = s.log();
    let bad = broken_lines(&log);
    assert!(
        bad.is_empty(),
        "{what}: the server log shows {bad:?}; log:\n{log}"
    );
}

/// Panics if any line of the server's log is not printable ASCII.
pub fn assert_log_printable(s: &Server, what: &str) {
    let raw = std::fs::read(s.dir().join("redis.log")).unwrap_or_default();
    let bad = unprintable_lines(&raw);
    assert!(
        bad.is_empty(),
        "{what}: log lines that are not printable ASCII: {bad:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_and_panic_lines_are_found() {
        let log = "1:M ok\n1:M lease: the timer panicked (x); it was abandoned\n=== REDIS BUG REPORT START\n";
        assert_eq!(broken_lines(log).len(), 2);
        assert!(broken_lines("1:M Ready to accept connections tcp\n").is_empty());
    }

    #[test]
    fn a_nul_or_a_high_byte_makes_a_line_unprintable() {
        let log = b"fine\tline\r\nlease: '\0'\nlease: '\xff'\n";
        let bad = unprintable_lines(log);
        assert_eq!(bad.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![2, 3]);
    }
}

//! Argument parsing: pure functions over byte slices, so every rule is unit-tested without a
//! server. Every failure is an error reply text that says what is wrong.

/// A parsed `[WAIT ms]` tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Try once.
    No,
    /// Wait up to this many ms; 0 waits without limit.
    Ms(u64),
}

/// An argument quoted in an error reply: ASCII only (other bytes escaped, as `\xe9`), at most
/// 64 bytes, so the reply is valid whatever the client sent.
pub fn quoted(bytes: &[u8]) -> String {
    bytes[..bytes.len().min(64)].escape_ascii().to_string()
}

/// The longest WAIT accepted (about 30 years): Redis adds it to its clock.
pub const MAX_WAIT_MS: u64 = 1_000_000_000_000;

/// Parses a strict decimal integer as Redis does: optional `-`, digits, no spaces or `+`.
pub fn integer(bytes: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(bytes).ok()?;
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return None;
    }
    s.parse().ok()
}

/// An owner or candidate id: 1 to `max_len` bytes.
pub fn id<'a>(bytes: &'a [u8], what: &str, max_len: usize) -> Result<&'a [u8], String> {
    if bytes.is_empty() {
        return Err(format!("ERR {what} must not be empty"));
    }
    if bytes.len() > max_len {
        return Err(format!(
            "ERR {what} is {} bytes long; the limit is {max_len} (lease.max-id-length)",
            bytes.len()
        ));
    }
    Ok(bytes)
}

/// A lease ttl in ms: an integer from 1 to `max_ttl`.
pub fn ttl(bytes: &[u8], max_ttl: u64) -> Result<u64, String> {
    match integer(bytes) {
        Some(n) if n >= 1 && n as u64 <= max_ttl => Ok(n as u64),
        _ => Err(format!(
            "ERR ttl must be an integer from 1 to {max_ttl} ms (lease.max-ttl), got '{}'",
            quoted(bytes)
        )),
    }
}

/// The options after the fixed arguments: `[WAIT ms]`.
pub fn wait_option(rest: &[&[u8]]) -> Result<Wait, String> {
    let mut wait = Wait::No;
    let mut i = 0;
    while i < rest.len() {
        if !rest[i].eq_ignore_ascii_case(b"WAIT") {
            return Err(format!(
                "ERR unknown option '{}' (the only option is WAIT ms)",
                quoted(rest[i])
            ));
        }
        if wait != Wait::No {
            return Err("ERR WAIT given more than once".into());
        }
        let Some(value) = rest.get(i + 1) else {
            return Err("ERR WAIT needs a value in ms (0 waits without limit)".into());
        };
        wait = match integer(value) {
            Some(n) if n >= 0 && n as u64 <= MAX_WAIT_MS => Wait::Ms(n as u64),
            Some(n) if n >= 0 => {
                return Err(format!("ERR WAIT is out of range (max {MAX_WAIT_MS} ms)"))
            }
            _ => {
                return Err(format!(
                    "ERR WAIT must be an integer >= 0 ms, got '{}'",
                    quoted(value)
                ))
            }
        };
        i += 2;
    }
    Ok(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_strict() {
        assert_eq!(integer(b"0"), Some(0));
        assert_eq!(integer(b"-12"), Some(-12));
        assert_eq!(integer(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"1.5",
            b"01",
            b"9223372036854775808",
            b"1e3",
            b"\xff",
        ] {
            assert_eq!(integer(bad), None, "{:?}", bad);
        }
    }

    #[test]
    fn ttl_range() {
        assert_eq!(ttl(b"1", 10), Ok(1));
        assert_eq!(ttl(b"10", 10), Ok(10));
        assert!(ttl(b"11", 10).unwrap_err().contains("from 1 to 10"));
        assert!(ttl(b"0", 10).is_err());
        assert!(ttl(b"-5", 10).is_err());
        assert!(ttl(b"abc", 10).is_err());
    }

    #[test]
    fn quoted_arguments_are_ascii() {
        assert_eq!(quoted("1é".as_bytes()), "1\\xc3\\xa9");
        assert!(ttl("1é".as_bytes(), 10).unwrap_err().is_ascii());
        assert!(wait_option(&["é".as_bytes()]).unwrap_err().is_ascii());
        assert_eq!(quoted(&[b'a'; 100]).len(), 64);
    }

    #[test]
    fn ids() {
        assert!(id(b"", "owner", 4).unwrap_err().contains("empty"));
        assert!(id(b"abcde", "owner", 4).unwrap_err().contains("limit is 4"));
        assert_eq!(id(b"abcd", "owner", 4), Ok(&b"abcd"[..]));
    }

    #[test]
    fn wait_options() {
        assert_eq!(wait_option(&[]), Ok(Wait::No));
        assert_eq!(wait_option(&[b"wait", b"0"]), Ok(Wait::Ms(0)));
        assert_eq!(wait_option(&[b"WAIT", b"250"]), Ok(Wait::Ms(250)));
        assert!(wait_option(&[b"WAIT"])
            .unwrap_err()
            .contains("needs a value"));
        assert!(wait_option(&[b"WAIT", b"-1"]).is_err());
        assert!(wait_option(&[b"WAIT", b"x"]).is_err());
        assert!(wait_option(&[b"WAIT", b"99999999999999999"])
            .unwrap_err()
            .contains("range"));
        assert!(wait_option(&[b"WAIT", b"1", b"WAIT", b"2"]).is_err());
        assert!(wait_option(&[b"NX"])
            .unwrap_err()
            .contains("unknown option"));
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        fn arg() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..40),
                "-?[0-9]{0,25}".prop_map(String::into_bytes),
                Just(b"WAIT".to_vec()),
                Just(b"wait".to_vec()),
                Just(i64::MIN.to_string().into_bytes()),
                Just(u64::MAX.to_string().into_bytes()),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(20_000))]

            /// Any bytes: no panic, and what is accepted is in range.
            #[test]
            fn parsers_never_panic(a in arg(), rest in proptest::collection::vec(arg(), 0..5), max in 1u64..100_000) {
                if let Ok(t) = ttl(&a, max) {
                    prop_assert!((1..=max).contains(&t));
                }
                if let Ok(o) = id(&a, "owner", max as usize) {
                    prop_assert!(!o.is_empty() && o.len() <= max as usize);
                }
                let refs: Vec<&[u8]> = rest.iter().map(|r| r.as_slice()).collect();
                if let Ok(Wait::Ms(ms)) = wait_option(&refs) {
                    prop_assert!(ms <= MAX_WAIT_MS);
                }
                if let Err(e) = wait_option(&refs) {
                    prop_assert!(e.is_ascii());
                }
                prop_assert!(quoted(&a).is_ascii());
                let _ = crate::apply::parse_ops(&refs);
            }

            /// Well-formed LEASE.APPLY ops always parse, whatever the owner bytes.
            #[test]
            fn apply_ops_parse(owner in proptest::collection::vec(any::<u8>(), 1..40), d in 0..i64::MAX, t in 0..i64::MAX) {
                let (d, t) = (d.to_string().into_bytes(), t.to_string().into_bytes());
                let args: Vec<&[u8]> = vec![b"GRANT", &owner, b"write", &d, &t, b"RELEASE", &owner, b"RENEW", &owner, &d];
                prop_assert_eq!(crate::apply::parse_ops(&args).map(|o| o.len()), Ok(3));
            }
        }
    }
}

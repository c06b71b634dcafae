//! Argument parsing: pure functions over byte slices, so every rule is unit-tested without a
//! server. Every failure is an error reply text that says what is wrong.

use crate::text::quoted;

/// A parsed `[WAIT ms]` option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Try once.
    No,
    /// Wait up to this many ms; 0 waits without limit.
    Ms(u64),
}

/// The options after a request's fixed arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    pub wait: Wait,
    /// `PERMITS n` (semaphores only; 1 when absent).
    pub permits: u32,
    /// `MAXHOLD ms`: the most ms the hold may last from its first grant (0 when absent).
    pub max_hold: u64,
}

/// The longest WAIT accepted (about 30 years).
pub const MAX_WAIT_MS: u64 = 1_000_000_000_000;

/// The largest semaphore limit.
pub const MAX_LIMIT: u32 = i32::MAX as u32;

/// Parses a strict decimal integer as Redis does: optional `-`, digits, no spaces or `+`, no
/// leading zero. One pass over the bytes (every acquire parses its ttl).
pub fn integer(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    match digits {
        [] => return None,
        [b'0', _, ..] => return None,
        _ => {}
    }
    let mut n: i64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n.checked_mul(10)?;
        n = if negative {
            n.checked_sub(i64::from(d))?
        } else {
            n.checked_add(i64::from(d))?
        };
    }
    Some(n)
}

/// An owner or candidate id for a new hold: 1 to `max_len` bytes.
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
            "ERR ttl must be an integer from 1 to {max_ttl} ms (lease.max-ttl, and \
             lease.quarantine while it is set), got '{}'",
            quoted(bytes)
        )),
    }
}

/// A semaphore limit: an integer from 1 to 2^31-1.
pub fn limit(bytes: &[u8]) -> Result<u32, String> {
    match integer(bytes) {
        Some(n) if n >= 1 && n <= i64::from(MAX_LIMIT) => Ok(n as u32),
        _ => Err(format!(
            "ERR limit must be an integer from 1 to {MAX_LIMIT}, got '{}'",
            quoted(bytes)
        )),
    }
}

fn wait_ms(value: &[u8]) -> Result<u64, String> {
    match integer(value) {
        Some(n) if n >= 0 && n as u64 <= MAX_WAIT_MS => Ok(n as u64),
        Some(n) if n >= 0 => Err(format!("ERR WAIT is out of range (max {MAX_WAIT_MS} ms)")),
        _ => Err(format!(
            "ERR WAIT must be an integer >= 0 ms, got '{}'",
            quoted(value)
        )),
    }
}

/// A `MAXHOLD` value: an integer from 1 to `MAX_WAIT_MS` ms.
fn max_hold(value: &[u8]) -> Result<u64, String> {
    match integer(value) {
        Some(n) if n >= 1 && n as u64 <= MAX_WAIT_MS => Ok(n as u64),
        _ => Err(format!(
            "ERR MAXHOLD must be an integer from 1 to {MAX_WAIT_MS} ms, got '{}'",
            quoted(value)
        )),
    }
}

/// The options after the fixed arguments: `[WAIT ms]`, `[MAXHOLD ms]`, and `[PERMITS n]`
/// (1 to `limit`) where `limit` is given (semaphores). Each may be given once, in any order.
pub fn options(rest: &[&[u8]], limit: Option<u32>) -> Result<Options, String> {
    let mut out = Options {
        wait: Wait::No,
        permits: 1,
        max_hold: 0,
    };
    let (mut seen_wait, mut seen_permits, mut seen_max) = (false, false, false);
    let mut i = 0;
    while i < rest.len() {
        let name = rest[i];
        if name.eq_ignore_ascii_case(b"MAXHOLD") {
            if seen_max {
                return Err("ERR MAXHOLD given more than once".into());
            }
            seen_max = true;
            let Some(value) = rest.get(i + 1) else {
                return Err("ERR MAXHOLD needs a value in ms".into());
            };
            out.max_hold = max_hold(value)?;
            i += 2;
            continue;
        }
        let is_wait = name.eq_ignore_ascii_case(b"WAIT");
        let is_permits = limit.is_some() && name.eq_ignore_ascii_case(b"PERMITS");
        if !is_wait && !is_permits {
            let known = if limit.is_some() {
                "WAIT ms, MAXHOLD ms and PERMITS n"
            } else {
                "WAIT ms and MAXHOLD ms"
            };
            return Err(format!(
                "ERR unknown option '{}' (the options are {known})",
                quoted(name)
            ));
        }
        let word = if is_wait { "WAIT" } else { "PERMITS" };
        if (is_wait && seen_wait) || (is_permits && seen_permits) {
            return Err(format!("ERR {word} given more than once"));
        }
        let Some(value) = rest.get(i + 1) else {
            return Err(if is_wait {
                "ERR WAIT needs a value in ms (0 waits without limit)".into()
            } else {
                "ERR PERMITS needs a value".into()
            });
        };
        if is_wait {
            seen_wait = true;
            out.wait = Wait::Ms(wait_ms(value)?);
        } else {
            seen_permits = true;
            let max = limit.unwrap_or(1);
            out.permits = match integer(value) {
                Some(n) if n >= 1 && n <= i64::from(max) => n as u32,
                _ => {
                    return Err(format!(
                        "ERR PERMITS must be an integer from 1 to the limit ({max}), got '{}'",
                        quoted(value)
                    ))
                }
            };
        }
        i += 2;
    }
    Ok(out)
}

/// The options of `RWLOCK.MLOCK`: `[READ]` (once, anywhere among them), then as
/// [`options`] for a lock. True with `READ`.
pub fn multi_options(rest: &[&[u8]]) -> Result<(bool, Options), String> {
    let mut read = false;
    let mut others: Vec<&[u8]> = Vec::with_capacity(rest.len());
    let mut i = 0;
    while i < rest.len() {
        if rest[i].eq_ignore_ascii_case(b"READ") {
            if read {
                return Err("ERR READ given more than once".into());
            }
            read = true;
            i += 1;
            continue;
        }
        // An option and its value, kept together (a value may read "READ").
        others.extend(rest[i..].iter().take(2));
        i += 2;
    }
    Ok((read, options(&others, None)?))
}

/// The key count of a multi-key command: 1 to `MAX_KEYS`, and no more than the arguments left.
pub fn numkeys(bytes: &[u8], available: usize) -> Result<usize, String> {
    match integer(bytes) {
        Some(n) if n >= 1 && n as u64 <= MAX_KEYS as u64 && n as usize <= available => {
            Ok(n as usize)
        }
        Some(n) if n >= 1 && n as u64 <= MAX_KEYS as u64 => Err(format!(
            "ERR numkeys is {n} but only {available} arguments follow it"
        )),
        _ => Err(format!(
            "ERR numkeys must be an integer from 1 to {MAX_KEYS}, got '{}'",
            quoted(bytes)
        )),
    }
}

/// The most keys one multi-key command takes.
pub const MAX_KEYS: usize = 64;

/// The options of a lock or election request: `[WAIT ms]`.
#[cfg(test)]
pub fn wait_option(rest: &[&[u8]]) -> Result<Wait, String> {
    options(rest, None).map(|o| o.wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parser Redis's rules were first written with (text, then `str::parse`).
    fn integer_by_str(bytes: &[u8]) -> Option<i64> {
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

    #[test]
    fn integers_parse_as_the_text_parser_does() {
        let edges: [&[u8]; 12] = [
            b"-9223372036854775808",
            b"-9223372036854775809",
            b"9223372036854775807",
            b"9223372036854775808",
            b"-0",
            b"-00",
            b"0",
            b"00",
            b"-",
            b"--1",
            b"99999999999999999999",
            b"1\x00",
        ];
        for e in edges {
            assert_eq!(integer(e), integer_by_str(e), "{e:?}");
        }
        // Random short strings over the bytes that matter (digits, '-', '0', others).
        let alphabet = b"0123456789-0+ a\xff";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 22) as usize;
            let s: Vec<u8> = (0..len)
                .map(|i| alphabet[((x >> (i % 8 * 8)) as usize + i) % alphabet.len()])
                .collect();
            assert_eq!(integer(&s), integer_by_str(&s), "{s:?}");
        }
    }

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
        assert!(ttl("1é".as_bytes(), 10).unwrap_err().is_ascii());
        assert!(wait_option(&["é".as_bytes()]).unwrap_err().is_ascii());
        assert!(ttl(b"\0", 10).unwrap_err().contains("\\x00"));
    }

    #[test]
    fn semaphore_options() {
        let o = |a: &[&[u8]], l| options(a, Some(l));
        assert_eq!(o(&[], 5).unwrap().permits, 1);
        assert_eq!(o(&[b"permits", b"5"], 5).unwrap().permits, 5);
        assert!(o(&[b"PERMITS", b"6"], 5)
            .unwrap_err()
            .contains("to the limit (5)"));
        assert!(o(&[b"PERMITS", b"0"], 5).is_err());
        let both = o(&[b"WAIT", b"10", b"PERMITS", b"2"], 5).unwrap();
        assert_eq!((both.wait, both.permits), (Wait::Ms(10), 2));
        assert!(o(&[b"PERMITS", b"1", b"PERMITS", b"1"], 5).is_err());
        assert!(options(&[b"PERMITS", b"1"], None)
            .unwrap_err()
            .contains("unknown option"));
        assert_eq!(limit(b"1"), Ok(1));
        assert!(limit(b"0").is_err());
        assert!(limit(b"2147483648").is_err());
    }

    #[test]
    fn max_hold_and_multi_options() {
        assert_eq!(options(&[b"MAXHOLD", b"500"], None).unwrap().max_hold, 500);
        assert_eq!(options(&[], None).unwrap().max_hold, 0);
        assert!(options(&[b"MAXHOLD", b"0"], None).is_err());
        assert!(options(&[b"MAXHOLD"], None)
            .unwrap_err()
            .contains("needs a value"));
        assert!(options(&[b"maxhold", b"1", b"MAXHOLD", b"2"], None).is_err());
        let (read, o) = multi_options(&[b"WAIT", b"10", b"read", b"MAXHOLD", b"9"]).unwrap();
        assert!(read);
        assert_eq!((o.wait, o.max_hold), (Wait::Ms(10), 9));
        assert!(!multi_options(&[]).unwrap().0);
        assert!(multi_options(&[b"READ", b"READ"]).is_err());
        assert!(multi_options(&[b"PERMITS", b"1"]).is_err());
        assert_eq!(numkeys(b"2", 4), Ok(2));
        assert!(numkeys(b"0", 4).is_err());
        assert!(numkeys(b"65", 100).is_err());
        assert!(numkeys(b"5", 4).unwrap_err().contains("only 4"));
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
                let _ = crate::wire::parse_ops(&refs);
                let _ = options(&refs, Some(max as u32));
            }

            /// Well-formed LEASE.APPLY ops always parse, whatever the owner bytes.
            #[test]
            fn apply_ops_parse(owner in proptest::collection::vec(any::<u8>(), 1..40), d in 0..i64::MAX, t in 0..=(crate::validate::TOKEN_CEILING as i64)) {
                let (d, t) = (d.to_string().into_bytes(), t.to_string().into_bytes());
                let args: Vec<&[u8]> = vec![b"GRANT", &owner, b"write", &d, &t, b"RELEASE", &owner, b"RENEW", &owner, &d];
                prop_assert_eq!(crate::wire::parse_ops(&args).map(|o| o.len()), Ok(3));
            }
        }
    }
}

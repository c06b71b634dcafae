//! Client bytes in text the server writes (error replies, log lines): owners and keys are
//! binary-safe, but a reply or a log line must be ASCII without NUL (the crate's logging turns
//! a NUL into a panic, and non-ASCII text into invalid RESP), so other bytes are escaped.

/// `bytes` as printable ASCII (`\x00`, `\xe9`, `\n` escaped), at most `max` bytes of input.
pub fn escaped(bytes: &[u8], max: usize) -> String {
    let cut = bytes.len().min(max);
    let mut s = bytes[..cut].escape_ascii().to_string();
    if cut < bytes.len() {
        s.push_str("...");
    }
    s
}

/// An argument quoted in an error reply: at most 64 bytes of it.
pub fn quoted(bytes: &[u8]) -> String {
    escaped(bytes, 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_becomes_printable_ascii_without_nul() {
        let all: Vec<u8> = (0..=255).collect();
        let s = escaped(&all, 1000);
        assert!(s.bytes().all(|b| (0x20..0x7f).contains(&b)), "{s}");
        assert!(s.contains("\\x00"));
        assert_eq!(quoted("1é".as_bytes()), "1\\xc3\\xa9");
        assert_eq!(quoted(&[b'a'; 100]), format!("{}...", "a".repeat(64)));
    }
}

//! Numbers the module keeps as `u64` (tokens, deadlines, counts) go out to Redis as `i64`:
//! clamped, never wrapped (tokens stop at 2^63-1 anyway).

/// `n`, or `i64::MAX` if it does not fit.
pub fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::saturating_i64;

    #[test]
    fn clamps_instead_of_wrapping() {
        assert_eq!(saturating_i64(0), 0);
        assert_eq!(saturating_i64(i64::MAX as u64), i64::MAX);
        assert_eq!(saturating_i64(u64::MAX), i64::MAX);
    }
}

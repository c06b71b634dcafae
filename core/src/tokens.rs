use crate::Ms;

/// The source of fencing tokens: one counter for the whole server, so a key's tokens keep
/// increasing even after the key is deleted and created again.
///
/// Every token is at least `now * 1000` (a floor from the clock): a server that restarts from
/// an old snapshot, or a replica promoted after missing the last grants, still hands out
/// tokens above the ones it never saw, as long as the old master issued fewer than 1000
/// grants per millisecond on average and the clocks agree to within the gap that leaves.
///
/// Tokens are RESP integers, so they stop at `i64::MAX`: past it (a corrupt file, or a clock
/// 290,000 years ahead) no token is issued and grants are refused, never repeated or wrapped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    high: u64,
}

impl Tokens {
    pub const fn new() -> Tokens {
        Tokens { high: 0 }
    }

    /// The highest token issued or observed.
    pub fn high_water(&self) -> u64 {
        self.high
    }

    /// The largest token ever issued.
    pub const MAX: u64 = i64::MAX as u64;

    /// A new token, above every token issued or observed and above `key_last`; `None` when
    /// that would pass [`Tokens::MAX`].
    pub fn issue(&mut self, key_last: u64, now: Ms) -> Option<u64> {
        let t = self
            .high
            .max(key_last)
            .checked_add(1)?
            .max(now.saturating_mul(1000));
        if t > Self::MAX {
            return None;
        }
        self.high = t;
        Some(t)
    }

    /// The latest ms at which `token` can have been issued: every token is at least its
    /// clock's ms times 1000, so this is that ms, exact unless more than 1000 grants were made
    /// in one ms or tokens were raised above the clock by a token observed elsewhere.
    pub const fn issued_by(token: u64) -> Ms {
        token / 1000
    }

    /// Raise the high-water mark to a token seen in replication, an AOF or an RDB file.
    pub fn observe(&mut self, token: u64) {
        self.high = self.high.max(token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_increase_and_respect_the_clock_floor() {
        let mut t = Tokens::new();
        assert_eq!(t.issue(0, 5), Some(5000));
        assert_eq!(t.issue(0, 5), Some(5001));
        // The clock going backwards does not move tokens back.
        assert_eq!(t.issue(0, 1), Some(5002));
        // A key's own last token is respected.
        assert_eq!(t.issue(9000, 5), Some(9001));
        t.observe(20_000);
        assert_eq!(t.issue(0, 5), Some(20_001));
        assert_eq!(t.issue(0, 100), Some(100_000));
    }

    #[test]
    fn tokens_stop_at_the_ceiling_instead_of_wrapping() {
        let mut t = Tokens::new();
        t.observe(Tokens::MAX - 1);
        assert_eq!(t.issue(0, 5), Some(Tokens::MAX));
        assert_eq!(t.issue(0, 5), None);
        assert_eq!(t.issue(0, u64::MAX), None);
        let mut t = Tokens::new();
        t.observe(u64::MAX);
        assert_eq!(t.issue(0, 5), None);
        assert_eq!(Tokens::new().issue(0, u64::MAX / 1000 + 1), None);
    }
}

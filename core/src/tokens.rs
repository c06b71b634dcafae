use crate::Ms;

/// The source of fencing tokens: one counter for the whole server, so a key's tokens keep
/// increasing even after the key is deleted and created again.
///
/// Every token is at least `now * 1000` (a floor from the clock): a server that restarts from
/// an old snapshot, or a replica promoted after missing the last grants, still hands out
/// tokens above the ones it never saw, as long as the old master issued fewer than 1000
/// grants per millisecond on average and the clocks agree to within the gap that leaves.
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

    /// A new token, above every token issued or observed and above `key_last`.
    pub fn issue(&mut self, key_last: u64, now: Ms) -> u64 {
        let t = (self.high.max(key_last) + 1).max(now.saturating_mul(1000));
        self.high = t;
        t
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
        let a = t.issue(0, 5);
        assert_eq!(a, 5000);
        let b = t.issue(0, 5);
        assert_eq!(b, 5001);
        // The clock going backwards does not move tokens back.
        let c = t.issue(0, 1);
        assert_eq!(c, 5002);
        // A key's own last token is respected.
        assert_eq!(t.issue(9000, 5), 9001);
        t.observe(20_000);
        assert_eq!(t.issue(0, 5), 20_001);
        assert_eq!(t.issue(0, 100), 100_000);
    }
}

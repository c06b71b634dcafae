//! What a saved or replicated key may contain: RDB files, DUMP payloads given to RESTORE and
//! LEASE.APPLY records are checked against these rules before anything is changed, since a
//! crafted one is client input.

use redis_lease_core::{Hold, Id, Kind};

/// The largest token accepted from outside. Real tokens sit near `now_ms * 1000` (about 2^51
/// today); above 2^62 a payload can only be crafted or corrupt, and accepting it would leave
/// too few tokens for the server to issue (grants stop at 2^63-1, for good).
pub const TOKEN_CEILING: u64 = 1 << 62;

/// The largest deadline accepted (a RESP integer).
pub const DEADLINE_CEILING: u64 = i64::MAX as u64;

/// Why a saved key is refused.
pub fn hold(kind: Kind, owner: &Id, h: &Hold) -> Result<(), &'static str> {
    if owner.is_empty() || owner.len() > crate::config::ID_LENGTH_CEILING as usize {
        return Err("an owner is empty or too long");
    }
    if h.token == 0 || h.token > TOKEN_CEILING {
        return Err("a token is out of range");
    }
    if h.deadline > DEADLINE_CEILING {
        return Err("a deadline is out of range");
    }
    if h.cap != 0 && (h.cap > DEADLINE_CEILING || h.deadline > h.cap) {
        return Err("a lease passes its hold's cap");
    }
    let ok = match kind {
        Kind::RwLock => u64::from(h.reads) + u64::from(h.writes) > 0,
        Kind::Election => h.reads == 0 && h.writes > 0,
        Kind::Semaphore => h.reads > 0 && h.writes == 0,
    };
    if ok {
        Ok(())
    } else {
        Err("a hold count does not fit the key's kind")
    }
}

/// Checks a whole key: every hold, and the rules between holders (a writer holds alone, an
/// election has one leader, a semaphore's permits fit its limit).
pub fn key<'a>(
    kind: Kind,
    limit: u32,
    holders: impl Iterator<Item = (&'a Id, &'a Hold)>,
) -> Result<(), &'static str> {
    let (mut n, mut writers, mut permits) = (0u64, 0u64, 0u64);
    for (owner, h) in holders {
        hold(kind, owner, h)?;
        n += 1;
        writers += u64::from(h.writes > 0);
        permits += u64::from(h.reads);
    }
    match kind {
        Kind::RwLock if writers > 0 && n > 1 => Err("a writer does not hold alone"),
        Kind::Election if n > 1 => Err("an election has more than one leader"),
        Kind::Semaphore if limit == 0 => Err("a semaphore has no limit"),
        Kind::Semaphore if permits > u64::from(limit) => Err("permits held exceed the limit"),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(reads: u32, writes: u32, token: u64) -> Hold {
        Hold {
            reads,
            writes,
            deadline: 10,
            token,
            cap: 0,
        }
    }

    #[test]
    fn crafted_holds_are_refused() {
        let (a, b, empty) = (Id::from("a"), Id::from("b"), Id::from(""));
        let ok = h(1, 0, 5);
        let capped = |cap| Hold { cap, ..ok };
        assert!(hold(Kind::RwLock, &a, &capped(10)).is_ok());
        assert!(hold(Kind::RwLock, &a, &capped(9)).is_err());
        assert!(hold(Kind::RwLock, &a, &capped(u64::MAX)).is_err());
        assert!(key(Kind::RwLock, 0, [(&a, &ok)].into_iter()).is_ok());
        // Counts whose u32 sum would wrap.
        let huge = h(1 << 31, 1 << 31, 5);
        assert!(hold(Kind::RwLock, &a, &huge).is_ok());
        assert!(hold(Kind::RwLock, &a, &h(0, 0, 5)).is_err());
        assert!(hold(Kind::RwLock, &a, &h(1, 0, TOKEN_CEILING + 1)).is_err());
        assert!(hold(Kind::RwLock, &a, &h(1, 0, 0)).is_err());
        assert!(hold(Kind::RwLock, &empty, &ok).is_err());
        let w = h(0, 1, 5);
        let two = [(&a, &w), (&b, &ok)];
        assert!(key(Kind::RwLock, 0, two.into_iter()).is_err());
        assert!(key(Kind::Election, 0, [(&a, &w), (&b, &w)].into_iter()).is_err());
        assert!(hold(Kind::Election, &a, &ok).is_err());
        let p = h(3, 0, 5);
        assert!(key(Kind::Semaphore, 2, [(&a, &p)].into_iter()).is_err());
        assert!(key(Kind::Semaphore, 3, [(&a, &p)].into_iter()).is_ok());
        assert!(key(Kind::Semaphore, 0, std::iter::empty()).is_err());
    }
}

//! The protected resource and the journal of critical sections.
//!
//! The resource is what a real fenced store does: it remembers the highest token it accepted
//! and refuses a lower one. It accepts an equal token (one holder writes several times in its
//! section), so a token handed out twice gets past it: that is the failure fencing cannot catch.
//! The journal also keeps the ground truth the resource cannot see (which section wrote, and
//! when each section began and ended), for [`crate::analysis`].

use std::sync::Mutex;
use std::time::Instant;

/// How a critical section ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every write accepted, the lease held to the end.
    Completed,
    /// The guard reported the lease lost (or too close to its bound to write) mid-section.
    Lost,
    /// The resource refused a write: a holder with a higher token had written.
    Fenced,
}

/// One critical section of one worker: from the first check that the guard held (after the
/// grant) to the last check that passed. The worker believed it held the lock all along.
#[derive(Clone, Debug)]
pub struct Section {
    pub id: u64,
    pub worker: usize,
    pub token: u64,
    /// The master the worker's client named at the start (a hint of who granted it: a wait
    /// begun on an earlier master ends there).
    pub via: u16,
    pub entered: Instant,
    pub left: Instant,
    pub outcome: Outcome,
}

/// One write to the resource.
#[derive(Clone, Copy, Debug)]
pub struct Write {
    pub section: u64,
    pub token: u64,
    pub at: Instant,
    pub accepted: bool,
}

/// The fenced resource: refuses a token below the highest it accepted.
#[derive(Debug, Default)]
pub struct Resource {
    highest: Option<u64>,
    writes: Vec<Write>,
}

impl Resource {
    /// A write of `section` with `token` at `at`; answers whether it was accepted.
    pub fn write(&mut self, section: u64, token: u64, at: Instant) -> bool {
        let accepted = self.highest.is_none_or(|h| token >= h);
        if accepted {
            self.highest = Some(token);
        }
        self.writes.push(Write {
            section,
            token,
            at,
            accepted,
        });
        accepted
    }

    pub fn writes(&self) -> &[Write] {
        &self.writes
    }
}

/// The resource and the sections, shared by the workers.
#[derive(Debug, Default)]
pub struct Journal {
    inner: Mutex<(Resource, Vec<Section>)>,
}

impl Journal {
    /// A write now (the time is taken under the resource's lock, so writes are in time order).
    pub fn write(&self, section: u64, token: u64) -> bool {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.0.write(section, token, Instant::now())
    }

    pub fn close(&self, section: Section) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.1.push(section);
    }

    /// The writes and the sections so far.
    pub fn snapshot(&self) -> (Vec<Write>, Vec<Section>) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (g.0.writes().to_vec(), g.1.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_refuses_a_lower_token_and_accepts_an_equal_one() {
        let mut r = Resource::default();
        let t = Instant::now();
        assert!(r.write(1, 10, t));
        assert!(r.write(1, 10, t), "the same holder writes again");
        assert!(r.write(2, 12, t));
        assert!(!r.write(1, 10, t), "the older holder is fenced off");
        assert!(r.write(3, 12, t), "a repeated token gets through");
        let accepted: Vec<bool> = r.writes().iter().map(|w| w.accepted).collect();
        assert_eq!(accepted, [true, true, true, false, true]);
    }
}

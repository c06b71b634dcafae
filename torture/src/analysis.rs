//! What the journal says about mutual exclusion and fencing: overlapping sections, stale
//! writes, tokens out of order, and the longest time nobody was inside.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::resource::{Outcome, Section, Write};

/// The figures of one run's journal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    /// Sections entered (granted, checked held).
    pub sections: usize,
    pub completed: usize,
    pub lost: usize,
    pub fenced: usize,
    /// Pairs of sections of different grants whose intervals intersect: two workers inside
    /// at once, each believing it held the lock.
    pub overlaps: usize,
    /// Accepted writes made while another section with an equal or higher token had already
    /// entered: the resource let a stale holder through (it cannot know of a newer holder
    /// that has not written yet, nor tell two holders of one token apart).
    pub stale_accepted: usize,
    /// Writes the resource refused (a newer holder had written): fencing caught a double grant.
    pub stale_refused: usize,
    /// Sections whose token an earlier section already had.
    pub token_repeats: usize,
    /// Sections whose token is below one an earlier section had.
    pub token_backwards: usize,
    /// The longest stretch of the window with nobody inside.
    pub longest_gap: Duration,
}

impl Figures {
    /// Mutual exclusion and fencing held: no overlap, no stale write accepted, tokens strictly
    /// increasing from section to section.
    pub fn safe(&self) -> bool {
        self.overlaps == 0
            && self.stale_accepted == 0
            && self.token_repeats == 0
            && self.token_backwards == 0
    }
}

/// Sections sorted by entry time (ties by id).
fn by_entry(sections: &[Section]) -> Vec<&Section> {
    let mut s: Vec<&Section> = sections.iter().collect();
    s.sort_by_key(|x| (x.entered, x.id));
    s
}

/// The overlapping pairs, as (earlier, later) by entry time.
pub fn overlapping_pairs(sections: &[Section]) -> Vec<(&Section, &Section)> {
    let sorted = by_entry(sections);
    let mut pairs = Vec::new();
    for (i, a) in sorted.iter().enumerate() {
        for b in &sorted[i + 1..] {
            if b.entered > a.left {
                // Sorted by entry: no later section can start inside `a` either.
                break;
            }
            pairs.push((*a, *b));
        }
    }
    pairs
}

/// Accepted writes made while another section with a token >= theirs had entered.
fn stale_accepted(sorted: &[&Section], writes: &[Write]) -> usize {
    // Prefix maxima by entry time: the highest token entered so far and its section, and the
    // highest of any other section (so a write can leave its own section out).
    let mut best: Vec<((u64, u64), Option<u64>)> = Vec::with_capacity(sorted.len());
    let mut top: Option<(u64, u64)> = None;
    let mut second: Option<u64> = None;
    for s in sorted {
        match top {
            Some((t, _)) if s.token <= t => second = second.max(Some(s.token)),
            _ => {
                second = top.map(|(t, _)| t).max(second);
                top = Some((s.token, s.id));
            }
        }
        best.push((top.expect("set above"), second));
    }
    writes
        .iter()
        .filter(|w| w.accepted)
        .filter(|w| {
            // Sections that entered at or before the write.
            let n = sorted.partition_point(|s| s.entered <= w.at);
            if n == 0 {
                return false;
            }
            let ((t, id), second) = best[n - 1];
            let others = if id == w.section { second } else { Some(t) };
            others.is_some_and(|o| o >= w.token)
        })
        .count()
}

/// The longest stretch of `window` that no section covers.
fn longest_gap(sorted: &[&Section], window: (Instant, Instant)) -> Duration {
    let (start, end) = window;
    let mut covered_to = start;
    let mut gap = Duration::ZERO;
    for s in sorted {
        if s.entered > covered_to {
            gap = gap.max(s.entered.min(end) - covered_to);
        }
        covered_to = covered_to.max(s.left);
    }
    if end > covered_to {
        gap = gap.max(end - covered_to);
    }
    gap
}

/// The figures of `sections` and `writes` over `window`.
pub fn analyse(sections: &[Section], writes: &[Write], window: (Instant, Instant)) -> Figures {
    let sorted = by_entry(sections);
    let mut seen = HashSet::new();
    let (mut repeats, mut backwards) = (0, 0);
    let mut highest: Option<u64> = None;
    for s in &sorted {
        if !seen.insert(s.token) {
            repeats += 1;
        } else if highest.is_some_and(|h| s.token < h) {
            backwards += 1;
        }
        highest = highest.max(Some(s.token));
    }
    let count = |o: Outcome| sections.iter().filter(|s| s.outcome == o).count();
    Figures {
        sections: sections.len(),
        completed: count(Outcome::Completed),
        lost: count(Outcome::Lost),
        fenced: count(Outcome::Fenced),
        overlaps: overlapping_pairs(sections).len(),
        stale_accepted: stale_accepted(&sorted, writes),
        stale_refused: writes.iter().filter(|w| !w.accepted).count(),
        token_repeats: repeats,
        token_backwards: backwards,
        longest_gap: longest_gap(&sorted, window),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Resource;

    /// Builds a journal on a timeline in ms from `t0`.
    struct Timeline {
        t0: Instant,
        sections: Vec<Section>,
        resource: Resource,
    }

    impl Timeline {
        fn new() -> Self {
            Timeline {
                t0: Instant::now(),
                sections: vec![],
                resource: Resource::default(),
            }
        }
        fn at(&self, ms: u64) -> Instant {
            self.t0 + Duration::from_millis(ms)
        }
        fn section(&mut self, id: u64, token: u64, from: u64, to: u64, writes: &[u64]) {
            let mut outcome = Outcome::Completed;
            for &w in writes {
                if !self.resource.write(id, token, self.at(w)) {
                    outcome = Outcome::Fenced;
                }
            }
            self.sections.push(Section {
                id,
                worker: id as usize,
                token,
                via: 0,
                entered: self.at(from),
                left: self.at(to),
                outcome,
            });
        }
        fn figures(&self, until: u64) -> Figures {
            analyse(
                &self.sections,
                self.resource.writes(),
                (self.t0, self.at(until)),
            )
        }
    }

    #[test]
    fn sections_one_after_another_are_safe() {
        let mut t = Timeline::new();
        t.section(1, 10, 0, 100, &[0, 50, 100]);
        t.section(2, 11, 101, 200, &[101, 200]);
        t.section(3, 15, 250, 300, &[260]);
        let f = t.figures(300);
        assert!(f.safe(), "{f:?}");
        assert_eq!(f.sections, 3);
        assert_eq!(f.completed, 3);
        assert_eq!(f.stale_refused, 0);
        assert_eq!(f.longest_gap, Duration::from_millis(50));
    }

    #[test]
    fn two_workers_inside_at_once_overlap_and_the_older_is_fenced() {
        let mut t = Timeline::new();
        // 1 holds 0..100; 2 is granted a higher token at 50 and writes at 60: 1's write at 80
        // is refused.
        t.section(1, 10, 0, 100, &[0]);
        t.section(2, 20, 50, 150, &[60, 150]);
        t.resource.write(1, 10, t.at(80));
        let f = t.figures(150);
        assert_eq!(f.overlaps, 1);
        assert_eq!(f.stale_refused, 1);
        assert_eq!(f.stale_accepted, 0);
        assert!(!f.safe());
        let pairs = overlapping_pairs(&t.sections);
        assert_eq!((pairs[0].0.id, pairs[0].1.id), (1, 2));
    }

    #[test]
    fn a_write_after_a_newer_holder_entered_but_before_it_wrote_is_stale_and_accepted() {
        let mut t = Timeline::new();
        // 2 entered at 50 with a higher token; 1 writes at 60 (2 has not written yet).
        t.section(2, 20, 50, 150, &[70]);
        t.section(1, 10, 0, 40, &[0]);
        let mut r = Resource::default();
        r.write(1, 10, t.at(0));
        r.write(1, 10, t.at(60));
        r.write(2, 20, t.at(70));
        let f = analyse(&t.sections, r.writes(), (t.t0, t.at(150)));
        assert_eq!(f.stale_accepted, 1);
        assert_eq!(f.overlaps, 0, "1 left (its last check) at 40");
    }

    #[test]
    fn a_token_handed_out_twice_gets_past_the_resource_and_is_counted() {
        let mut t = Timeline::new();
        t.section(1, 10, 0, 50, &[0, 50]);
        // A promoted replica that never saw token 10 hands it out again.
        t.section(2, 10, 3000, 3100, &[3000]);
        t.section(3, 9, 3200, 3300, &[3200]);
        let f = t.figures(3300);
        assert_eq!(f.overlaps, 0);
        assert_eq!(f.token_repeats, 1);
        assert_eq!(f.token_backwards, 1);
        assert_eq!(
            f.stale_accepted, 1,
            "section 2's write with section 1's token"
        );
        assert_eq!(f.stale_refused, 1, "section 3's");
        assert_eq!(f.fenced, 1);
        assert_eq!(f.longest_gap, Duration::from_millis(2950));
        assert!(!f.safe());
    }

    #[test]
    fn overlaps_are_counted_per_pair() {
        let mut t = Timeline::new();
        t.section(1, 1, 0, 100, &[]);
        t.section(2, 2, 10, 20, &[]);
        t.section(3, 3, 15, 30, &[]);
        t.section(4, 4, 101, 120, &[]);
        assert_eq!(t.figures(120).overlaps, 3);
    }
}

//! Time spent waiting, counted for every worker, the starved ones included.
//!
//! A percentile over the waits that ended in a grant scores starvation well: a worker that
//! never gets in adds one wait, or none, while the worker that keeps winning adds thousands of
//! short ones (rslock at 8 writers: p99 0.14 ms with 3.1 s max and fairness 0). So every
//! request asked inside the window counts, each with its wait censored at the window's end if
//! it was still open then, and the figures are read three ways: per request (p50/p99/max), per
//! unit of time spent waiting (the wait a randomly chosen waiting moment belongs to: a starved
//! worker's long wait weighs what it cost), and per worker (the share of the window it spent
//! waiting: about (N-1)/N for every worker of a fair lock, 1 for a starved one).

use crate::report::{percentile, Column, Row, Val};
use crate::worker::Report;

/// One wait in ms, and whether it was still open at the window's end (a lower bound).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Wait {
    ms: f64,
    open: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Censored {
    /// Sorted by length.
    waits: Vec<Wait>,
    /// Per worker: the share of the window spent waiting (0 to 1).
    shares: Vec<f64>,
}

impl Censored {
    /// The waits of every request asked inside `[go, stop)` (seconds on the workers' clock).
    pub fn new(reps: &[Report], go: f64, stop: f64) -> Censored {
        let window = (stop - go).max(f64::MIN_POSITIVE);
        let mut out = Censored::default();
        for r in reps {
            let mut waited = 0.0;
            for (a, g) in r.asked.iter().zip(&r.granted) {
                if *a >= stop {
                    continue;
                }
                let from = a.max(go);
                let (until, open) = match g {
                    Some(g) if *g < stop => (*g, false),
                    _ => (stop, true),
                };
                let s = (until - from).max(0.0);
                waited += s;
                out.waits.push(Wait {
                    ms: (until - a).max(0.0) * 1e3,
                    open,
                });
            }
            out.shares.push((waited / window).min(1.0));
        }
        out.waits.sort_by(|a, b| a.ms.total_cmp(&b.ms));
        out
    }

    fn val(&self, x: f64) -> Val {
        if self.waits.iter().any(|w| w.open && w.ms >= x) {
            Val::AtLeast(x)
        } else {
            Val::Num(x)
        }
    }

    /// A percentile over the requests; a lower bound if an open wait is at or above it.
    pub fn request(&self, p: f64) -> Val {
        let ms: Vec<f64> = self.waits.iter().map(|w| w.ms).collect();
        self.val(percentile(&ms, p))
    }

    /// A percentile over the time spent waiting: the shortest wait such that `p` % of all the
    /// time spent waiting was spent in waits no longer than it.
    pub fn by_time(&self, p: f64) -> Val {
        let total: f64 = self.waits.iter().map(|w| w.ms).sum();
        if total <= 0.0 {
            return Val::Num(0.0);
        }
        let goal = total * p / 100.0;
        let mut sum = 0.0;
        for w in &self.waits {
            sum += w.ms;
            if sum >= goal {
                return self.val(w.ms);
            }
        }
        self.val(self.waits.last().map_or(0.0, |w| w.ms))
    }

    /// The fewest and the most of the window one worker spent waiting (0 to 1).
    pub fn share_range(&self) -> (f64, f64) {
        let min = self.shares.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.shares.iter().copied().fold(0.0, f64::max);
        (if min.is_finite() { min } else { 0.0 }, max)
    }

    /// How many requests were still waiting when the window ended.
    pub fn open(&self) -> usize {
        self.waits.iter().filter(|w| w.open).count()
    }
}

/// The waiting rows of a contended case, one column per contender (or variant of one): per
/// request p50 / p99 (its target `limit` ms, what a FIFO lock would give) / max, p99 by time
/// spent waiting, and the fewest / most of the window one worker spent waiting.
pub fn rows<C: Column, R>(
    res: &[(C, R)],
    scenario: &str,
    case: &str,
    limit: f64,
    waits: impl Fn(&R) -> Result<&Censored, Val>,
) -> Vec<Row> {
    let row = |metric: &str, unit: &str, f: &dyn Fn(&Censored) -> Val| {
        res.iter()
            .fold(Row::new(scenario, case, metric, unit), |r, (c, o)| {
                r.val(c.column(), waits(o).map_or_else(|e| e, f))
            })
    };
    let target = format!("<= N x (hold + 1 ms) = {limit} ms");
    vec![
        row("wait p50", "ms", &|w| w.request(50.0)),
        row("wait p99", "ms", &|w| w.request(99.0)).target(&target, |x| x <= limit),
        row("wait max", "ms", &|w| w.request(100.0)),
        row("wait p99 by time waited", "ms", &|w| w.by_time(99.0))
            .target(&target, |x| x <= limit)
            .note("the wait that 99% of all time spent waiting fell in (open waits counted to the end)"),
        row("least waiting share", "", &|w| Val::Num(w.share_range().0)),
        row("most waiting share", "", &|w| Val::Num(w.share_range().1)).note(
            "the share of the window a worker spent waiting: about (N-1)/N each for a fair lock, 1 for a starved worker",
        ),
        row("waiting share spread", "", &|w| {
            let (lo, hi) = w.share_range();
            Val::Num(hi - lo)
        })
        .target("<= 0.25", |x| x <= 0.25),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(asked: &[f64], granted: &[Option<f64>]) -> Report {
        Report {
            asked: asked.to_vec(),
            granted: granted.to_vec(),
            ..Report::default()
        }
    }

    #[test]
    fn a_starved_worker_weighs_what_it_waited() {
        // Worker 0 wins 100 times with 0.1 ms waits; worker 1 waits the whole 1 s window.
        let asked: Vec<f64> = (0..100).map(|i| i as f64 * 0.01).collect();
        let granted: Vec<Option<f64>> = asked.iter().map(|a| Some(a + 0.0001)).collect();
        let reps = [rep(&asked, &granted), rep(&[0.0], &[None])];
        let c = Censored::new(&reps, 0.0, 1.0);
        // Per request, the starved wait is one sample in 101: p99 stays small.
        assert!(c.request(99.0).num().unwrap() < 1.0);
        // Per unit of time, it is nearly all the waiting there was: p99 is the whole window.
        assert_eq!(c.by_time(99.0), Val::AtLeast(1000.0));
        let (lo, hi) = c.share_range();
        assert!(lo < 0.02 && hi == 1.0, "{lo} {hi}");
        assert_eq!(c.open(), 1);
    }

    #[test]
    fn a_wait_open_at_the_end_is_censored_there() {
        // Asked at 0.5, granted after the window: it counts 0.5 s, as a lower bound.
        let c = Censored::new(&[rep(&[0.5, 2.0], &[Some(1.5), Some(2.1)])], 0.0, 1.0);
        assert_eq!(c.request(100.0), Val::AtLeast(500.0));
        assert_eq!(c.share_range(), (0.5, 0.5));
    }

    #[test]
    fn fair_workers_share_alike() {
        // Two workers taking turns, each waiting a quarter of the window.
        let a = rep(&[0.0, 0.5], &[Some(0.0), Some(0.75)]);
        let b = rep(&[0.0, 0.5], &[Some(0.25), Some(0.5)]);
        let c = Censored::new(&[a, b], 0.0, 1.0);
        let (lo, hi) = c.share_range();
        assert!(
            (lo - 0.25).abs() < 1e-9 && (hi - 0.25).abs() < 1e-9,
            "{lo} {hi}"
        );
        assert_eq!(c.open(), 0);
    }
}

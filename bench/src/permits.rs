//! The semaphore scenario's pure figures: how many permits the workers held at once, what a
//! strictly FIFO semaphore with no hand-off cost would grant per second (the yardstick for the
//! measured rate), and each permit size's share of the grants against its fair share.

use std::collections::VecDeque;

/// One hold as its worker saw it: from the grant's reply to the moment before its release was
/// sent (`None`: not released before the report). This lies inside the server's hold (the
/// server granted before the reply came, and released after the release was sent), so a sum
/// above the limit is an overlap the server really allowed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Held {
    pub from: f64,
    pub until: Option<f64>,
    pub permits: u32,
}

/// The most permits held at once. At a tie, a release counts before a grant (the intervals
/// are the client's view, inside the server's: a tie is no overlap).
pub fn max_held(holds: &[Held]) -> u32 {
    let mut ev: Vec<(f64, i64)> = Vec::with_capacity(holds.len() * 2);
    for h in holds {
        ev.push((h.from, i64::from(h.permits)));
        if let Some(u) = h.until {
            ev.push((u, -i64::from(h.permits)));
        }
    }
    ev.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut max) = (0i64, 0i64);
    for (_, d) in ev {
        now += d;
        max = max.max(now);
    }
    max as u32
}

/// Grants per second of a strictly FIFO semaphore of `limit` (a head that does not fit holds
/// back those behind it) with no hand-off cost: worker `i` asks for `sizes[i]` permits, every
/// hold lasts `cycle_s`, and a worker asks again the moment it releases (joining the tail).
/// Simulated until every worker has had `rounds` grants on average.
pub fn fifo_rate(sizes: &[u32], limit: u32, cycle_s: f64, rounds: usize) -> f64 {
    let mut queue: VecDeque<usize> = (0..sizes.len()).collect();
    let mut holding: Vec<(f64, usize)> = Vec::new();
    let (mut free, mut t, mut grants) = (limit, 0.0, 0usize);
    let want = rounds * sizes.len();
    while grants < want {
        while let Some(&w) = queue.front() {
            if sizes[w] > free {
                break;
            }
            queue.pop_front();
            free -= sizes[w];
            holding.push((t + cycle_s, w));
            grants += 1;
        }
        let Some(next) = holding.iter().map(|h| h.0).min_by(f64::total_cmp) else {
            // Nothing held and the head does not fit: a request above the limit.
            return 0.0;
        };
        t = next;
        // Releases at the same moment rejoin the queue in the order they were granted.
        holding.retain(|&(end, w)| {
            if end <= next {
                free += sizes[w];
                queue.push_back(w);
                false
            } else {
                true
            }
        });
    }
    if t > 0.0 {
        grants as f64 / t
    } else {
        0.0
    }
}

/// The share of the grants that went to the workers asking for `size` permits, divided by
/// their share of the workers (1 = fair; near 0 = starved). 0 when nothing was granted.
pub fn share_vs_fair(sizes: &[u32], grants: &[u64], size: u32) -> f64 {
    let total: u64 = grants.iter().sum();
    let of = |s: u32| -> (u64, usize) {
        sizes
            .iter()
            .zip(grants)
            .filter(|(z, _)| **z == s)
            .fold((0, 0), |(g, k), (_, n)| (g + n, k + 1))
    };
    let (g, k) = of(size);
    if total == 0 || k == 0 {
        return 0.0;
    }
    (g as f64 / total as f64) / (k as f64 / sizes.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(from: f64, until: Option<f64>, permits: u32) -> Held {
        Held {
            from,
            until,
            permits,
        }
    }

    #[test]
    fn max_held_sums_overlaps_and_counts_a_tie_as_handed_on() {
        assert_eq!(max_held(&[]), 0);
        let h = [
            held(0.0, Some(1.0), 1),
            held(0.5, Some(2.0), 2),
            held(0.9, Some(1.5), 1),
            // Starts when the first ends: a hand-off, not an overlap.
            held(1.0, Some(1.2), 1),
        ];
        assert_eq!(max_held(&h), 4);
        assert_eq!(max_held(&h[1..]), 4);
        assert_eq!(max_held(&[h[0], h[3]]), 1);
        // Never released: held to the end.
        assert_eq!(max_held(&[held(0.0, None, 3), held(5.0, Some(6.0), 2)]), 5);
    }

    #[test]
    fn fifo_rate_follows_head_of_line_blocking() {
        let close = |a: f64, b: f64| (a - b).abs() <= b * 0.01;
        assert!(close(fifo_rate(&[1], 1, 0.01, 100), 100.0));
        assert!(close(fifo_rate(&[1, 1, 1, 1], 4, 0.01, 100), 400.0));
        // A mutex whatever the mix: one at a time.
        assert!(close(fifo_rate(&[1, 1, 1], 1, 0.01, 100), 100.0));
        // 1,1,2 fit; 3 waits for all of them, then 3+1; then 1+2 (3 waits again): 4 grants
        // per 2 holds.
        assert!(close(fifo_rate(&[1, 1, 2, 3], 4, 0.01, 1000), 200.0));
        assert_eq!(fifo_rate(&[5], 4, 0.01, 10), 0.0);
        assert_eq!(fifo_rate(&[], 4, 0.01, 10), 0.0);
    }

    #[test]
    fn share_vs_fair_is_one_when_every_worker_had_as_many() {
        let sizes = [1, 1, 2, 3];
        assert_eq!(share_vs_fair(&sizes, &[5, 5, 5, 5], 1), 1.0);
        assert_eq!(share_vs_fair(&sizes, &[5, 5, 5, 5], 3), 1.0);
        // The size-3 worker starved: 0; the others above 1.
        assert_eq!(share_vs_fair(&sizes, &[6, 6, 6, 0], 3), 0.0);
        assert!((share_vs_fair(&sizes, &[6, 6, 6, 0], 2) - 4.0 / 3.0).abs() < 1e-9);
        assert_eq!(share_vs_fair(&sizes, &[0, 0, 0, 0], 1), 0.0);
        assert_eq!(share_vs_fair(&sizes, &[1, 1, 1, 1], 7), 0.0);
    }
}

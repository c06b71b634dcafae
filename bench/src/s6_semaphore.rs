//! Scenario 6: semaphore hand-off. N workers contend for one semaphore of limit L, worker `i`
//! asking for a fixed number of permits (the mix 1, 1, 2, 3 in turn, so fairness can be judged
//! per size), holding them a few ms and asking again at once (with WAIT, or polling), for a
//! fixed window. Figures: grants per second against a strictly FIFO semaphore with no
//! hand-off cost; every request's wait (p50, p99, max; a request never served counts with the
//! time it waited, as a lower bound), in all and per permit size; each size's share of the
//! grants against its fair share (a large request must not starve); fewest / most grants of
//! one worker; and the most permits held at once as the workers saw their holds, which must
//! never exceed L.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::contender::{Contender, Mode};
use crate::permits::{fifo_rate, max_held, share_vs_fair, Held};
use crate::report::{Row, Val};
use crate::waiting::Censored;
use crate::worker::{self, now, Job, Report};
use crate::{BenchResult, Ctx, Settings};

const SC: &str = "6 semaphore hand-off";

#[derive(Clone, Debug, Default)]
struct Outcome {
    /// Permits per hold, per worker.
    sizes: Vec<u32>,
    /// Grants inside the window, per worker.
    grants_in_window: Vec<u64>,
    window: f64,
    all: Censored,
    by_size: BTreeMap<u32, Censored>,
    /// The most permits held at once (every hold of the run, window and grace).
    max_held: u32,
    mean_hold_ms: f64,
}

impl Outcome {
    fn fairness(&self) -> f64 {
        let min = *self.grants_in_window.iter().min().unwrap_or(&0) as f64;
        let max = *self.grants_in_window.iter().max().unwrap_or(&0) as f64;
        if max == 0.0 {
            0.0
        } else {
            min / max
        }
    }

    fn share(&self, size: u32) -> f64 {
        share_vs_fair(&self.sizes, &self.grants_in_window, size)
    }
}

/// The permits worker `i` asks for.
fn permits_of(st: &Settings, i: usize) -> u32 {
    st.s6_mix[i % st.s6_mix.len()]
}

async fn measure(ctx: &Ctx, st: &Settings, c: Contender, n: usize) -> BenchResult<Outcome> {
    let key = format!("bench:s6:{}:{n}", c.name());
    let hold_ms = st.s6_hold.as_secs_f64() * 1e3;
    let (secs, grace) = (st.s6_secs, st.s6_grace.as_secs_f64());
    let sizes: Vec<u32> = (0..n).map(|i| permits_of(st, i)).collect();
    let jobs = sizes
        .iter()
        .map(|&permits| {
            let mode = Mode::Semaphore {
                limit: st.s6_limit,
                permits,
            };
            Job {
                max_grants: st.s6_max_grants,
                ..Job::repeat(c, ctx, &key, mode, hold_ms, secs, grace)
            }
        })
        .collect();
    let mut ws = worker::start(ctx, c, jobs).await?;
    let go = now() + 0.05;
    for w in &ws {
        w.go(go);
    }
    let reps: Vec<Report> =
        worker::finish(&mut ws, Duration::from_secs_f64(secs + grace + 15.0)).await?;
    worker::end(ws).await;
    let stop = go + secs;
    let mut out = Outcome {
        window: secs,
        ..Default::default()
    };
    let mut holds = Vec::new();
    let mut held = Vec::new();
    for (r, &permits) in reps.iter().zip(&sizes) {
        out.grants_in_window
            .push(r.granted.iter().flatten().filter(|g| **g < stop).count() as u64);
        // The worker's holds in order; a grant without a hold was still held at the end.
        let mut hs = r.holds.iter();
        for g in r.granted.iter().flatten() {
            held.push(Held {
                from: *g,
                until: hs.next().map(|h| g + h),
                permits,
            });
        }
        holds.extend(r.holds.iter().map(|h| h * 1e3));
    }
    out.all = Censored::new(&reps, go, stop);
    let mut distinct = sizes.clone();
    distinct.sort_unstable();
    distinct.dedup();
    for s in distinct {
        let of_size: Vec<Report> = reps
            .iter()
            .zip(&sizes)
            .filter(|(_, z)| **z == s)
            .map(|(r, _)| r.clone())
            .collect();
        out.by_size.insert(s, Censored::new(&of_size, go, stop));
    }
    out.sizes = sizes;
    out.max_held = max_held(&held);
    if out.max_held > st.s6_limit {
        eprintln!(
            "[bench] scenario 6: {} held {} permits at once on a semaphore of {}",
            c.name(),
            out.max_held,
            st.s6_limit
        );
    }
    out.mean_hold_ms = holds.iter().sum::<f64>() / holds.len().max(1) as f64;
    Ok(out)
}

pub async fn run(ctx: &Ctx, st: &Settings) -> Vec<Row> {
    let hold_ms = st.s6_hold.as_secs_f64() * 1e3;
    let rtt_ms = ctx.rtt.as_secs_f64() * 1e3;
    let limit = st.s6_limit;
    let mut rows = Vec::new();
    for &n in &st.s6_workers {
        let mut res: Vec<(Contender, Result<Outcome, Val>)> = Vec::new();
        for c in Contender::LOCKS {
            let mode = Mode::Semaphore { limit, permits: 1 };
            let o = match c.cannot(mode) {
                Some(why) => Err(Val::Cannot(why)),
                None => measure(ctx, st, c, n)
                    .await
                    .map_err(|e| Val::Error(e.to_string())),
            };
            res.push((c, o));
        }
        let setup = format!("{n} workers, limit {limit}, hold {hold_ms} ms");
        let row = |case: &str, metric: &str, unit: &str, f: &dyn Fn(&Outcome) -> Val| {
            res.iter()
                .fold(Row::new(SC, case, metric, unit), |r, (c, o)| {
                    r.val(c.name(), o.as_ref().map_or_else(|e| e.clone(), f))
                })
        };
        let sizes: Vec<u32> = (0..n).map(|i| permits_of(st, i)).collect();
        let ideal = fifo_rate(&sizes, limit, (hold_ms + rtt_ms) / 1e3, 1000);
        // A FIFO semaphore does no worse than a FIFO mutex: at most everyone else's hold.
        let bound = n as f64 * (hold_ms + 1.0);
        let wait_target = format!("<= N x (hold + 1 ms) = {bound} ms");
        let all = format!("{setup}: all");
        let mix: Vec<String> = st.s6_mix.iter().map(u32::to_string).collect();
        rows.push(
            row(&all, "grants/s", "", &|o| {
                Val::Num(o.grants_in_window.iter().sum::<u64>() as f64 / o.window)
            })
            .target(
                &format!(
                    ">= 0.8 x FIFO with no hand-off cost (hold + rtt {rtt_ms:.3} ms) = {:.0}",
                    0.8 * ideal
                ),
                |x| x >= 0.8 * ideal,
            )
            .note(format!(
                "permits per worker: {} in turn; FIFO model: {ideal:.0} grants/s (a head that does \
                 not fit holds back the rest; a semaphore without a queue, whoever polls when \
                 enough are free, can grant more by passing large requests over)",
                mix.join(", ")
            )),
        );
        rows.push(
            row(&all, "permits held at once, max", "", &|o| {
                Val::Num(o.max_held.into())
            })
            .target(&format!("<= limit {limit}"), |x| x <= f64::from(limit))
            .note("as the workers saw their holds (grant received to release sent)"),
        );
        rows.extend(crate::waiting::rows(&res, SC, &all, bound, |o| {
            o.as_ref().map(|o| &o.all).map_err(Val::clone)
        }));
        let detail: Vec<String> = res
            .iter()
            .filter_map(|(c, o)| {
                o.as_ref().ok().map(|o| {
                    format!(
                        "{}: {} grants, {} of {n} workers without one in the window, {} \
                         requests still waiting at the end, mean hold {:.2} ms",
                        c.name(),
                        o.grants_in_window.iter().sum::<u64>(),
                        o.grants_in_window.iter().filter(|g| **g == 0).count(),
                        o.all.open(),
                        o.mean_hold_ms
                    )
                })
            })
            .collect();
        rows.push(
            row(&all, "min/max grants per worker", "", &|o| {
                Val::Num(o.fairness())
            })
            .target(">= 0.8", |x| x >= 0.8)
            .note(detail.join("; ")),
        );
        let mut distinct = sizes.clone();
        distinct.sort_unstable();
        distinct.dedup();
        for s in distinct {
            let k = sizes.iter().filter(|z| **z == s).count();
            let case = format!("{setup}: PERMITS {s} ({k} workers)");
            let w = |p: f64| {
                move |o: &Outcome| o.by_size.get(&s).map_or(Val::Missing, |w| w.request(p))
            };
            rows.push(row(&case, "wait p50", "ms", &w(50.0)));
            rows.push(row(&case, "wait p99", "ms", &w(99.0)).target(&wait_target, |x| x <= bound));
            rows.push(row(&case, "wait max", "ms", &w(100.0)));
            rows.push(
                row(&case, "grant share / fair share", "", &|o| {
                    Val::Num(o.share(s))
                })
                .target("0.8 to 1.25", |x| (0.8..=1.25).contains(&x)),
            );
        }
    }
    rows
}

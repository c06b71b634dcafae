//! Scenario 2: contended hand-off. N writers on one key, each holding it 2 ms and asking again
//! at once, for a fixed window. Grants per second inside the window; every request's wait
//! inside the window (p50, p99, max), a wait still open when the window ends counting with
//! what it waited so far, as a lower bound; p99 over the time spent waiting, and the share of
//! the window each worker spent waiting (`waiting.rs`: a starved worker weighs what it
//! waited); and fairness (fewest / most grants of one worker).

use std::time::Duration;

use crate::contender::{Contender, Mode};
use crate::report::{Row, Val};
use crate::waiting::Censored;
use crate::worker::{self, now, Job, Report};
use crate::{BenchResult, Ctx, Settings};

const SC: &str = "2 contended hand-off";

#[derive(Clone, Debug, Default)]
struct Outcome {
    /// Grants inside the window, per worker.
    grants_in_window: Vec<u64>,
    window: f64,
    waits: Censored,
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
}

async fn measure(ctx: &Ctx, st: &Settings, c: Contender, n: usize) -> BenchResult<Outcome> {
    let key = format!("bench:s2:{}:{n}", c.name());
    let hold_ms = st.s2_hold.as_secs_f64() * 1e3;
    let (secs, grace) = (st.s2_secs, st.s2_grace.as_secs_f64());
    let jobs = (0..n)
        .map(|_| Job {
            max_grants: st.s2_max_grants,
            ..Job::repeat(c, ctx, &key, Mode::Write, hold_ms, secs, grace)
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
    for r in &reps {
        out.grants_in_window
            .push(r.granted.iter().flatten().filter(|g| **g < stop).count() as u64);
        holds.extend(r.holds.iter().map(|h| h * 1e3));
    }
    out.waits = Censored::new(&reps, go, stop);
    out.mean_hold_ms = holds.iter().sum::<f64>() / holds.len().max(1) as f64;
    Ok(out)
}

pub async fn run(ctx: &Ctx, st: &Settings) -> Vec<Row> {
    let hold_ms = st.s2_hold.as_secs_f64() * 1e3;
    let rtt_ms = ctx.rtt.as_secs_f64() * 1e3;
    let mut rows = Vec::new();
    for &n in &st.s2_writers {
        let mut res = Vec::new();
        for c in Contender::LOCKS {
            res.push((c, measure(ctx, st, c, n).await.map_err(|e| e.to_string())));
        }
        let case = format!("{n} writers, hold {hold_ms} ms");
        let row = |metric: &str, unit: &str, f: &dyn Fn(&Outcome) -> Val| {
            res.iter()
                .fold(Row::new(SC, &case, metric, unit), |r, (c, o)| {
                    r.val(c.name(), Val::of(o, f))
                })
        };
        let ideal = 1000.0 / (hold_ms + rtt_ms);
        let limit = n as f64 * (hold_ms + 1.0);
        rows.push(
            row("grants/s", "", &|o| {
                Val::Num(o.grants_in_window.iter().sum::<u64>() as f64 / o.window)
            })
            .target(
                &format!(
                    ">= 0.9 x 1/(hold + rtt {rtt_ms:.3} ms) = {:.0}",
                    0.9 * ideal
                ),
                |x| x >= 0.9 * ideal,
            ),
        );
        rows.extend(crate::waiting::rows(&res, SC, &case, limit, |o| {
            o.as_ref()
                .map(|o| &o.waits)
                .map_err(|e| Val::Error(e.clone()))
        }));
        let detail: Vec<String> = res
            .iter()
            .filter_map(|(c, o)| {
                o.as_ref().ok().map(|o| {
                    format!(
                        "{}: {} grants, {} still waiting at the end, mean hold {:.2} ms",
                        c.name(),
                        o.grants_in_window.iter().sum::<u64>(),
                        o.waits.open(),
                        o.mean_hold_ms
                    )
                })
            })
            .collect();
        rows.push(
            row("min/max grants per worker", "", &|o| Val::Num(o.fairness()))
                .target(">= 0.8", |x| x >= 0.8)
                .note(detail.join("; ")),
        );
    }
    rows
}

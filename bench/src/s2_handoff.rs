//! Scenario 2: contended hand-off. N writers on one key, each holding it for 2 ms, then asking
//! again at once. Measures grants per second inside a fixed window, the wait of every request,
//! and fairness (fewest / most grants of one worker).

use std::time::{Duration, Instant};

use crate::locks::{self, Imp, Mode};
use crate::report::{percentile, Row, Val};
use crate::{BenchResult, ChartData, Ctx, Settings};

#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Grants whose grant time fell inside the window, per worker.
    pub grants_in_window: Vec<u64>,
    pub window: f64,
    /// Waits in ms, of granted requests.
    pub waits: Vec<f64>,
    /// Requests that were never granted (deadline passed): their waits in ms (lower bounds).
    pub starved: Vec<f64>,
    /// Mean measured hold in ms.
    pub mean_hold_ms: f64,
}

impl Outcome {
    pub fn grants_per_sec(&self) -> f64 {
        self.grants_in_window.iter().sum::<u64>() as f64 / self.window
    }
    pub fn fairness(&self) -> f64 {
        let min = *self.grants_in_window.iter().min().unwrap_or(&0) as f64;
        let max = *self.grants_in_window.iter().max().unwrap_or(&0) as f64;
        if max == 0.0 {
            0.0
        } else {
            min / max
        }
    }
    /// All waits (starved ones at their lower bound), sorted.
    pub fn all_waits(&self) -> Vec<f64> {
        let mut w: Vec<f64> = self.waits.iter().chain(&self.starved).copied().collect();
        w.sort_by(f64::total_cmp);
        w
    }
}

struct Worker {
    grants: Vec<Instant>,
    waits: Vec<f64>,
    starved: Vec<f64>,
    holds: Vec<f64>,
}

pub async fn measure(
    ctx: &Ctx,
    imp: Imp,
    n: usize,
    hold: Duration,
    secs: f64,
    grace: Duration,
    max_grants: u64,
) -> BenchResult<Outcome> {
    let key = format!("bench:s2:{}:{n}", imp.name());
    let mut conns = Vec::new();
    for _ in 0..n {
        conns.push(locks::connect(&ctx.client, None).await?);
    }
    // Start together a little after all tasks exist.
    let start = Instant::now() + Duration::from_millis(20);
    let stop = start + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for mut conn in conns {
        let key = key.clone();
        let scripts = ctx.scripts.clone();
        tasks.push(tokio::spawn(async move {
            let owner = locks::new_owner();
            let ttl_ms = 10_000;
            let mut w = Worker {
                grants: Vec::new(),
                waits: Vec::new(),
                starved: Vec::new(),
                holds: Vec::new(),
            };
            tokio::time::sleep_until(start.into()).await;
            while Instant::now() < stop && (w.grants.len() as u64) < max_grants {
                let t0 = Instant::now();
                let ok = locks::acquire(
                    imp,
                    &mut conn,
                    &scripts,
                    Mode::Write,
                    &key,
                    &owner,
                    ttl_ms,
                    stop + grace,
                )
                .await?;
                let t1 = Instant::now();
                let waited = (t1 - t0).as_secs_f64() * 1e3;
                if !ok {
                    w.starved.push(waited);
                    break;
                }
                w.grants.push(t1);
                w.waits.push(waited);
                locks::hold_until(t1 + hold).await;
                w.holds.push(t1.elapsed().as_secs_f64() * 1e3);
                if !locks::release(imp, &mut conn, &scripts, Mode::Write, &key, &owner, ttl_ms)
                    .await?
                {
                    return Err(format!(
                        "{}: release of a granted write lock answered 0",
                        imp.name()
                    )
                    .into());
                }
            }
            BenchResult::Ok(w)
        }));
    }
    let mut out = Outcome {
        window: secs,
        ..Default::default()
    };
    let mut holds = Vec::new();
    let mut first_err = None;
    for t in tasks {
        match t.await? {
            Ok(w) => {
                out.grants_in_window
                    .push(w.grants.iter().filter(|g| **g < stop).count() as u64);
                out.waits.extend(w.waits);
                out.starved.extend(w.starved);
                holds.extend(w.holds);
            }
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    out.mean_hold_ms = holds.iter().sum::<f64>() / holds.len().max(1) as f64;
    Ok(out)
}

pub async fn run(ctx: &Ctx, st: &Settings, chart: &mut ChartData) -> Vec<Row> {
    let hold = st.s2_hold;
    let hold_ms = hold.as_secs_f64() * 1e3;
    let rtt_ms = ctx.rtt.as_secs_f64() * 1e3;
    let mut rows = Vec::new();
    for &n in &st.s2_writers {
        let mut res = Vec::new();
        for imp in Imp::BOTH {
            res.push(
                measure(ctx, imp, n, hold, st.s2_secs, st.s2_grace, st.s2_max_grants)
                    .await
                    .map_err(|e| e.to_string()),
            );
        }
        let sc = "2 contended hand-off";
        let case = format!("{n} writers, hold {hold_ms} ms");
        let pick = |f: &dyn Fn(&Outcome) -> Val| -> (Val, Val) {
            let one = |r: &Result<Outcome, String>| match r {
                Ok(o) => f(o),
                Err(e) => Val::Text(format!("error: {e}")),
            };
            (one(&res[0]), one(&res[1]))
        };
        let ideal = 1000.0 / (hold_ms + rtt_ms);
        let (m, b) = pick(&|o| Val::Num(o.grants_per_sec()));
        rows.push(Row::new(sc, &case, "grants/s", "").vals(m, b).target(
            &format!(
                ">= 0.9 x ideal 1/(hold + rtt {rtt_ms:.3} ms) = {:.0}",
                0.9 * ideal
            ),
            |x| x >= 0.9 * ideal,
        ));
        let wait_val = |o: &Outcome, p: f64| {
            let w = o.all_waits();
            let x = percentile(&w, p);
            // A starved request's wait is only a lower bound.
            if !o.starved.is_empty() && o.starved.iter().any(|s| *s >= x) {
                Val::AtLeast(x)
            } else {
                Val::Num(x)
            }
        };
        let (m, b) = pick(&|o| wait_val(o, 50.0));
        rows.push(Row::new(sc, &case, "wait p50", "ms").vals(m, b));
        let limit = n as f64 * (hold_ms + 1.0);
        let (m, b) = pick(&|o| wait_val(o, 99.0));
        let mut point = crate::HandoffPoint {
            writers: n,
            p99: [m.clone(), b.clone()],
            target_ms: limit,
            ..Default::default()
        };
        rows.push(
            Row::new(sc, &case, "wait p99", "ms")
                .vals(m, b)
                .target(&format!("<= N x (hold + 1 ms) = {limit} ms"), |x| {
                    x <= limit
                }),
        );
        let (m, b) = pick(&|o| wait_val(o, 100.0));
        point.max = [m.clone(), b.clone()];
        rows.push(Row::new(sc, &case, "wait max", "ms").vals(m, b));
        let (m, b) = pick(&|o| Val::Num(o.fairness()));
        point.fairness = [m.clone(), b.clone()];
        chart.s2.push(point);
        let detail = |r: &Result<Outcome, String>| match r {
            Ok(o) => format!(
                "{} grants, {} never served, mean hold {:.2} ms",
                o.grants_in_window.iter().sum::<u64>(),
                o.starved.len(),
                o.mean_hold_ms
            ),
            Err(_) => "-".into(),
        };
        rows.push(
            Row::new(sc, &case, "min/max grants per worker", "")
                .vals(m, b)
                .target(">= 0.8", |x| x >= 0.8)
                .note(format!(
                    "module: {}; baseline: {}",
                    detail(&res[0]),
                    detail(&res[1])
                )),
        );
    }
    rows
}

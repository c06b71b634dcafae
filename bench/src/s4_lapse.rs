//! Scenario 4: lease lapse. A holder takes the write lock with a short ttl and never unlocks;
//! a waiter asks right after. How long after the holder's deadline is the waiter served?
//!
//! The deadline is taken as (time the holder's request was sent + ttl): the server's deadline
//! is at or after it, so the lateness measured is at most one round trip too high, never too low.

use std::time::{Duration, Instant};

use crate::locks::{self, Imp, Mode};
use crate::report::{percentile, Row, Val};
use crate::{BenchResult, ChartData, Ctx, Settings};

#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Waiter served this many ms after the holder's deadline (negative: before it, which
    /// would mean a lease was cut short). `None`: never served within the bound.
    pub late: Vec<Option<f64>>,
    pub bound_ms: f64,
}

pub async fn measure(ctx: &Ctx, imp: Imp, ttl: Duration, trials: usize) -> BenchResult<Outcome> {
    let mut holder = locks::connect(&ctx.client, Some(Duration::from_secs(5))).await?;
    let mut waiter = locks::connect(&ctx.client, None).await?;
    let ttl_ms = ttl.as_millis() as u64;
    let bound = ttl + Duration::from_secs(2);
    let mut out = Outcome {
        bound_ms: bound.as_secs_f64() * 1e3 - ttl.as_secs_f64() * 1e3,
        ..Default::default()
    };
    for t in 0..trials {
        let key = format!("bench:s4:{}:{t}", imp.name());
        let h_owner = locks::new_owner();
        let w_owner = locks::new_owner();
        let sent = Instant::now();
        if !locks::try_lock(
            imp,
            &mut holder,
            &ctx.scripts,
            Mode::Write,
            &key,
            &h_owner,
            ttl_ms,
        )
        .await?
        {
            return Err(format!(
                "{}: the holder's lock on a fresh key was refused",
                imp.name()
            )
            .into());
        }
        let deadline = sent + ttl;
        let ok = locks::acquire(
            imp,
            &mut waiter,
            &ctx.scripts,
            Mode::Write,
            &key,
            &w_owner,
            10_000,
            sent + bound,
        )
        .await?;
        let now = Instant::now();
        if ok {
            let late = if now >= deadline {
                (now - deadline).as_secs_f64() * 1e3
            } else {
                -((deadline - now).as_secs_f64() * 1e3)
            };
            out.late.push(Some(late));
            locks::release(
                imp,
                &mut waiter,
                &ctx.scripts,
                Mode::Write,
                &key,
                &w_owner,
                10_000,
            )
            .await?;
        } else {
            out.late.push(None);
        }
    }
    Ok(out)
}

pub async fn run(ctx: &Ctx, st: &Settings, chart: &mut ChartData) -> Vec<Row> {
    let mut res = Vec::new();
    for imp in Imp::BOTH {
        res.push(
            measure(ctx, imp, st.s4_ttl, st.s4_trials)
                .await
                .map_err(|e| e.to_string()),
        );
    }
    let sc = "4 lease lapse";
    let case = format!(
        "holder never unlocks, ttl {} ms, {} trials",
        st.s4_ttl.as_millis(),
        st.s4_trials
    );
    let stat = |r: &Result<Outcome, String>, p: f64| -> Val {
        match r {
            Err(e) => Val::Text(format!("error: {e}")),
            Ok(o) if o.late.is_empty() => Val::Missing,
            Ok(o) => {
                let mut w: Vec<f64> = o.late.iter().map(|w| w.unwrap_or(o.bound_ms)).collect();
                w.sort_by(f64::total_cmp);
                let x = percentile(&w, p);
                if o.late.iter().any(Option::is_none) && x >= o.bound_ms {
                    Val::AtLeast(x)
                } else {
                    Val::Num(x)
                }
            }
        }
    };
    let min = |r: &Result<Outcome, String>| match r {
        Ok(o) => o
            .late
            .iter()
            .flatten()
            .copied()
            .fold(f64::INFINITY, f64::min),
        Err(_) => f64::NAN,
    };
    let (m, b) = (stat(&res[0], 100.0), stat(&res[1], 100.0));
    chart.s34.push((
        "served after lease deadline (max)".into(),
        m.clone(),
        b.clone(),
        10.0,
    ));
    let note = format!(
        "earliest service relative to the deadline: module {:.2} ms, baseline {:.2} ms (negative = lease cut short)",
        min(&res[0]),
        min(&res[1])
    );
    let mut row = Row::new(sc, &case, "served after deadline max", "ms")
        .vals(m, b)
        .target("<= 10 ms (and never before the deadline)", |x| x <= 10.0)
        .note(note);
    // Served before the deadline (client clock, so certainly before the server's): a lease
    // was cut short.
    if min(&res[0]) < 0.0 {
        row.module_met = Some(false);
    }
    if min(&res[1]) < 0.0 {
        row.baseline_met = Some(false);
    }
    vec![
        Row::new(sc, &case, "served after deadline p50", "ms")
            .vals(stat(&res[0], 50.0), stat(&res[1], 50.0)),
        row,
    ]
}

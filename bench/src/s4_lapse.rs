//! Scenario 4: lease lapse. A holder takes the write lock with a short ttl and dies (killed,
//! never unlocking); a waiter asks right after. How long after the holder's deadline is the
//! waiter served?
//!
//! The deadline is taken as (time the holder's request was sent + ttl): the server's deadline
//! is at or after it, so the lateness is at most one round trip too high, never too low. A
//! library that takes whole seconds runs with a 1 s ttl.

use std::time::Duration;

use crate::contender::{Contender, Mode};
use crate::report::{percentile, Row, Val};
use crate::worker::{self, now, Event, Job};
use crate::{BenchResult, Ctx, Settings};

const SC: &str = "4 lease lapse";

/// Lateness per trial in ms (negative: served before the deadline, a lease cut short; `None`:
/// never served within the bound).
async fn measure(
    ctx: &Ctx,
    st: &Settings,
    c: Contender,
    ttl_ms: u64,
) -> BenchResult<Vec<Option<f64>>> {
    let ttl = ttl_ms as f64 / 1e3;
    let bound = ttl + 2.0;
    let mut out = Vec::new();
    for t in 0..st.s4_trials {
        let key = format!("bench:s4:{}:{t}", c.name());
        let holder = Job {
            ttl_ms,
            hold_ms: -1.0,
            announce: true,
            hard_s: bound + 5.0,
            ..Job::once(c, ctx, &key, Mode::Write, 0.0)
        };
        // The same ttl for both (python-redis-lock's waiter blocks in BLPOP up to its expire).
        let waiter = Job {
            ttl_ms,
            ..Job::once(c, ctx, &key, Mode::Write, bound)
        };
        let mut h = worker::start(ctx, c, vec![holder]).await?;
        let mut w = worker::start(ctx, c, vec![waiter]).await?;
        h[0].go(now());
        let sent = match h[0].next(Duration::from_secs(10)).await? {
            Event::Grant { asked, .. } => asked,
            other => return Err(format!("the holder's lock on a fresh key: {other:?}").into()),
        };
        w[0].go(now());
        // The holder dies, before its deadline.
        h[0].kill();
        let r = w[0].done(Duration::from_secs_f64(bound + 10.0)).await?;
        worker::end(h.into_iter().chain(w).collect()).await;
        out.push(match r.granted.first() {
            Some(Some(g)) => Some((g - (sent + ttl)) * 1e3),
            _ => None,
        });
    }
    Ok(out)
}

pub async fn run(ctx: &Ctx, st: &Settings) -> Vec<Row> {
    let ttl = st.s4_ttl.as_millis() as u64;
    let mut res = Vec::new();
    for c in Contender::LOCKS {
        let ttl = ttl.max(c.caps().ttl_unit_ms);
        res.push((
            c,
            ttl,
            measure(ctx, st, c, ttl).await.map_err(|e| e.to_string()),
        ));
    }
    let case = format!(
        "holder killed, ttl {ttl} ms (1 s where whole seconds), {} trials",
        st.s4_trials
    );
    let stat = |late: &Vec<Option<f64>>, p: f64| {
        let bound = 2000.0;
        let mut w: Vec<f64> = late.iter().map(|x| x.unwrap_or(bound)).collect();
        w.sort_by(f64::total_cmp);
        let x = percentile(&w, p);
        if late.iter().any(Option::is_none) && x >= bound {
            Val::AtLeast(x)
        } else {
            Val::Num(x)
        }
    };
    let row = |metric: &str, f: &dyn Fn(&Vec<Option<f64>>) -> Val| {
        res.iter()
            .fold(Row::new(SC, &case, metric, "ms"), |r, (c, _, o)| {
                r.val(c.name(), Val::of(o, f))
            })
    };
    let earliest = |who: &str| {
        res.iter()
            .find(|(c, _, _)| c.name() == who)
            .and_then(|(_, _, o)| o.as_ref().ok())
            .map_or(f64::NAN, |l| {
                l.iter().flatten().copied().fold(f64::INFINITY, f64::min)
            })
    };
    let note: Vec<String> = res
        .iter()
        .map(|(c, ttl, _)| format!("{} {:.2} ms (ttl {ttl} ms)", c.name(), earliest(c.name())))
        .collect();
    vec![
        row("served after deadline p50", &|l| stat(l, 50.0)),
        row("served after deadline max", &|l| stat(l, 100.0))
            // Served before the deadline (client clock, so surely before the server's): a
            // lease was cut short.
            .target_by("<= 10 ms (and never before the deadline)", |who, x| {
                x <= 10.0 && earliest(who) >= 0.0
            })
            .note(format!(
                "earliest service relative to the deadline: {}",
                note.join(", ")
            )),
    ]
}

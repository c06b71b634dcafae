//! Scenario 3: a writer under a reader flood. Eight readers hold the key in overlapping 20 ms
//! holds (staggered starts; each asks again right after releasing), so the key is never free
//! of readers; a writer then asks. How long does it wait? Every trial starts a fresh,
//! staggered flood on a fresh key, and the writer's arrival moves through one hold period over
//! the trials. Only contenders with a read mode can run it.

use std::time::Duration;

use crate::contender::{Contender, Mode};
use crate::report::{percentile, Row, Val};
use crate::worker::{self, now, Job};
use crate::{BenchResult, Ctx, Settings};

const SC: &str = "3 writer under reader flood";

#[derive(Clone, Debug, Default)]
struct Outcome {
    /// Writer waits in ms; `None` for a trial where the writer was never served.
    waits: Vec<Option<f64>>,
    bound_ms: f64,
    /// The longest reader hold measured (grant to release sent), ms.
    max_reader_hold_ms: f64,
    reader_grants: u64,
}

async fn trial(
    ctx: &Ctx,
    st: &Settings,
    c: Contender,
    t: usize,
    out: &mut Outcome,
) -> BenchResult<()> {
    let key = format!("bench:s3:{}:{t}", c.name());
    let hold = st.s3_hold.as_secs_f64();
    let bound = st.s3_bound.as_secs_f64();
    let n = st.s3_readers;
    // The writer arrives once every reader holds (the last starts at 7/8 of a hold), at a
    // phase that moves through one hold over the trials.
    let arrive = 2.0 * hold + hold * t as f64 / st.s3_trials.max(1) as f64;
    let hard = arrive + bound + 4.0 * hold + 3.0;
    let readers = (0..n)
        .map(|i| Job {
            offset_s: hold * i as f64 / n as f64,
            hard_s: hard,
            ..Job::repeat(c, ctx, &key, Mode::Read, hold * 1e3, hard, 0.0)
        })
        .collect();
    let writer = Job {
        offset_s: arrive,
        hold_ms: 2.0,
        hard_s: arrive + bound + 0.5,
        wait_s: bound,
        ..Job::once(c, ctx, &key, Mode::Write, bound)
    };
    let mut rs = worker::start(ctx, c, readers).await?;
    let mut w = worker::start(ctx, c, vec![writer]).await?;
    let go = now() + 0.05;
    for x in rs.iter().chain(&w) {
        x.go(go);
    }
    let wr = w[0]
        .done(Duration::from_secs_f64(arrive + bound + 10.0))
        .await?;
    for r in &rs {
        r.stop();
    }
    let reps = worker::finish(&mut rs, Duration::from_secs_f64(hard + 10.0)).await?;
    worker::end(rs.into_iter().chain(w).collect()).await;
    out.waits
        .push(match (wr.asked.first(), wr.granted.first()) {
            (Some(a), Some(Some(g))) => Some((g - a) * 1e3),
            _ => None,
        });
    for r in reps {
        out.reader_grants += r.grants;
        for h in r.holds {
            out.max_reader_hold_ms = out.max_reader_hold_ms.max(h * 1e3);
        }
    }
    Ok(())
}

async fn measure(ctx: &Ctx, st: &Settings, c: Contender) -> BenchResult<Outcome> {
    let mut out = Outcome {
        bound_ms: st.s3_bound.as_secs_f64() * 1e3,
        ..Default::default()
    };
    for t in 0..st.s3_trials {
        trial(ctx, st, c, t, &mut out).await?;
    }
    Ok(out)
}

impl Outcome {
    fn stat(&self, max: bool) -> Val {
        let unserved = self.waits.iter().filter(|w| w.is_none()).count();
        let mut w: Vec<f64> = self
            .waits
            .iter()
            .map(|w| w.unwrap_or(self.bound_ms))
            .collect();
        w.sort_by(f64::total_cmp);
        let x = if max {
            w.last().copied().unwrap_or(f64::NAN)
        } else {
            percentile(&w, 50.0)
        };
        if (max && unserved > 0) || unserved * 2 >= w.len() {
            Val::AtLeast(x)
        } else {
            Val::Num(x)
        }
    }
}

pub async fn run(ctx: &Ctx, st: &Settings) -> Vec<Row> {
    let case = format!(
        "{} readers, {} ms holds, {} trials",
        st.s3_readers,
        st.s3_hold.as_millis(),
        st.s3_trials
    );
    let mut res = Vec::new();
    for c in Contender::LOCKS {
        let o = match c.cannot(Mode::Read) {
            Some(why) => Err(Val::Cannot(why)),
            None => measure(ctx, st, c)
                .await
                .map_err(|e| Val::Error(e.to_string())),
        };
        res.push((c, o));
    }
    let row = |metric: &str, f: &dyn Fn(&Outcome) -> Val| {
        res.iter()
            .fold(Row::new(SC, &case, metric, "ms"), |r, (c, o)| {
                r.val(c.name(), o.as_ref().map_or_else(|e| e.clone(), f))
            })
    };
    // Each contender is judged against the longest reader hold it let its writer queue behind,
    // plus 1 ms for the release to reach the server and the grant to come back.
    let limit = |who: &str| {
        res.iter()
            .find(|(c, _)| c.name() == who)
            .and_then(|(_, o)| o.as_ref().ok())
            .map_or(st.s3_hold.as_secs_f64() * 1e3, |o| o.max_reader_hold_ms)
            + 1.0
    };
    let detail: Vec<String> = res
        .iter()
        .filter_map(|(c, o)| {
            o.as_ref().ok().map(|o| {
                format!(
                    "{}: {} of {} served, {} reader grants, longest reader hold {:.2} ms",
                    c.name(),
                    o.waits.iter().filter(|w| w.is_some()).count(),
                    o.waits.len(),
                    o.reader_grants,
                    o.max_reader_hold_ms
                )
            })
        })
        .collect();
    vec![
        row("writer wait p50", &|o| o.stat(false)),
        row("writer wait max", &|o| o.stat(true))
            .target_by("<= longest reader hold + 1 ms", |who, x| x <= limit(who))
            .note(detail.join("; ")),
    ]
}

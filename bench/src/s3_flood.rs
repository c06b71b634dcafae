//! Scenario 3: a writer under a reader flood. Eight readers hold the key in overlapping 20 ms
//! holds (staggered starts; each asks again right after releasing), so the key is never free
//! of readers. A writer then asks for the write lock; we measure how long it waits. Every
//! trial starts a fresh, staggered flood on a fresh key (after a writer the module grants the
//! queued readers together, which would leave them in step for the next trial), and the
//! writer's arrival moves through one hold period over the trials.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::locks::{self, Imp, Mode};
use crate::report::{Row, Val};
use crate::{BenchResult, ChartData, Ctx, Settings};

#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Writer waits in ms; `None` for a trial where the writer was never served.
    pub waits: Vec<Option<f64>>,
    pub bound_ms: f64,
    /// The longest reader hold measured (grant to release sent), ms.
    pub max_reader_hold_ms: f64,
    pub reader_grants: u64,
}

/// One flood of `readers` readers with staggered starts; the writer arrives after every
/// reader holds, at a phase that moves with `trial`, and we take its wait.
#[allow(clippy::too_many_arguments)]
async fn one_trial(
    ctx: &Ctx,
    imp: Imp,
    conns: &mut Vec<redis::aio::MultiplexedConnection>,
    writer: &mut redis::aio::MultiplexedConnection,
    hold: Duration,
    trial: usize,
    trials: usize,
    bound: Duration,
    out: &mut Outcome,
) -> BenchResult<()> {
    let key = format!("bench:s3:{}:{trial}", imp.name());
    let ttl_ms = 10_000;
    let readers = conns.len();
    let stop = Arc::new(AtomicBool::new(false));
    let max_hold = Arc::new(Mutex::new(0f64));
    let t_start = Instant::now() + Duration::from_millis(5);
    // Readers stop by themselves at the latest here, whatever happens.
    let hard_stop = t_start + bound + hold * 4 + Duration::from_secs(5);
    let mut tasks = Vec::new();
    for (i, mut conn) in conns.drain(..).enumerate() {
        let key = key.clone();
        let scripts = ctx.scripts.clone();
        let stop = stop.clone();
        let max_hold = max_hold.clone();
        let offset = hold * i as u32 / readers as u32;
        tasks.push(tokio::spawn(async move {
            let owner = locks::new_owner();
            let mut grants = 0u64;
            tokio::time::sleep_until((t_start + offset).into()).await;
            while !stop.load(Ordering::Relaxed) && Instant::now() < hard_stop {
                let deadline = (Instant::now() + Duration::from_secs(5)).min(hard_stop);
                let ok = locks::acquire(
                    imp,
                    &mut conn,
                    &scripts,
                    Mode::Read,
                    &key,
                    &owner,
                    ttl_ms,
                    deadline,
                )
                .await;
                match ok {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => return (conn, Err(e)),
                }
                let g = Instant::now();
                grants += 1;
                locks::hold_until(g + hold).await;
                let h = g.elapsed().as_secs_f64() * 1e3;
                {
                    let mut m = max_hold.lock().unwrap();
                    *m = m.max(h);
                }
                if let Err(e) =
                    locks::release(imp, &mut conn, &scripts, Mode::Read, &key, &owner, ttl_ms).await
                {
                    return (conn, Err(e));
                }
            }
            (conn, BenchResult::Ok(grants))
        }));
    }
    let writer_result: BenchResult<()> = async {
        let owner = locks::new_owner();
        // Every reader holds by now (the last started at 7/8 of a hold); the writer's arrival
        // moves through one hold period over the trials.
        let phase = hold * trial as u32 / trials.max(1) as u32;
        tokio::time::sleep_until((t_start + hold * 2 + phase).into()).await;
        let t0 = Instant::now();
        let ok = locks::acquire(
            imp,
            writer,
            &ctx.scripts,
            Mode::Write,
            &key,
            &owner,
            ttl_ms,
            t0 + bound,
        )
        .await?;
        if ok {
            let waited = t0.elapsed();
            out.waits.push(Some(waited.as_secs_f64() * 1e3));
            locks::hold_until(t0 + waited + Duration::from_millis(2)).await;
            locks::release(imp, writer, &ctx.scripts, Mode::Write, &key, &owner, ttl_ms).await?;
        } else {
            out.waits.push(None);
        }
        Ok(())
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut reader_err = None;
    for t in tasks {
        let (conn, r) = t.await?;
        conns.push(conn);
        match r {
            Ok(g) => out.reader_grants += g,
            Err(e) => reader_err = reader_err.or(Some(e)),
        }
    }
    writer_result?;
    if let Some(e) = reader_err {
        return Err(e);
    }
    let m = *max_hold.lock().unwrap();
    out.max_reader_hold_ms = out.max_reader_hold_ms.max(m);
    Ok(())
}

pub async fn measure(
    ctx: &Ctx,
    imp: Imp,
    readers: usize,
    hold: Duration,
    trials: usize,
    bound: Duration,
) -> BenchResult<Outcome> {
    let mut conns = Vec::new();
    for _ in 0..readers {
        conns.push(locks::connect(&ctx.client, None).await?);
    }
    let mut writer = locks::connect(&ctx.client, None).await?;
    let mut out = Outcome {
        bound_ms: bound.as_secs_f64() * 1e3,
        ..Default::default()
    };
    for trial in 0..trials {
        one_trial(
            ctx,
            imp,
            &mut conns,
            &mut writer,
            hold,
            trial,
            trials,
            bound,
            &mut out,
        )
        .await?;
    }
    Ok(out)
}

pub async fn run(ctx: &Ctx, st: &Settings, chart: &mut ChartData) -> Vec<Row> {
    let hold = st.s3_hold;
    let mut res = Vec::new();
    for imp in Imp::BOTH {
        res.push(
            measure(ctx, imp, st.s3_readers, hold, st.s3_trials, st.s3_bound)
                .await
                .map_err(|e| e.to_string()),
        );
    }
    let sc = "3 writer under reader flood";
    let case = format!(
        "{} readers, {} ms holds, {} trials",
        st.s3_readers,
        hold.as_millis(),
        st.s3_trials
    );
    let stat = |r: &Result<Outcome, String>, max: bool| -> Val {
        match r {
            Err(e) => Val::Text(format!("error: {e}")),
            Ok(o) if o.waits.is_empty() => Val::Missing,
            Ok(o) => {
                if o.waits.iter().any(Option::is_none) && max {
                    return Val::AtLeast(o.bound_ms);
                }
                let mut w: Vec<f64> = o.waits.iter().map(|w| w.unwrap_or(o.bound_ms)).collect();
                w.sort_by(f64::total_cmp);
                let x = if max {
                    *w.last().unwrap()
                } else {
                    crate::report::percentile(&w, 50.0)
                };
                if o.waits.iter().filter(|w| w.is_none()).count() * 2 >= o.waits.len() && !max {
                    Val::AtLeast(x)
                } else {
                    Val::Num(x)
                }
            }
        }
    };
    // The longest reader hold the writer can queue behind, plus 1 ms for the release to reach
    // the server and the grant to come back.
    let reader_hold = match &res[0] {
        Ok(o) if o.max_reader_hold_ms > 0.0 => o.max_reader_hold_ms,
        _ => hold.as_secs_f64() * 1e3,
    };
    let limit = reader_hold + 1.0;
    let (m, b) = (stat(&res[0], true), stat(&res[1], true));
    chart.s34.push((
        "writer wait under reader flood (max)".into(),
        m.clone(),
        b.clone(),
        limit,
    ));
    let detail = |r: &Result<Outcome, String>| match r {
        Ok(o) => format!(
            "{} of {} trials served, reader grants {}, longest reader hold {:.2} ms",
            o.waits.iter().filter(|w| w.is_some()).count(),
            o.waits.len(),
            o.reader_grants,
            o.max_reader_hold_ms
        ),
        Err(_) => "-".into(),
    };
    vec![
        Row::new(sc, &case, "writer wait p50", "ms")
            .vals(stat(&res[0], false), stat(&res[1], false)),
        Row::new(sc, &case, "writer wait max", "ms")
            .vals(m, b)
            .target(
                &format!("<= longest reader hold + 1 ms = {limit:.1} ms"),
                |x| x <= limit,
            )
            .note(format!(
                "module: {}; baseline: {}",
                detail(&res[0]),
                detail(&res[1])
            )),
    ]
}

//! Scenario 3: a writer under a reader flood. Eight readers hold the key in overlapping 20 ms
//! holds (staggered starts; each asks again right after releasing), so the key is never free
//! of readers. A writer then asks for the write lock; we measure how long it waits.

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

pub async fn measure(
    ctx: &Ctx,
    imp: Imp,
    readers: usize,
    hold: Duration,
    trials: usize,
    bound: Duration,
) -> BenchResult<Outcome> {
    let key = format!("bench:s3:{}", imp.name());
    let ttl_ms = 10_000;
    let stop = Arc::new(AtomicBool::new(false));
    let max_hold = Arc::new(Mutex::new(0f64));
    let mut tasks = Vec::new();
    let t_start = Instant::now() + Duration::from_millis(20);
    // Readers stop by themselves at the latest here, whatever happens.
    let hard_stop = Instant::now() + bound * (trials as u32 + 1) + Duration::from_secs(10);
    for i in 0..readers {
        let mut conn = locks::connect(&ctx.client, None).await?;
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
                if !locks::acquire(
                    imp,
                    &mut conn,
                    &scripts,
                    Mode::Read,
                    &key,
                    &owner,
                    ttl_ms,
                    deadline,
                )
                .await?
                {
                    continue;
                }
                let g = Instant::now();
                grants += 1;
                locks::hold_for(hold).await;
                let h = g.elapsed().as_secs_f64() * 1e3;
                {
                    let mut m = max_hold.lock().unwrap();
                    *m = m.max(h);
                }
                locks::release(imp, &mut conn, &scripts, Mode::Read, &key, &owner, ttl_ms).await?;
            }
            BenchResult::Ok(grants)
        }));
    }
    let mut out = Outcome {
        bound_ms: bound.as_secs_f64() * 1e3,
        ..Default::default()
    };
    let writer_result: BenchResult<()> = async {
        let mut conn = locks::connect(&ctx.client, None).await?;
        let owner = locks::new_owner();
        // Let the flood get going: every reader has taken its first hold.
        tokio::time::sleep_until((t_start + hold * 2).into()).await;
        for _ in 0..trials {
            let t0 = Instant::now();
            let ok = locks::acquire(
                imp,
                &mut conn,
                &ctx.scripts,
                Mode::Write,
                &key,
                &owner,
                ttl_ms,
                t0 + bound,
            )
            .await?;
            if ok {
                out.waits.push(Some(t0.elapsed().as_secs_f64() * 1e3));
                locks::hold_for(Duration::from_millis(2)).await;
                locks::release(
                    imp,
                    &mut conn,
                    &ctx.scripts,
                    Mode::Write,
                    &key,
                    &owner,
                    ttl_ms,
                )
                .await?;
            } else {
                out.waits.push(None);
            }
            // Let the readers overlap again before the next trial.
            tokio::time::sleep(hold * 3).await;
        }
        Ok(())
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut reader_err = None;
    for t in tasks {
        match t.await? {
            Ok(g) => out.reader_grants += g,
            Err(e) => reader_err = reader_err.or(Some(e)),
        }
    }
    writer_result?;
    if let Some(e) = reader_err {
        return Err(e);
    }
    out.max_reader_hold_ms = *max_hold.lock().unwrap();
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

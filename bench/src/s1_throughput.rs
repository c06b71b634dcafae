//! Scenario 1: uncontended throughput, pipelined (as `redis-benchmark -c 50 -P 16` does):
//! every connection works on keys of its own, sending pipelines of lock+unlock pairs.

use std::time::{Duration, Instant};

use crate::locks::{self, Imp, Mode};
use crate::report::{median, Row, Val};
use crate::resp::{RawConn, Reply};
use crate::{BenchResult, ChartData, Ctx, Settings};

/// What one pipelined run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Floor,
    Lock(Imp, Mode),
}

impl Variant {
    pub fn label(self) -> &'static str {
        match self {
            Variant::Floor => "SET NX PX + DEL",
            Variant::Lock(_, Mode::Read) => "RLOCK+UNLOCK",
            Variant::Lock(_, Mode::Write) => "WLOCK+UNLOCK",
        }
    }
}

const TTL_MS: u64 = 30_000;

/// The pipeline one connection sends, over and over: `pairs` lock+unlock pairs, each on a key
/// of this connection's own.
fn pipeline_bytes(ctx: &Ctx, v: Variant, conn: usize, pairs: usize, tag: &str) -> Vec<u8> {
    let owner = locks::new_owner();
    let mut out = Vec::new();
    for j in 0..pairs {
        let key = format!("bench:s1:{tag}:{conn}:{j}");
        match v {
            Variant::Floor => {
                out.extend(crate::resp::encode_str(&[
                    "SET",
                    &key,
                    &owner,
                    "NX",
                    "PX",
                    &TTL_MS.to_string(),
                ]));
                out.extend(crate::resp::encode_str(&["DEL", &key]));
            }
            Variant::Lock(imp, mode) => {
                out.extend(locks::raw_lock(
                    imp,
                    &ctx.scripts,
                    mode,
                    &key,
                    &owner,
                    TTL_MS,
                ));
                out.extend(locks::raw_unlock(
                    imp,
                    &ctx.scripts,
                    mode,
                    &key,
                    &owner,
                    TTL_MS,
                ));
            }
        }
    }
    out
}

/// What one run measured.
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    pub pairs_per_sec: f64,
    /// Server CPU time (user + system) per pair, µs.
    pub server_cpu_us: Option<f64>,
    /// Server CPU time / wall time.
    pub server_busy: Option<f64>,
    /// Load generator thread CPU time / wall time.
    pub client_busy: f64,
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut u) != 0 {
            return Duration::ZERO;
        }
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        tv(u.ru_utime) + tv(u.ru_stime)
    }
}

/// Pairs per second of one variant over `secs` (or `max_pairs` pairs, whichever ends first).
/// Runs its load generator on a current-thread runtime of its own, so the client uses at most
/// one core and leaves the other to the server.
pub fn run_variant(
    ctx: &Ctx,
    st: &Settings,
    v: Variant,
    secs: f64,
    max_pairs: u64,
) -> BenchResult<Measured> {
    let pairs = st.s1_pipeline_pairs;
    let tag = match v {
        Variant::Floor => "floor".to_string(),
        Variant::Lock(imp, mode) => format!("{}-{:?}", imp.name(), mode),
    };
    let bufs: Vec<Vec<u8>> = (0..st.s1_conns)
        .map(|c| pipeline_bytes(ctx, v, c, pairs, &tag))
        .collect();
    let port = ctx.port;
    let per_conn = (max_pairs / st.s1_conns as u64).max(pairs as u64);
    let dur = Duration::from_secs_f64(secs);
    let pid = ctx.server_pid;
    std::thread::scope(|s| {
        s.spawn(move || -> BenchResult<Measured> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let mut conns = Vec::new();
                for _ in 0..bufs.len() {
                    conns.push(RawConn::connect(port, Duration::from_secs(5)).await?);
                }
                let cpu0 = pid.and_then(crate::process_cpu);
                let me0 = thread_cpu();
                let start = Instant::now();
                let end = start + dur;
                let mut tasks = Vec::new();
                for (mut conn, buf) in conns.into_iter().zip(bufs) {
                    tasks.push(tokio::spawn(async move {
                        let mut done: u64 = 0;
                        while done < per_conn && Instant::now() < end {
                            conn.send(&buf).await?;
                            // One timeout for the whole pipeline (a timer per reply would cost
                            // more client CPU than the parsing).
                            let replies = tokio::time::timeout(Duration::from_secs(10), async {
                                let mut bad = None;
                                for i in 0..2 * pairs {
                                    let r = conn.read_reply().await?;
                                    let ok = if i % 2 == 0 {
                                        r.is_grant()
                                    } else {
                                        r == Reply::Int(1)
                                    };
                                    if !ok && bad.is_none() {
                                        bad = Some((i, r));
                                    }
                                }
                                BenchResult::Ok(bad)
                            })
                            .await
                            .map_err(|_| "no reply to a pipeline within 10 s")??;
                            if let Some((i, r)) = replies {
                                return Err(format!(
                                    "{}: unexpected reply {r:?} to command {i} of the pipeline",
                                    v.label()
                                )
                                .into());
                            }
                            done += pairs as u64;
                        }
                        BenchResult::Ok(done)
                    }));
                }
                let mut total = 0;
                for t in tasks {
                    total += t.await??;
                }
                let el = start.elapsed().as_secs_f64();
                let me = (thread_cpu() - me0).as_secs_f64();
                // /proc counts in clock ticks (10 ms): a run shorter than 0.2 s tells nothing.
                let cpu = match (cpu0, pid.and_then(crate::process_cpu)) {
                    (Some(a), Some(b)) if el >= 0.2 => Some((b - a).as_secs_f64()),
                    _ => None,
                };
                Ok(Measured {
                    pairs_per_sec: total as f64 / el,
                    server_cpu_us: cpu.map(|c| c * 1e6 / total.max(1) as f64),
                    server_busy: cpu.map(|c| c / el),
                    client_busy: me / el,
                })
            })
        })
        .join()
        .map_err(|_| "load generator thread panicked")?
    })
}

/// Runs the scenario: rounds of every variant, interleaved; reports the median per variant.
pub fn run(ctx: &Ctx, st: &Settings, chart: &mut ChartData) -> Vec<Row> {
    let variants = [
        Variant::Floor,
        Variant::Lock(Imp::Module, Mode::Read),
        Variant::Lock(Imp::Module, Mode::Write),
        Variant::Lock(Imp::Baseline, Mode::Read),
        Variant::Lock(Imp::Baseline, Mode::Write),
    ];
    let mut results: Vec<Result<Vec<Measured>, String>> = vec![Ok(Vec::new()); variants.len()];
    // For profiling one variant: REDIS_LEASE_BENCH_S1=floor|module-read|module-write|
    // baseline-read|baseline-write runs only that one.
    let only = std::env::var("REDIS_LEASE_BENCH_S1").ok();
    let name = |v: &Variant| match v {
        Variant::Floor => "floor".to_string(),
        Variant::Lock(imp, Mode::Read) => format!("{}-read", imp.name()),
        Variant::Lock(imp, Mode::Write) => format!("{}-write", imp.name()),
    };
    for _round in 0..st.s1_rounds {
        for (i, v) in variants.iter().enumerate() {
            if results[i].is_err() || only.as_ref().is_some_and(|o| *o != name(v)) {
                continue;
            }
            // A short warm-up, not measured, then the measured run.
            let warm = run_variant(ctx, st, *v, st.s1_secs / 8.0, st.s1_max_pairs / 8)
                .and_then(|_| run_variant(ctx, st, *v, st.s1_secs, st.s1_max_pairs));
            match warm {
                Ok(x) => results[i].as_mut().unwrap().push(x),
                Err(e) => results[i] = Err(e.to_string()),
            }
        }
    }
    let stat = |i: usize, f: &dyn Fn(&Measured) -> Option<f64>| match &results[i] {
        Ok(v) if !v.is_empty() => {
            let xs: Vec<f64> = v.iter().filter_map(f).collect();
            if xs.is_empty() {
                Val::Missing
            } else {
                Val::Num(median(&xs))
            }
        }
        Ok(_) => Val::Missing,
        Err(e) => Val::Text(format!("error: {e}")),
    };
    let val = |i: usize| stat(i, &|m| Some(m.pairs_per_sec));
    let cpu = |i: usize| stat(i, &|m| m.server_cpu_us);
    let busy = |i: usize| stat(i, &|m| m.server_busy.map(|b| b * 100.0));
    let cbusy = |i: usize| stat(i, &|m| Some(m.client_busy * 100.0));
    let pct = |v: Val| v.num().map(|b| format!("{b:.0}%")).unwrap_or("?".into());
    let floor = val(0);
    let sc = "1 uncontended, pipelined";
    let setup = format!(
        "{} conns x {} pairs/pipeline, median of {} runs",
        st.s1_conns, st.s1_pipeline_pairs, st.s1_rounds
    );
    let mut rows = vec![
        Row::new(sc, "SET NX PX + DEL (floor)", "pairs/s", "")
            .vals(floor.clone(), Val::Text("(same server, same run)".into()))
            .note(setup)
            .reference(),
        Row::new(sc, "SET NX PX + DEL (floor)", "server CPU per pair", "µs")
            .vals(cpu(0), Val::Missing)
            .reference()
            .note(format!(
                "busy: server {}, load generator {}",
                pct(busy(0)),
                pct(cbusy(0))
            )),
    ];
    chart.s1.push(("SET NX PX+DEL".into(), floor.num(), 0));
    for (mode, mi, bi) in [(Mode::Read, 1, 3), (Mode::Write, 2, 4)] {
        let case = Variant::Lock(Imp::Module, mode).label();
        let (m, b) = (val(mi), val(bi));
        chart.s1.push((format!("module {case}"), m.num(), 1));
        chart.s1.push((format!("baseline {case}"), b.num(), 2));
        rows.push(Row::new(sc, case, "pairs/s", "").vals(m.clone(), b.clone()));
        let ratio = |x: &Val, y: &Val| match (x.num(), y.num()) {
            (Some(a), Some(b)) if b > 0.0 => Val::Num(a / b),
            _ => Val::Missing,
        };
        rows.push(
            Row::new(sc, case, "vs floor", "x")
                .vals(ratio(&m, &floor), ratio(&b, &floor))
                .target(">= 0.85", |r| r >= 0.85),
        );
        rows.push(
            Row::new(sc, case, "module / baseline", "x")
                .vals(ratio(&m, &b), Val::Missing)
                .module_target(">= 2.5", |r| r >= 2.5),
        );
        rows.push(
            Row::new(sc, case, "server CPU per pair", "µs")
                .vals(cpu(mi), cpu(bi))
                .note(format!(
                    "busy: server {} / {}, load generator {} / {} (module / baseline)",
                    pct(busy(mi)),
                    pct(busy(bi)),
                    pct(cbusy(mi)),
                    pct(cbusy(bi))
                )),
        );
    }
    rows
}

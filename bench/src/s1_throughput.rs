//! Scenario 1: uncontended cost.
//!
//! - Pipelined, as `redis-benchmark -c 50 -P 16`: every connection sends pipelines of
//!   lock+unlock pairs on keys of its own. Only contenders with fixed commands can be
//!   pipelined so (the floor, the module, the seed); the load generator is one thread with a
//!   raw RESP client, so that it leaves the other core to the server.
//! - One request at a time, as a library user's loop: a few clients, each on its own key,
//!   acquire and release in turn, through each contender's own client (the libraries' own API
//!   for the peers). Grants per second, and the server's side of it: CPU time per grant (from
//!   `/proc/PID/stat`) and commands per grant (`INFO commandstats`), which do not depend on the
//!   client's language.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::contender::{self, Contender, Mode};
use crate::report::{median, Row, Val};
use crate::resp::{RawConn, Reply};
use crate::worker::{self, now, Job};
use crate::{process_cpu, BenchResult, Ctx, Settings};

const TTL_MS: u64 = 30_000;
const SC_PIPE: &str = "1a uncontended, pipelined";
const SC_SEQ: &str = "1b uncontended, one request at a time";

/// The pipelined pairs: (contender, mode, case).
const PAIRS: [(Contender, Mode, &str); 6] = [
    (Contender::Floor, Mode::Write, "SET NX PX + DEL"),
    (Contender::Module, Mode::Read, "RLOCK + UNLOCK"),
    (Contender::Module, Mode::Write, "WLOCK + UNLOCK"),
    (Contender::Module, Mode::Leader, "CAMPAIGN + RESIGN"),
    (Contender::Seed, Mode::Read, "read lock + unlock"),
    (Contender::Seed, Mode::Write, "write lock + unlock"),
];

/// What one pipelined run measured.
#[derive(Clone, Copy, Debug)]
struct Measured {
    pairs_per_sec: f64,
    /// Server CPU time per pair, µs, and server CPU / wall time.
    server_cpu_us: Option<f64>,
    server_busy: Option<f64>,
    /// Load generator thread CPU / wall time.
    client_busy: f64,
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut u) != 0 {
            return Duration::ZERO;
        }
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        tv(u.ru_utime) + tv(u.ru_stime)
    }
}

/// Pairs per second of one pair kind over `secs` (or `max_pairs`), on a current-thread
/// runtime of its own so that the client uses at most one core.
fn pipelined(
    ctx: &Ctx,
    st: &Settings,
    c: Contender,
    mode: Mode,
    secs: f64,
    max_pairs: u64,
) -> BenchResult<Measured> {
    let pairs = st.s1_pipeline_pairs;
    let bufs: Vec<Vec<u8>> = (0..st.s1_conns)
        .map(|i| {
            let owner = contender::new_owner();
            let mut out = Vec::new();
            for j in 0..pairs {
                let key = format!("bench:s1:{}:{}:{i}:{j}", c.name(), mode.word());
                let s = &ctx.scripts;
                out.extend(
                    contender::raw_lock(c, s, mode, &key, &owner, TTL_MS).expect("a fixed command"),
                );
                out.extend(
                    contender::raw_unlock(c, s, mode, &key, &owner, TTL_MS)
                        .expect("a fixed command"),
                );
            }
            out
        })
        .collect();
    let (port, pid) = (ctx.port, ctx.server_pid);
    let per_conn = (max_pairs / st.s1_conns as u64).max(pairs as u64);
    let dur = Duration::from_secs_f64(secs);
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
                let (cpu0, me0, start) = (pid.and_then(process_cpu), thread_cpu(), Instant::now());
                let end = start + dur;
                let mut tasks = Vec::new();
                for (mut conn, buf) in conns.into_iter().zip(bufs) {
                    tasks.push(tokio::spawn(async move {
                        let mut done: u64 = 0;
                        while done < per_conn && Instant::now() < end {
                            conn.send(&buf).await?;
                            // One timeout for the whole pipeline (a timer per reply would cost
                            // more client CPU than the parsing).
                            let bad = tokio::time::timeout(Duration::from_secs(10), async {
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
                            if let Some((i, r)) = bad {
                                return Err(format!(
                                    "unexpected reply {r:?} to command {i} of the pipeline"
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
                let cpu = match (cpu0, pid.and_then(process_cpu)) {
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

/// The pipelined part: rounds of every pair kind, interleaved; the median per kind.
pub fn run_pipelined(ctx: &Ctx, st: &Settings) -> Vec<Row> {
    let mut res: Vec<Result<Vec<Measured>, String>> = vec![Ok(Vec::new()); PAIRS.len()];
    // For profiling one kind: REDIS_LEASE_BENCH_S1="module read" runs only that one.
    let only = std::env::var("REDIS_LEASE_BENCH_S1").ok();
    for _ in 0..st.s1_rounds {
        for (i, (c, mode, _)) in PAIRS.iter().enumerate() {
            let name = format!("{} {}", c.name(), mode.word());
            if res[i].is_err() || only.as_ref().is_some_and(|o| *o != name) {
                continue;
            }
            // A short warm-up, not measured, then the measured run.
            let m = pipelined(ctx, st, *c, *mode, st.s1_secs / 8.0, st.s1_max_pairs / 8)
                .and_then(|_| pipelined(ctx, st, *c, *mode, st.s1_secs, st.s1_max_pairs));
            match (m, &mut res[i]) {
                (Ok(x), Ok(v)) => v.push(x),
                (Err(e), r) => *r = Err(e.to_string()),
                _ => {}
            }
        }
    }
    let stat = |i: usize, f: &dyn Fn(&Measured) -> Option<f64>| {
        Val::of(&res[i], |v| {
            let xs: Vec<f64> = v.iter().filter_map(f).collect();
            if xs.is_empty() {
                Val::Missing
            } else {
                Val::Num(median(&xs))
            }
        })
    };
    let floor = stat(0, &|m| Some(m.pairs_per_sec));
    let floor_cpu = stat(0, &|m| m.server_cpu_us);
    let pct = |v: Val| v.num().map(|b| format!("{b:.0}%")).unwrap_or("?".into());
    let setup = format!(
        "{} conns x {} pairs per pipeline, median of {} runs",
        st.s1_conns, st.s1_pipeline_pairs, st.s1_rounds
    );
    let mut rows = Vec::new();
    let mut busy = Vec::new();
    for (case_mode, case) in [
        (Mode::Write, "write lock + unlock"),
        (Mode::Read, "read lock + unlock"),
        (Mode::Leader, "leader campaign + resign"),
    ] {
        let mut thr = Row::new(SC_PIPE, case, "pairs/s", "").val("floor", floor.clone());
        let mut ratio = Row::new(SC_PIPE, case, "vs floor", "x");
        let mut cpu =
            Row::new(SC_PIPE, case, "server CPU per pair", "µs").val("floor", floor_cpu.clone());
        for c in [Contender::Module, Contender::Seed] {
            let Some(i) = PAIRS.iter().position(|p| p.0 == c && p.1 == case_mode) else {
                let why = Val::Cannot(c.cannot(case_mode).unwrap_or_default());
                thr = thr.val(c.name(), why.clone());
                ratio = ratio.val(c.name(), why.clone());
                cpu = cpu.val(c.name(), why);
                continue;
            };
            let v = stat(i, &|m| Some(m.pairs_per_sec));
            let r = match (v.num(), floor.num()) {
                (Some(a), Some(b)) if b > 0.0 => Val::Num(a / b),
                _ => v.clone(),
            };
            busy.push(format!(
                "{} {}: server {}, load generator {}",
                c.name(),
                PAIRS[i].2,
                pct(stat(i, &|m| m.server_busy.map(|b| b * 100.0))),
                pct(stat(i, &|m| Some(m.client_busy * 100.0)))
            ));
            thr = thr.val(c.name(), v);
            ratio = ratio.val(c.name(), r);
            cpu = cpu.val(c.name(), stat(i, &|m| m.server_cpu_us));
        }
        rows.push(thr.note(setup.clone()));
        rows.push(ratio.target(">= 0.85", |r| r >= 0.85));
        rows.push(cpu);
    }
    busy.insert(
        0,
        format!(
            "busy: floor: server {}, load generator {}",
            pct(stat(0, &|m| m.server_busy.map(|b| b * 100.0))),
            pct(stat(0, &|m| Some(m.client_busy * 100.0)))
        ),
    );
    if let Some(r) = rows.last_mut() {
        r.note = busy.join("; ");
    }
    rows
}

/// `INFO commandstats`: calls per command.
pub async fn command_calls(ctx: &Ctx) -> BenchResult<HashMap<String, u64>> {
    let mut c = contender::connect(&ctx.client, Some(Duration::from_secs(10))).await?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await?;
    let mut out = HashMap::new();
    for line in info.lines() {
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|r| r.split_once(':'))
        else {
            continue;
        };
        let calls = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        out.insert(name.to_string(), calls);
    }
    Ok(out)
}

/// What one contender's clients did, one request at a time.
#[derive(Clone)]
struct Sequential {
    grants_per_sec: f64,
    server_cpu_us: Option<f64>,
    commands_per_grant: f64,
    client_cpu_us: Option<f64>,
}

async fn sequential(ctx: &Ctx, st: &Settings, c: Contender, mode: Mode) -> BenchResult<Sequential> {
    let secs = st.s1_seq_secs;
    let jobs = (0..st.s1_seq_clients)
        .map(|i| Job {
            record: false,
            ..Job::repeat(
                c,
                ctx,
                &format!("bench:s1b:{}:{}:{i}", c.name(), mode.word()),
                mode,
                0.0,
                secs,
                5.0,
            )
        })
        .collect();
    let mut ws = worker::start(ctx, c, jobs).await?;
    let calls0 = command_calls(ctx).await?;
    let cpu0 = ctx.server_pid.and_then(process_cpu);
    let go = now() + 0.02;
    for w in &ws {
        w.go(go);
    }
    let reps = worker::finish(&mut ws, Duration::from_secs_f64(secs + 20.0)).await?;
    let el = now() - go;
    worker::end(ws).await;
    let cpu = match (cpu0, ctx.server_pid.and_then(process_cpu)) {
        (Some(a), Some(b)) => Some((b - a).as_secs_f64()),
        _ => None,
    };
    let calls1 = command_calls(ctx).await?;
    let calls: u64 = calls1
        .iter()
        .filter(|(k, _)| k.as_str() != "info")
        .map(|(k, v)| v - calls0.get(k).copied().unwrap_or(0))
        .sum();
    let grants: u64 = reps.iter().map(|r| r.grants).sum();
    if grants == 0 {
        return Err("no grant".into());
    }
    let g = grants as f64;
    let client_cpu: Option<f64> = reps.iter().map(|r| r.cpu_s).sum();
    Ok(Sequential {
        grants_per_sec: g / el,
        server_cpu_us: cpu.map(|c| c * 1e6 / g),
        commands_per_grant: calls as f64 / g,
        client_cpu_us: client_cpu.map(|c| c * 1e6 / g),
    })
}

/// The one-request-at-a-time part, for every contender in write and read mode: rounds of
/// every kind, interleaved (a burst of other work then skews one round, not one contender);
/// the median per kind.
pub async fn run_sequential(ctx: &Ctx, st: &Settings) -> Vec<Row> {
    let kinds: Vec<(Mode, Contender)> = [Mode::Write, Mode::Read]
        .into_iter()
        .flat_map(|m| Contender::ALL.into_iter().map(move |c| (m, c)))
        .filter(|(m, c)| !(*c == Contender::Floor && *m == Mode::Read))
        .collect();
    let mut res: Vec<Result<Vec<Sequential>, String>> = vec![Ok(Vec::new()); kinds.len()];
    for _ in 0..st.s1_seq_rounds {
        for (i, (mode, c)) in kinds.iter().enumerate() {
            if c.cannot(*mode).is_some() {
                continue;
            }
            match (sequential(ctx, st, *c, *mode).await, &mut res[i]) {
                (Ok(x), Ok(v)) => v.push(x),
                (Err(e), r) => *r = Err(e.to_string()),
                _ => {}
            }
        }
    }
    let mut rows = Vec::new();
    for mode in [Mode::Write, Mode::Read] {
        let case = format!(
            "{} clients, {} lock + unlock on own keys, median of {} x {:.1} s",
            st.s1_seq_clients,
            mode.word(),
            st.s1_seq_rounds,
            st.s1_seq_secs
        );
        let mut r = [
            Row::new(SC_SEQ, &case, "grants/s", ""),
            Row::new(SC_SEQ, &case, "server CPU per grant", "µs"),
            Row::new(SC_SEQ, &case, "server commands per grant", ""),
            Row::new(SC_SEQ, &case, "client CPU per grant", "µs"),
        ];
        let fields: [fn(&Sequential) -> Option<f64>; 4] = [
            |m| Some(m.grants_per_sec),
            |m| m.server_cpu_us,
            |m| Some(m.commands_per_grant),
            |m| m.client_cpu_us,
        ];
        for (i, (m, c)) in kinds.iter().enumerate() {
            if *m != mode {
                continue;
            }
            for (row, f) in r.iter_mut().zip(fields) {
                let v = match c.cannot(mode) {
                    Some(why) => Val::Cannot(why),
                    None => Val::of(&res[i], |v| {
                        let xs: Vec<f64> = v.iter().filter_map(f).collect();
                        if xs.is_empty() {
                            Val::Missing
                        } else {
                            Val::Num(median(&xs))
                        }
                    }),
                };
                if v != Val::Missing {
                    *row = std::mem::take(row).val(c.name(), v);
                }
            }
        }
        let [a, b, cmds, d] = r;
        rows.push(a);
        rows.push(b.note("server CPU from /proc/PID/stat over the run, divided by the grants"));
        rows.push(cmds.note("INFO commandstats calls per grant, INFO excluded and the calls Lua scripts make included: the server's work per lock + unlock"));
        rows.push(d.note("the worker processes' own CPU time in the loop (Python peers only): what the client's language costs"));
    }
    rows
}

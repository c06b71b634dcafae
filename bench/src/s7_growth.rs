//! Scenario 7: growth. What the module costs as the work grows, each figure at every size so
//! that a cost that grows shows:
//!
//! - **Held locks** (module and floor): 10k, 100k, 1M one-holder locks on one server, filled in
//!   steps; at each size `used_memory` per lock and the cost of one more WLOCK+UNLOCK pair (the
//!   floor: SET NX PX + DEL), client µs (pipelined) and server µs (`INFO commandstats`). The
//!   design says O(1) per key (a hash lookup) and O(log n) for the index: flat.
//! - **Parked waiters** (module): 1k and 10k requests parked with WAIT, spread over 100 and
//!   10k held keys: `used_memory` per parked request, and the hand-off latency (the holder's
//!   UNLOCK sent -> the head waiter's grant received) p50/p99 over a sample of keys, as the
//!   queues grow.
//! - **Lapses** (module): 100k leases ending in the same second: the server's CPU per lapse
//!   (`INFO cpu`, the main thread), and how long after the last deadline the last lapse ran.

use std::time::{Duration, Instant};

use crate::contender::{self, Contender};
use crate::report::{percentile, Row, Val};
use crate::resp::{self, RawConn, Reply};
use crate::s5_scale::{info_field, open_waiters, pipeline_all, time_units};
use crate::{BenchResult, Ctx, Settings};

const SC: &str = "7 growth";
const LONG_TTL: u64 = 600_000;
const T: Duration = Duration::from_secs(30);

fn wlock(key: &str, owner: &str, ttl: u64) -> Vec<u8> {
    resp::encode_str(&["RWLOCK.WLOCK", key, owner, &ttl.to_string()])
}

fn floor_lock(key: &str, owner: &str, ttl: u64) -> Vec<u8> {
    resp::encode_str(&["SET", key, owner, "PX", &ttl.to_string(), "NX"])
}

/// A fresh server of its own for each measurement, so nothing of another is counted.
async fn fresh(maxclients: usize) -> BenchResult<redis_lease_testkit::server::Server> {
    tokio::task::spawn_blocking(move || crate::start_server(maxclients)).await?
}

async fn used_memory(c: &mut RawConn) -> BenchResult<f64> {
    Ok(info_field(c, "memory", "used_memory").await?.parse()?)
}

/// The server main thread's CPU seconds so far (`INFO cpu`; the process's on servers without
/// the main-thread fields).
async fn server_cpu(c: &mut RawConn) -> BenchResult<f64> {
    let mut sum = 0.0;
    for (main, all) in [
        ("used_cpu_user_main_thread", "used_cpu_user"),
        ("used_cpu_sys_main_thread", "used_cpu_sys"),
    ] {
        let v = match info_field(c, "cpu", main).await {
            Ok(v) => v,
            Err(_) => info_field(c, "cpu", all).await?,
        };
        sum += v.parse::<f64>()?;
    }
    Ok(sum)
}

/// At each size: (used_memory per lock, client µs per pair, server µs per pair).
type Sizes = Vec<(usize, Result<(f64, f64, f64), String>)>;

async fn held(ctx: &Ctx, st: &Settings, c: Contender) -> BenchResult<Sizes> {
    let server = fresh(100).await?;
    let mut conn = RawConn::connect(server.port, T).await?;
    let sub = Ctx {
        port: server.port,
        client: server.client(),
        scripts: contender::Scripts::default(),
        rtt: ctx.rtt,
        server_pid: server.pid(),
        python: Err("not needed".into()),
        root: ctx.root.clone(),
    };
    let base = used_memory(&mut conn).await?;
    let owner = contender::new_owner();
    let (mut filled, mut out) = (0usize, Vec::new());
    for &n in &st.s7_held {
        while filled < n {
            let upto = n.min(filled + 10_000);
            let cmds: Vec<Vec<u8>> = (filled..upto)
                .map(|i| {
                    let key = format!("lock:{i:08}");
                    match c {
                        Contender::Floor => floor_lock(&key, &owner, LONG_TTL),
                        _ => wlock(&key, &owner, LONG_TTL),
                    }
                })
                .collect();
            let ok = |r: &Reply| r.is_grant() || *r == Reply::Status("OK".into());
            pipeline_all(&mut conn, &cmds, ok).await?;
            filled = upto;
        }
        let per_lock = (used_memory(&mut conn).await? - base) / n as f64;
        let me = contender::new_owner();
        let unit = match c {
            Contender::Floor => vec![
                floor_lock("probe:key", &me, LONG_TTL),
                resp::encode_str(&["DEL", "probe:key"]),
            ],
            _ => vec![
                wlock("probe:key", &me, LONG_TTL),
                resp::encode_str(&["RWLOCK.UNLOCK", "probe:key", &me]),
            ],
        };
        let check = |i: usize, r: &Reply| {
            if i == 0 {
                r.is_grant() || *r == Reply::Status("OK".into())
            } else {
                *r == Reply::Int(1)
            }
        };
        let cost = time_units(&sub, st, &unit, &check).await;
        out.push((
            n,
            cost.map(|(cl, sv)| (per_lock, cl, sv))
                .map_err(|e| e.to_string()),
        ));
    }
    Ok(out)
}

/// used_memory per parked request, and the hand-off latencies in ms (sorted).
type Parked = (f64, Vec<f64>);

/// `total` requests parked over `keys` held keys.
async fn parked(st: &Settings, total: usize, keys: usize) -> BenchResult<Parked> {
    let server = fresh(total + 1000).await?;
    let mut conn = RawConn::connect(server.port, T).await?;
    let holder = contender::new_owner();
    let names: Vec<String> = (0..keys).map(|k| format!("q:{k:06}")).collect();
    let fill: Vec<Vec<u8>> = names.iter().map(|k| wlock(k, &holder, LONG_TTL)).collect();
    pipeline_all(&mut conn, &fill, Reply::is_grant).await?;
    let before = used_memory(&mut conn).await?;
    let ttl = LONG_TTL.to_string();
    // Round robin: waiter i queues on key i % keys, so each key's queue is in waiter order.
    let mut cmds: Vec<Vec<u8>> = (0..total)
        .map(|i| {
            let o = contender::new_owner();
            resp::encode_str(&["RWLOCK.WLOCK", &names[i % keys], &o, &ttl, "WAIT", "300000"])
        })
        .collect();
    // The first round (one request per key) parks first, so that connection k is the head
    // of key k's queue (`open_waiters` connects many at once, in no set order).
    let rest = cmds.split_off(keys.min(total));
    let mut conns = open_waiters(server.port, cmds).await?;
    parked_at_least(&mut conn, keys.min(total)).await?;
    conns.extend(open_waiters(server.port, rest).await?);
    parked_at_least(&mut conn, total).await?;
    let per = (used_memory(&mut conn).await? - before) / total as f64;
    let mut lat = Vec::new();
    // The head waiter of key k is connection k (the first round of the round robin).
    for k in (0..keys)
        .step_by((keys / st.s7_handoffs).max(1))
        .take(st.s7_handoffs)
    {
        let t0 = Instant::now();
        conn.send(&resp::encode_str(&["RWLOCK.UNLOCK", &names[k], &holder]))
            .await?;
        let r = conns[k].read_reply_within(T).await?;
        let t1 = Instant::now();
        if !r.is_grant() {
            return Err(format!("the head waiter of {} was answered {r:?}", names[k]).into());
        }
        if conn.read_reply_within(T).await? != Reply::Int(1) {
            return Err("the holder's UNLOCK answered no".into());
        }
        lat.push((t1 - t0).as_secs_f64() * 1e3);
    }
    conns.clear();
    lat.sort_by(f64::total_cmp);
    Ok((per, lat))
}

/// Waits (bounded) until `n` requests are parked on the server.
async fn parked_at_least(conn: &mut RawConn, n: usize) -> BenchResult<()> {
    let until = Instant::now() + Duration::from_secs(30) + Duration::from_millis(n as u64);
    loop {
        let now: usize = info_field(conn, "lease", "lease_waiters").await?.parse()?;
        if now >= n {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(format!("only {now} of {n} requests parked").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `n` leases ending within the same second: (server CPU µs per lapse, ms from the last
/// deadline until every lease had lapsed, ms the fill took).
async fn lapses(n: usize) -> BenchResult<(f64, f64, f64)> {
    let server = fresh(100).await?;
    let mut conn = RawConn::connect(server.port, T).await?;
    let owner = contender::new_owner();
    let ttl = 3000u64;
    let cmds: Vec<Vec<u8>> = (0..n)
        .map(|i| wlock(&format!("lapse:{i:08}"), &owner, ttl))
        .collect();
    let t0 = Instant::now();
    pipeline_all(&mut conn, &cmds, Reply::is_grant).await?;
    let fill = t0.elapsed();
    if fill >= Duration::from_millis(ttl - 500) {
        return Err(format!("filling {n} leases took {fill:?}: too slow to end together").into());
    }
    // Just before the first deadline: the CPU so far.
    tokio::time::sleep(Duration::from_millis(ttl - 200).saturating_sub(t0.elapsed())).await;
    let cpu0 = server_cpu(&mut conn).await?;
    let last_deadline = t0 + fill + Duration::from_millis(ttl);
    let bound = last_deadline + Duration::from_secs(30);
    let mut done_at = None;
    while Instant::now() < bound {
        let lapsed: usize = info_field(&mut conn, "lease", "lease_lapses")
            .await?
            .parse()?;
        if lapsed >= n {
            done_at = Some(Instant::now());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let Some(done) = done_at else {
        return Err(format!("not every one of {n} leases lapsed within 30 s").into());
    };
    let cpu1 = server_cpu(&mut conn).await?;
    // The polling's own cost (one INFO every 5 ms) is in the figure: a bound from above.
    let late = done.saturating_duration_since(last_deadline).as_secs_f64() * 1e3;
    Ok((
        (cpu1 - cpu0) * 1e6 / n as f64,
        late,
        fill.as_secs_f64() * 1e3,
    ))
}

pub async fn run(ctx: &Ctx, st: &Settings) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut by: Vec<(Contender, Result<Sizes, String>)> = Vec::new();
    for c in [Contender::Floor, Contender::Module] {
        by.push((c, held(ctx, st, c).await.map_err(|e| e.to_string())));
    }
    let metrics = [
        ("used_memory per lock", "B"),
        ("client µs/pair (pipelined)", "µs"),
        ("server µs/pair", "µs"),
    ];
    for (m, (metric, unit)) in metrics.iter().enumerate() {
        for (j, &n) in st.s7_held.iter().enumerate() {
            let pick = |c: &Result<Sizes, String>, at: usize| -> Val {
                match c {
                    Err(e) => Val::Error(e.clone()),
                    Ok(s) => match s.iter().find(|(k, _)| *k == at).map(|(_, r)| r) {
                        Some(Ok(x)) => Val::Num([x.0, x.1, x.2][m]),
                        Some(Err(e)) => Val::Error(e.clone()),
                        None => Val::Missing,
                    },
                }
            };
            let mut row = Row::new(SC, &format!("{n} held locks"), metric, unit);
            for (c, r) in &by {
                row = row.val(c.name(), pick(r, n));
            }
            if j + 1 == st.s7_held.len() && j > 0 {
                let first: Vec<(String, Option<f64>)> = by
                    .iter()
                    .map(|(c, r)| (c.name().to_string(), pick(r, st.s7_held[0]).num()))
                    .collect();
                let base = st.s7_held[0];
                row = row.target_by(&format!("<= 1.5 x the figure at {base}"), |who, x| {
                    first
                        .iter()
                        .find(|(w, _)| w == who)
                        .and_then(|(_, a)| *a)
                        .is_some_and(|a| x <= 1.5 * a)
                });
            }
            rows.push(row.note("a WLOCK+UNLOCK (floor: SET NX PX + DEL) on one more key"));
        }
    }
    let room = st.s7_room;
    for &(total, keys) in &st.s7_parked {
        let case = format!("{total} parked over {keys} keys ({} per key)", total / keys);
        let r = if total > room {
            Err(format!("the open-files limit allows {room} waiters here"))
        } else {
            parked(st, total, keys).await.map_err(|e| e.to_string())
        };
        let one = |metric: &str, unit: &str, f: &dyn Fn(&Parked) -> f64| {
            Row::new(SC, &case, metric, unit).val("module", Val::of(&r, |x| Val::Num(f(x))))
        };
        rows.push(
            one("used_memory per parked request", "B", &|x| x.0).note(
                "Redis gives every blocked module client a reply client of its own (DESIGN.md)",
            ),
        );
        rows.push(one("hand-off p50", "ms", &|x| percentile(&x.1, 50.0)));
        rows.push(one("hand-off p99", "ms", &|x| percentile(&x.1, 99.0)).note(
            "the holder's UNLOCK sent -> the head waiter's grant received, over a sample of keys",
        ));
    }
    let n = st.s7_lapses;
    let r = lapses(n).await.map_err(|e| e.to_string());
    let case = format!("{n} leases ending in the same second");
    rows.push(
        Row::new(SC, &case, "server CPU per lapse", "µs")
            .val("module", Val::of(&r, |x| Val::Num(x.0)))
            .note(match &r {
                Ok((_, _, fill)) => format!(
                    "INFO cpu (main thread) across the lapses, less nothing (the harness's own INFO polls every 5 ms are in it); granted in {fill:.0} ms"
                ),
                Err(_) => String::new(),
            }),
    );
    rows.push(
        Row::new(SC, &case, "last lapse after the last deadline", "ms")
            .val("module", Val::of(&r, |x| Val::Num(x.1)))
            .target("<= 1000 ms", |x| x <= 1000.0),
    );
    rows
}

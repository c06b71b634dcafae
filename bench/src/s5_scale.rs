//! Scenario 5: scale.
//!
//! - Cost per operation on a key that already has 1, 100, 10,000 read holders (different
//!   owners): RLOCK+UNLOCK pairs of one more owner, pipelined on one connection. Measured on the
//!   client (wall time per pair) and in the server (`INFO commandstats` microseconds).
//! - Cost per operation on a key with 1, 100, 10,000 queued waiters (a writer holds the key;
//!   the waiters are writers parked with `WAIT`, one connection each; for the baseline, client
//!   polling loops): a refused try-lock, and the time to hand the key to every waiter in turn.
//! - Memory: `MEMORY USAGE` of a one-holder lock with a 36-byte owner, and the `used_memory`
//!   delta per lock over many held locks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::locks::{self, Imp, Mode};
use crate::report::{median, Row, Val};
use crate::resp::{self, RawConn, Reply};
use crate::{BenchResult, Ctx, Settings};

const LONG_TTL: u64 = 600_000;
const T: Duration = Duration::from_secs(10);

/// Sends `cmds` in pipelined batches on `conn` and checks every reply with `ok`.
async fn pipeline_all(
    conn: &mut RawConn,
    cmds: &[Vec<u8>],
    batch: usize,
    ok: impl Fn(&Reply) -> bool,
) -> BenchResult<()> {
    for chunk in cmds.chunks(batch) {
        let buf: Vec<u8> = chunk.concat();
        conn.send(&buf).await?;
        for _ in chunk {
            let r = conn.read_reply_within(T).await?;
            if !ok(&r) {
                return Err(format!("unexpected reply {r:?}").into());
            }
        }
    }
    Ok(())
}

/// `INFO commandstats` as name -> (calls, usec).
async fn commandstats(conn: &mut RawConn) -> BenchResult<HashMap<String, (u64, u64)>> {
    let r = conn.call(&["INFO", "commandstats"], T).await?;
    let Reply::Bulk(b) = r else {
        return Err(format!("INFO commandstats answered {r:?}").into());
    };
    let mut out = HashMap::new();
    for line in String::from_utf8_lossy(&b).lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let mut calls = 0;
        let mut usec = 0;
        for f in fields.split(',') {
            if let Some(v) = f.strip_prefix("calls=") {
                calls = v.parse().unwrap_or(0);
            } else if let Some(v) = f.strip_prefix("usec=") {
                usec = v.parse().unwrap_or(0);
            }
        }
        out.insert(name.to_string(), (calls, usec));
    }
    Ok(out)
}

/// Client wall time and server time per pipelined unit of `unit` (a few commands): the
/// medians of five runs of `secs / 5` (or `max_units / 5` units) each.
async fn time_units(
    port: u16,
    unit: &[Vec<u8>],
    check: &(dyn Fn(usize, &Reply) -> bool + Sync),
    per_pipeline: usize,
    secs: f64,
    max_units: u64,
) -> BenchResult<(f64, f64)> {
    let mut conn = RawConn::connect(port, T).await?;
    let one: Vec<u8> = unit.concat();
    let buf: Vec<u8> = one.repeat(per_pipeline);
    // Warm up.
    conn.send(&buf).await?;
    for _ in 0..per_pipeline * unit.len() {
        conn.read_reply_within(T).await?;
    }
    let (mut client, mut server) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let r = conn.call(&["CONFIG", "RESETSTAT"], T).await?;
        if r != Reply::Status("OK".into()) {
            return Err(format!("CONFIG RESETSTAT answered {r:?}").into());
        }
        let start = Instant::now();
        let end = start + Duration::from_secs_f64(secs / 5.0);
        let mut units = 0u64;
        while units < (max_units / 5).max(per_pipeline as u64) && Instant::now() < end {
            conn.send(&buf).await?;
            for i in 0..per_pipeline * unit.len() {
                let r = conn.read_reply_within(T).await?;
                if !check(i % unit.len(), &r) {
                    return Err(
                        format!("unexpected reply {r:?} to command {}", i % unit.len()).into(),
                    );
                }
            }
            units += per_pipeline as u64;
        }
        let el = start.elapsed().as_secs_f64();
        let stats = commandstats(&mut conn).await?;
        let usec: u64 = stats
            .iter()
            .filter(|(k, _)| !k.starts_with("info") && !k.starts_with("config"))
            .map(|(_, v)| v.1)
            .sum();
        client.push(el * 1e6 / units as f64);
        server.push(usec as f64 / units as f64);
    }
    Ok((median(&client), median(&server)))
}

/// Readers: RLOCK+UNLOCK of one more owner on a key with `m` read holders.
async fn readers_cost(ctx: &Ctx, st: &Settings, imp: Imp, m: usize) -> BenchResult<(f64, f64)> {
    let key = format!("bench:s5r:{}:{m}", imp.name());
    let mut c = RawConn::connect(ctx.port, T).await?;
    let fill: Vec<Vec<u8>> = (0..m)
        .map(|_| {
            locks::raw_lock(
                imp,
                &ctx.scripts,
                Mode::Read,
                &key,
                &locks::new_owner(),
                LONG_TTL,
            )
        })
        .collect();
    pipeline_all(&mut c, &fill, 500, Reply::is_grant).await?;
    let me = locks::new_owner();
    let unit = vec![
        locks::raw_lock(imp, &ctx.scripts, Mode::Read, &key, &me, LONG_TTL),
        locks::raw_unlock(imp, &ctx.scripts, Mode::Read, &key, &me, LONG_TTL),
    ];
    let check = |i: usize, r: &Reply| {
        if i == 0 {
            r.is_grant()
        } else {
            *r == Reply::Int(1)
        }
    };
    let res = time_units(ctx.port, &unit, &check, 16, st.s5_secs, st.s5_pairs).await;
    let _ = c.call(&["DEL", &key, &locks::readers_key(&key)], T).await;
    res
}

/// Sends each of `cmds` on a new raw connection of its own (at most 200 connecting at once);
/// returns the connections in the order of `cmds`.
async fn open_waiters(port: u16, cmds: Vec<Vec<u8>>) -> BenchResult<Vec<RawConn>> {
    let mut out: Vec<(usize, RawConn)> = Vec::with_capacity(cmds.len());
    let mut it = cmds.into_iter().enumerate();
    loop {
        let batch: Vec<(usize, Vec<u8>)> = it.by_ref().take(200).collect();
        if batch.is_empty() {
            break;
        }
        let mut set = tokio::task::JoinSet::new();
        for (i, cmd) in batch {
            set.spawn(async move {
                let mut c = RawConn::connect(port, T).await?;
                c.send(&cmd).await?;
                BenchResult::Ok((i, c))
            });
        }
        while let Some(r) = set.join_next().await {
            out.push(r??);
        }
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, c)| c).collect())
}

/// The `waiters` field of `RWLOCK.INFO key`, if the module answers it.
async fn info_waiters(c: &mut RawConn, key: &str) -> Option<i64> {
    let r = c.call(&["RWLOCK.INFO", key], T).await.ok()?;
    let items = match r {
        Reply::Array(a) => a,
        _ => return None,
    };
    let mut i = 0;
    while i + 1 < items.len() {
        if items[i] == Reply::Bulk(b"waiters".to_vec())
            || items[i] == Reply::Status("waiters".into())
        {
            if let Reply::Int(n) = items[i + 1] {
                return Some(n);
            }
        }
        i += 2;
    }
    None
}

#[derive(Debug, Default, Clone)]
struct WaitersOutcome {
    /// Client and server time per refused try-lock, µs.
    try_us: (f64, f64),
    /// Time from the holder's release until every waiter has been served once, ms.
    drain_ms: Option<f64>,
    /// How many were served (when not all were).
    served: usize,
    queued_seen: Option<i64>,
}

async fn waiters_module(ctx: &Ctx, st: &Settings, w: usize) -> BenchResult<WaitersOutcome> {
    let key = format!("bench:s5w:module:{w}");
    let mut c = RawConn::connect(ctx.port, T).await?;
    let holder = locks::new_owner();
    let r = c
        .call(&["RWLOCK.WLOCK", &key, &holder, &LONG_TTL.to_string()], T)
        .await?;
    if !r.is_grant() {
        return Err(format!("holder's WLOCK answered {r:?}").into());
    }
    let wait_ms = 120_000u64;
    let owners: Vec<String> = (0..w).map(|_| locks::new_owner()).collect();
    let cmds: Vec<Vec<u8>> = owners
        .iter()
        .map(|o| {
            resp::encode_str(&[
                "RWLOCK.WLOCK",
                &key,
                o,
                &LONG_TTL.to_string(),
                "WAIT",
                &wait_ms.to_string(),
            ])
        })
        .collect();
    let conns = open_waiters(ctx.port, cmds).await?;
    // Wait until the server has queued them all (bounded; give up after 2 s without progress).
    let until = Instant::now() + Duration::from_secs(10) + Duration::from_millis(w as u64);
    let mut seen = None;
    let mut last_change = Instant::now();
    while Instant::now() < until && last_change.elapsed() < Duration::from_secs(2) {
        let now_seen = info_waiters(&mut c, &key).await;
        if now_seen != seen {
            last_change = Instant::now();
        }
        seen = now_seen;
        match seen {
            Some(n) if n as usize >= w => break,
            None => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    let me = locks::new_owner();
    let unit = vec![resp::encode_str(&[
        "RWLOCK.WLOCK",
        &key,
        &me,
        &LONG_TTL.to_string(),
    ])];
    let check = |_: usize, r: &Reply| *r == Reply::Nil;
    let try_us = time_units(ctx.port, &unit, &check, 16, st.s5_secs, st.s5_pairs).await?;
    // Hand-off: every waiter, when served, releases at once; time until the last is served.
    let served = Arc::new(AtomicU64::new(0));
    let mut set = tokio::task::JoinSet::new();
    let drain_bound = Duration::from_secs(30) + Duration::from_millis(w as u64 * 2);
    for (mut conn, owner) in conns.into_iter().zip(owners) {
        let key = key.clone();
        let served = served.clone();
        set.spawn(async move {
            let r = conn.read_reply_within(drain_bound).await?;
            if !r.is_grant() {
                return Err(format!("a queued waiter was answered {r:?}").into());
            }
            let at = Instant::now();
            served.fetch_add(1, Ordering::Relaxed);
            let r = conn.call(&["RWLOCK.UNLOCK", &key, &owner], T).await?;
            if r != Reply::Int(1) {
                return Err(format!("a served waiter's UNLOCK answered {r:?}").into());
            }
            BenchResult::Ok(at)
        });
    }
    let t0 = Instant::now();
    let r = c.call(&["RWLOCK.UNLOCK", &key, &holder], T).await?;
    if r != Reply::Int(1) {
        set.abort_all();
        return Err(format!("holder's UNLOCK answered {r:?}").into());
    }
    let mut last = t0;
    let mut err = None;
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(at)) => last = last.max(at),
            Ok(Err(e)) => {
                err = err.or(Some(e));
                set.abort_all();
            }
            Err(j) if j.is_cancelled() => {}
            Err(j) => err = err.or(Some(j.into())),
        }
    }
    if let Some(e) = err {
        return Err(e);
    }
    Ok(WaitersOutcome {
        try_us,
        drain_ms: Some((last - t0).as_secs_f64() * 1e3),
        served: w,
        queued_seen: seen,
    })
}

async fn waiters_baseline(ctx: &Ctx, st: &Settings, w: usize) -> BenchResult<WaitersOutcome> {
    let key = format!("bench:s5w:baseline:{w}");
    let mut c = RawConn::connect(ctx.port, T).await?;
    let holder = locks::new_owner();
    let r = c
        .send(&locks::raw_lock(
            Imp::Baseline,
            &ctx.scripts,
            Mode::Write,
            &key,
            &holder,
            LONG_TTL,
        ))
        .await;
    r?;
    let r = c.read_reply_within(T).await?;
    if !r.is_grant() {
        return Err(format!("holder's lock answered {r:?}").into());
    }
    // The pollers share connections (they never block in the server).
    let nconn = w.clamp(1, 64);
    let mut conns = Vec::new();
    for _ in 0..nconn {
        conns.push(locks::connect(&ctx.client, Some(Duration::from_secs(30))).await?);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let served_at: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let hard_deadline = start + Duration::from_secs(60);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..w {
        let mut conn = conns[i % nconn].clone();
        let scripts = ctx.scripts.clone();
        let key = key.clone();
        let stop = stop.clone();
        let served_at = served_at.clone();
        // Arrivals spread over one second, as independent clients would arrive.
        let offset = st.s5_poll_warm.min(Duration::from_secs(1)) * i as u32 / w as u32;
        set.spawn(async move {
            let owner = locks::new_owner();
            tokio::time::sleep(offset).await;
            let mut sleep = locks::BASELINE_FIRST_SLEEP;
            while !stop.load(Ordering::Relaxed) && Instant::now() < hard_deadline {
                if locks::try_lock(
                    Imp::Baseline,
                    &mut conn,
                    &scripts,
                    Mode::Write,
                    &key,
                    &owner,
                    LONG_TTL,
                )
                .await?
                {
                    served_at.lock().unwrap().push(Instant::now());
                    locks::release(
                        Imp::Baseline,
                        &mut conn,
                        &scripts,
                        Mode::Write,
                        &key,
                        &owner,
                        LONG_TTL,
                    )
                    .await?;
                    return BenchResult::Ok(());
                }
                tokio::time::sleep(sleep).await;
                sleep = (sleep * 2).min(locks::BASELINE_MAX_SLEEP);
            }
            Ok(())
        });
    }
    // Steady state: every poller has arrived and backed off to the longest sleep.
    tokio::time::sleep(st.s5_poll_warm).await;
    let me = locks::new_owner();
    let unit = vec![locks::raw_lock(
        Imp::Baseline,
        &ctx.scripts,
        Mode::Write,
        &key,
        &me,
        LONG_TTL,
    )];
    let check = |_: usize, r: &Reply| *r == Reply::Nil;
    let try_us = time_units(ctx.port, &unit, &check, 16, st.s5_secs, st.s5_pairs).await;
    // Hand-off: release; every poller takes the lock on its next try and releases at once.
    let r = c.call(&["DEL", &key], T).await?;
    let t0 = Instant::now();
    let drain_deadline = t0 + Duration::from_secs(10);
    if r != Reply::Int(1) {
        stop.store(true, Ordering::Relaxed);
    }
    while Instant::now() < drain_deadline && served_at.lock().unwrap().len() < w {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let n_served = served_at.lock().unwrap().len();
    let last = served_at.lock().unwrap().iter().copied().max();
    set.abort_all();
    let mut err = None;
    while let Some(r) = set.join_next().await {
        if let Ok(Err(e)) = r {
            err = err.or(Some(e));
        }
    }
    if let Some(e) = err {
        return Err(e);
    }
    Ok(WaitersOutcome {
        try_us: try_us?,
        drain_ms: if n_served == w {
            last.map(|l| (l - t0).as_secs_f64() * 1e3)
        } else {
            None
        },
        served: n_served,
        queued_seen: Some(w as i64),
    })
}

/// `used_memory` from `INFO memory`.
async fn used_memory(c: &mut RawConn) -> BenchResult<i64> {
    let r = c.call(&["INFO", "memory"], T).await?;
    let Reply::Bulk(b) = r else {
        return Err(format!("INFO memory answered {r:?}").into());
    };
    for line in String::from_utf8_lossy(&b).lines() {
        if let Some(v) = line.strip_prefix("used_memory:") {
            return Ok(v.trim().parse()?);
        }
    }
    Err("no used_memory in INFO memory".into())
}

/// `MEMORY USAGE` of a one-holder lock (36-byte owner), and the key(s) it uses.
async fn memory_one(ctx: &Ctx, imp: Imp, mode: Mode) -> BenchResult<i64> {
    let mut c = RawConn::connect(ctx.port, T).await?;
    // A short key name (MEMORY USAGE counts the name too): "lock:" and two letters.
    let key = format!(
        "lock:{}{}",
        &imp.name()[..1],
        if mode == Mode::Read { "r" } else { "w" }
    );
    let owner = locks::new_owner();
    assert_eq!(owner.len(), 36);
    c.send(&locks::raw_lock(
        imp,
        &ctx.scripts,
        mode,
        &key,
        &owner,
        LONG_TTL,
    ))
    .await?;
    let r = c.read_reply_within(T).await?;
    if !r.is_grant() {
        return Err(format!("lock answered {r:?}").into());
    }
    // The baseline's read hold lives in the readers key.
    let mkey = if imp == Imp::Baseline && mode == Mode::Read {
        locks::readers_key(&key)
    } else {
        key.clone()
    };
    let r = c
        .call(&["MEMORY", "USAGE", &mkey, "SAMPLES", "0"], T)
        .await?;
    let _ = c.call(&["DEL", &key, &locks::readers_key(&key)], T).await;
    match r {
        Reply::Int(n) => Ok(n),
        other => Err(format!("MEMORY USAGE answered {other:?}").into()),
    }
}

/// `used_memory` growth per held lock over `n` one-holder locks on distinct keys.
async fn memory_many(ctx: &Ctx, imp: Imp, mode: Mode, n: usize) -> BenchResult<f64> {
    let mut c = RawConn::connect(ctx.port, T).await?;
    let r = c.call(&["FLUSHALL"], T).await?;
    if !matches!(r, Reply::Status(_)) {
        return Err(format!("FLUSHALL answered {r:?}").into());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = used_memory(&mut c).await?;
    let cmds: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let key = format!("bench:s5mm:{}:{i}", imp.name());
            locks::raw_lock(imp, &ctx.scripts, mode, &key, &locks::new_owner(), LONG_TTL)
        })
        .collect();
    pipeline_all(&mut c, &cmds, 1000, Reply::is_grant).await?;
    drop(cmds);
    let after = used_memory(&mut c).await?;
    let _ = c.call(&["FLUSHALL"], T).await;
    Ok((after - before) as f64 / n as f64)
}

fn show(r: &BenchResult<f64>) -> Val {
    match r {
        Ok(x) => Val::Num(*x),
        Err(e) => Val::Text(format!("error: {e}")),
    }
}

pub async fn run(ctx: &Ctx, st: &Settings) -> Vec<Row> {
    let mut rows = Vec::new();
    let sc = "5 scale";

    // Readers.
    let mut client_cost: Vec<[BenchResult<f64>; 2]> = Vec::new();
    let mut server_cost: Vec<[BenchResult<f64>; 2]> = Vec::new();
    for &m in &st.s5_readers {
        let mut cl: Vec<BenchResult<f64>> = Vec::new();
        let mut sv: Vec<BenchResult<f64>> = Vec::new();
        for imp in Imp::BOTH {
            match readers_cost(ctx, st, imp, m).await {
                Ok((a, b)) => {
                    cl.push(Ok(a));
                    sv.push(Ok(b));
                }
                Err(e) => {
                    cl.push(Err(e.to_string().into()));
                    sv.push(Err(e));
                }
            }
        }
        let (c1, c0) = (cl.pop().unwrap(), cl.pop().unwrap());
        let (s1, s0) = (sv.pop().unwrap(), sv.pop().unwrap());
        client_cost.push([c0, c1]);
        server_cost.push([s0, s1]);
    }
    let levels = st.s5_readers.clone();
    push_scaling(
        &mut rows,
        sc,
        "readers",
        "RLOCK+UNLOCK by one more owner",
        &levels,
        &client_cost,
        &server_cost,
    );

    // Waiters.
    let mut client_cost: Vec<[BenchResult<f64>; 2]> = Vec::new();
    let mut server_cost: Vec<[BenchResult<f64>; 2]> = Vec::new();
    let mut drains: Vec<[Val; 2]> = Vec::new();
    let mut notes = Vec::new();
    for &w in &st.s5_waiters {
        let m = waiters_module(ctx, st, w).await;
        let b = waiters_baseline(ctx, st, w).await;
        let split = |r: &BenchResult<WaitersOutcome>| -> (BenchResult<f64>, BenchResult<f64>, Val) {
            match r {
                Ok(o) => (
                    Ok(o.try_us.0),
                    Ok(o.try_us.1),
                    match o.drain_ms {
                        Some(d) => Val::Num(d),
                        None => Val::Text(format!("{} of {w} served in 10 s", o.served)),
                    },
                ),
                Err(e) => (
                    Err(e.to_string().into()),
                    Err(e.to_string().into()),
                    Val::Text(format!("error: {e}")),
                ),
            }
        };
        if let Ok(o) = &m {
            if let Some(seen) = o.queued_seen {
                if seen as usize != w {
                    notes.push(format!(
                        "{w} waiters sent, RWLOCK.INFO showed {seen} queued"
                    ));
                }
            } else {
                notes.push(format!("{w} waiters: RWLOCK.INFO gave no waiters count"));
            }
        }
        let (mc, ms, md) = split(&m);
        let (bc, bs, bd) = split(&b);
        client_cost.push([mc, bc]);
        server_cost.push([ms, bs]);
        drains.push([md, bd]);
    }
    let levels = st.s5_waiters.clone();
    push_scaling(
        &mut rows,
        sc,
        "waiters",
        "refused try-WLOCK (a writer holds)",
        &levels,
        &client_cost,
        &server_cost,
    );
    for (i, &w) in levels.iter().enumerate() {
        let [m, b] = drains[i].clone();
        let row = Row::new(
            sc,
            &format!("{w} waiters: hand-off to each in turn"),
            "release -> all served",
            "ms",
        )
        .vals(m, b)
        .note(if i == 0 && !notes.is_empty() {
            notes.join("; ")
        } else {
            "each waiter releases as soon as it is served".to_string()
        });
        rows.push(row);
    }
    if st.s5_waiter_note.is_some() {
        if let Some(r) = rows.last_mut() {
            r.note = format!("{}; {}", r.note, st.s5_waiter_note.clone().unwrap());
        }
    }

    // Memory.
    for mode in [Mode::Write, Mode::Read] {
        let m = memory_one(ctx, Imp::Module, mode).await;
        let b = memory_one(ctx, Imp::Baseline, mode).await;
        let v = |r: BenchResult<i64>| match r {
            Ok(n) => Val::Num(n as f64),
            Err(e) => Val::Text(format!("error: {e}")),
        };
        let what = if mode == Mode::Write { "write" } else { "read" };
        rows.push(
            Row::new(
                sc,
                &format!("one {what} holder, 36-byte owner"),
                "MEMORY USAGE",
                "B",
            )
            .vals(v(m), v(b))
            .module_target("<= 160 B", |x| x <= 160.0)
            .note(if mode == Mode::Read {
                "key name 7 bytes (the baseline's readers key: 15); baseline: its readers counter, no owner"
            } else {
                "key name 7 bytes; baseline: KEY string holding the owner, with PX"
            }),
        );
    }
    for mode in [Mode::Write, Mode::Read] {
        let m = memory_many(ctx, Imp::Module, mode, st.s5_mem_locks).await;
        let b = memory_many(ctx, Imp::Baseline, mode, st.s5_mem_locks).await;
        let what = if mode == Mode::Write { "write" } else { "read" };
        rows.push(
            Row::new(
                sc,
                &format!("{} {what}-held locks", st.s5_mem_locks),
                "used_memory per lock",
                "B",
            )
            .vals(show(&m), show(&b)),
        );
    }
    rows
}

#[allow(clippy::too_many_arguments)]
fn push_scaling(
    rows: &mut Vec<Row>,
    sc: &str,
    what: &str,
    op: &str,
    levels: &[usize],
    client: &[[BenchResult<f64>; 2]],
    server: &[[BenchResult<f64>; 2]],
) {
    for (label, data) in [
        ("client µs/op (pipelined)", client),
        ("server µs/op", server),
    ] {
        let first = [
            data.first().and_then(|d| d[0].as_ref().ok().copied()),
            data.first().and_then(|d| d[1].as_ref().ok().copied()),
        ];
        for (i, &lv) in levels.iter().enumerate() {
            let mut row = Row::new(sc, &format!("{lv} {what}: {op}"), label, "µs")
                .vals(show(&data[i][0]), show(&data[i][1]));
            if i + 1 == levels.len() && i > 0 {
                let judge = |k: usize| match (first[k], data[i][k].as_ref().ok()) {
                    (Some(a), Some(b)) => Some(*b <= 1.5 * a),
                    _ => Some(false),
                };
                row.target = format!("<= 1.5 x the cost at {} {what}", levels[0]);
                row.module_met = judge(0);
                row.baseline_met = judge(1);
            }
            rows.push(row);
        }
    }
}

//! Scenario 5: scale and memory, the module against the seed design (and the floor for
//! memory); the peers' locks are one key each, as the floor is.
//!
//! - The cost of RLOCK+UNLOCK by one more owner on a key that has 1, 100, 10,000 read holders,
//!   measured on the client (wall time per pair, pipelined) and in the server (`INFO
//!   commandstats` microseconds), each the median of five runs.
//! - The cost of a refused try-WLOCK on a key with 1, 100, 10,000 queued waiters (module:
//!   writers parked with `WAIT`, one connection each; seed: polling loops), and the time to
//!   hand the key to every waiter in turn.
//! - Memory: `MEMORY USAGE` of a one-holder lock, and the `used_memory` growth per lock over
//!   100,000 held locks (13-byte keys, 36-byte owners).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::contender::{self, raw_lock, raw_unlock, Contender, Mode};
use crate::report::{median, Row, Val};
use crate::resp::{self, RawConn, Reply};
use crate::{BenchResult, Ctx, Settings};

const SC: &str = "5 scale";
const LONG_TTL: u64 = 600_000;
const T: Duration = Duration::from_secs(10);
/// (client µs, server µs) per operation, by (level, contender).
type Costs = HashMap<(usize, &'static str), Result<(f64, f64), String>>;

const PAIR: [Contender; 2] = [Contender::Module, Contender::Seed];

fn lock_cmd(ctx: &Ctx, c: Contender, mode: Mode, key: &str, owner: &str) -> Vec<u8> {
    raw_lock(c, &ctx.scripts, mode, key, owner, LONG_TTL).expect("a fixed command")
}

/// Sends `cmds` in pipelined batches and checks every reply with `ok`.
pub(crate) async fn pipeline_all(
    conn: &mut RawConn,
    cmds: &[Vec<u8>],
    ok: impl Fn(&Reply) -> bool,
) -> BenchResult<()> {
    for chunk in cmds.chunks(500) {
        conn.send(&chunk.concat()).await?;
        for _ in chunk {
            let r = conn.read_reply_within(T).await?;
            if !ok(&r) {
                return Err(format!("unexpected reply {r:?}").into());
            }
        }
    }
    Ok(())
}

/// A field of an `INFO` section.
pub(crate) async fn info_field(c: &mut RawConn, section: &str, field: &str) -> BenchResult<String> {
    match c.call(&["INFO", section], T).await? {
        Reply::Bulk(b) => String::from_utf8_lossy(&b)
            .lines()
            .find_map(|l| l.strip_prefix(field).and_then(|l| l.strip_prefix(':')))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| format!("no {field} in INFO {section}").into()),
        r => Err(format!("INFO {section} answered {r:?}").into()),
    }
}

/// Server microseconds spent in commands other than INFO / CONFIG (`INFO commandstats`).
async fn server_usec(c: &mut RawConn) -> BenchResult<u64> {
    let Reply::Bulk(b) = c.call(&["INFO", "commandstats"], T).await? else {
        return Err("INFO commandstats: not a bulk reply".into());
    };
    Ok(String::from_utf8_lossy(&b)
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .filter(|(k, _)| !k.starts_with("info") && !k.starts_with("config"))
        .filter_map(|(_, f)| {
            f.split(',')
                .find_map(|x| x.strip_prefix("usec="))?
                .parse::<u64>()
                .ok()
        })
        .sum())
}

/// Client wall time and server time per pipelined unit (a few commands, each reply checked
/// with `check(index in unit, reply)`): the medians of five runs.
pub(crate) async fn time_units(
    ctx: &Ctx,
    st: &Settings,
    unit: &[Vec<u8>],
    check: &(dyn Fn(usize, &Reply) -> bool + Sync),
) -> BenchResult<(f64, f64)> {
    const PER_PIPELINE: usize = 16;
    let mut conn = RawConn::connect(ctx.port, T).await?;
    let buf = unit.concat().repeat(PER_PIPELINE);
    let (mut client, mut server) = (Vec::new(), Vec::new());
    for run in 0..6 {
        if conn.call(&["CONFIG", "RESETSTAT"], T).await? != Reply::Status("OK".into()) {
            return Err("CONFIG RESETSTAT failed".into());
        }
        let start = Instant::now();
        let end = start + Duration::from_secs_f64(st.s5_secs / 5.0);
        let mut units = 0u64;
        while units < (st.s5_pairs / 5).max(PER_PIPELINE as u64) && Instant::now() < end {
            conn.send(&buf).await?;
            for i in 0..PER_PIPELINE * unit.len() {
                let r = conn.read_reply_within(T).await?;
                if !check(i % unit.len(), &r) {
                    return Err(
                        format!("unexpected reply {r:?} to command {}", i % unit.len()).into(),
                    );
                }
            }
            units += PER_PIPELINE as u64;
        }
        let el = start.elapsed().as_secs_f64();
        let usec = server_usec(&mut conn).await?;
        // The first run warms up.
        if run > 0 {
            client.push(el * 1e6 / units as f64);
            server.push(usec as f64 / units as f64);
        }
    }
    Ok((median(&client), median(&server)))
}

/// RLOCK+UNLOCK of one more owner on a key with `m` read holders.
async fn readers_cost(ctx: &Ctx, st: &Settings, c: Contender, m: usize) -> BenchResult<(f64, f64)> {
    let key = format!("bench:s5r:{}:{m}", c.name());
    let mut conn = RawConn::connect(ctx.port, T).await?;
    let fill: Vec<Vec<u8>> = (0..m)
        .map(|_| lock_cmd(ctx, c, Mode::Read, &key, &contender::new_owner()))
        .collect();
    pipeline_all(&mut conn, &fill, Reply::is_grant).await?;
    let me = contender::new_owner();
    let unit = [
        lock_cmd(ctx, c, Mode::Read, &key, &me),
        raw_unlock(c, &ctx.scripts, Mode::Read, &key, &me, LONG_TTL).expect("a fixed command"),
    ];
    let check = |i: usize, r: &Reply| {
        if i == 0 {
            r.is_grant()
        } else {
            *r == Reply::Int(1)
        }
    };
    let res = time_units(ctx, st, &unit, &check).await;
    let _ = conn
        .call(&["DEL", &key, &contender::readers_key(&key)], T)
        .await;
    res
}

/// Each command on a new raw connection of its own (at most 200 connecting at once), in order.
pub(crate) async fn open_waiters(port: u16, cmds: Vec<Vec<u8>>) -> BenchResult<Vec<RawConn>> {
    let mut out: Vec<(usize, RawConn)> = Vec::with_capacity(cmds.len());
    let mut it = cmds.into_iter().enumerate().peekable();
    while it.peek().is_some() {
        let mut set = tokio::task::JoinSet::new();
        for (i, cmd) in it.by_ref().take(200) {
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

/// `w` waiters behind a holder: (client µs, server µs) per refused try-lock, and the time from
/// the holder's release until every waiter was served once (each releasing at once).
async fn waiters(
    ctx: &Ctx,
    st: &Settings,
    c: Contender,
    w: usize,
) -> BenchResult<((f64, f64), Val)> {
    let key = format!("bench:s5w:{}:{w}", c.name());
    let mut conn = RawConn::connect(ctx.port, T).await?;
    let holder = contender::new_owner();
    conn.send(&lock_cmd(ctx, c, Mode::Write, &key, &holder))
        .await?;
    let r = conn.read_reply_within(T).await?;
    if !r.is_grant() {
        return Err(format!("the holder's lock answered {r:?}").into());
    }
    let served: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let mut set = tokio::task::JoinSet::new();
    let drain_bound = Duration::from_secs(30) + Duration::from_millis(w as u64 * 2);
    if c == Contender::Module {
        let owners: Vec<String> = (0..w).map(|_| contender::new_owner()).collect();
        let ttl = LONG_TTL.to_string();
        let cmds = owners
            .iter()
            .map(|o| resp::encode_str(&["RWLOCK.WLOCK", &key, o, &ttl, "WAIT", "120000"]))
            .collect();
        let conns = open_waiters(ctx.port, cmds).await?;
        // Until the server has queued them all (bounded).
        let until = Instant::now() + Duration::from_secs(10) + Duration::from_millis(w as u64);
        while Instant::now() < until {
            let r = conn.call(&["RWLOCK.INFO", &key], T).await?;
            let n = match &r {
                Reply::Array(a) => a
                    .chunks(2)
                    .find(|kv| {
                        matches!(&kv[0], Reply::Bulk(b) if b == b"waiters")
                            || kv[0] == Reply::Status("waiters".into())
                    })
                    .and_then(|kv| match kv.get(1) {
                        Some(Reply::Int(n)) => Some(*n as usize),
                        _ => None,
                    }),
                _ => None,
            };
            match n {
                Some(n) if n >= w => break,
                Some(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                None => return Err(format!("RWLOCK.INFO gave no waiters count: {r:?}").into()),
            }
        }
        for (mut wc, owner) in conns.into_iter().zip(owners) {
            let (key, served) = (key.clone(), served.clone());
            set.spawn(async move {
                let r = wc.read_reply_within(drain_bound).await?;
                if !r.is_grant() {
                    return Err(format!("a queued waiter was answered {r:?}").into());
                }
                served.lock().unwrap().push(Instant::now());
                match wc.call(&["RWLOCK.UNLOCK", &key, &owner], T).await? {
                    Reply::Int(1) => BenchResult::Ok(()),
                    r => Err(format!("a served waiter's UNLOCK answered {r:?}").into()),
                }
            });
        }
    } else {
        // Pollers share connections (they never block in the server), arriving over a second.
        let nconn = w.clamp(1, 64);
        let mut conns = Vec::new();
        for _ in 0..nconn {
            conns.push(contender::connect(&ctx.client, Some(Duration::from_secs(30))).await?);
        }
        let hard = Instant::now() + Duration::from_secs(60);
        for i in 0..w {
            let (mut pc, key, served) = (conns[i % nconn].clone(), key.clone(), served.clone());
            let wlock = ctx.scripts.wlock.clone();
            let offset = st.s5_poll_warm.min(Duration::from_secs(1)) * i as u32 / w as u32;
            set.spawn(async move {
                let owner = contender::new_owner();
                tokio::time::sleep(offset).await;
                let mut sleep = contender::SEED_FIRST_SLEEP;
                while Instant::now() < hard {
                    let mut inv = wlock.prepare_invoke();
                    inv.key(&key)
                        .key(contender::readers_key(&key))
                        .arg(&owner)
                        .arg(LONG_TTL);
                    if inv.invoke_async::<Option<i64>>(&mut pc).await? == Some(1) {
                        served.lock().unwrap().push(Instant::now());
                        redis::cmd("DEL")
                            .arg(&key)
                            .query_async::<i64>(&mut pc)
                            .await?;
                        break;
                    }
                    tokio::time::sleep(sleep).await;
                    sleep = (sleep * 2).min(contender::SEED_MAX_SLEEP);
                }
                Ok(())
            });
        }
        // Steady state: every poller has arrived and backed off to the longest sleep.
        tokio::time::sleep(st.s5_poll_warm).await;
    }
    let me = contender::new_owner();
    let try_us = time_units(
        ctx,
        st,
        &[lock_cmd(ctx, c, Mode::Write, &key, &me)],
        &|_, r| *r == Reply::Nil,
    )
    .await;
    let t0 = Instant::now();
    let unlock =
        raw_unlock(c, &ctx.scripts, Mode::Write, &key, &holder, LONG_TTL).expect("a fixed command");
    conn.send(&unlock).await?;
    if conn.read_reply_within(T).await? != Reply::Int(1) {
        set.abort_all();
        return Err("the holder's release answered no".into());
    }
    let drain_until = t0
        + if c == Contender::Module {
            drain_bound
        } else {
            Duration::from_secs(10)
        };
    while Instant::now() < drain_until && served.lock().unwrap().len() < w {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    set.abort_all();
    while let Some(r) = set.join_next().await {
        if let Ok(Err(e)) = r {
            return Err(e);
        }
    }
    let s = served.lock().unwrap();
    let drain = match s.iter().max() {
        Some(last) if s.len() == w => Val::Num((*last - t0).as_secs_f64() * 1e3),
        _ => Val::AtLeast((drain_until - t0).as_secs_f64() * 1e3),
    };
    Ok((try_us?, drain))
}

/// `MEMORY USAGE` of a one-holder lock (13-byte key, 36-byte owner).
async fn memory_one(ctx: &Ctx, c: Contender, mode: Mode) -> BenchResult<f64> {
    let mut conn = RawConn::connect(ctx.port, T).await?;
    let key = "lock:00000001";
    conn.send(&lock_cmd_ttl(ctx, c, mode, key)).await?;
    let r = conn.read_reply_within(T).await?;
    if !r.is_grant() {
        return Err(format!("the lock answered {r:?}").into());
    }
    // The seed's read hold lives in the readers key.
    let mkey = if c == Contender::Seed && mode == Mode::Read {
        contender::readers_key(key)
    } else {
        key.into()
    };
    let r = conn
        .call(&["MEMORY", "USAGE", &mkey, "SAMPLES", "0"], T)
        .await?;
    let _ = conn
        .call(&["DEL", key, &contender::readers_key(key)], T)
        .await;
    match r {
        Reply::Int(n) => Ok(n as f64),
        other => Err(format!("MEMORY USAGE answered {other:?}").into()),
    }
}

fn lock_cmd_ttl(ctx: &Ctx, c: Contender, mode: Mode, key: &str) -> Vec<u8> {
    let owner = contender::new_owner();
    assert_eq!((owner.len(), key.len()), (36, 13));
    lock_cmd(ctx, c, mode, key, &owner)
}

/// `used_memory` growth per held lock over `n` one-holder locks on distinct 13-byte keys.
/// `used_memory` growth per held lock over `n` one-holder locks on distinct 13-byte keys, on a
/// fresh server of its own (on a reused one, what the previous contender's locks held can be
/// freed while this one's are added).
async fn memory_many(ctx: &Ctx, c: Contender, mode: Mode, n: usize) -> BenchResult<f64> {
    let server = tokio::task::spawn_blocking(|| crate::start_server(100)).await??;
    let mut mc = contender::connect(&server.client(), Some(T)).await?;
    ctx.scripts.load(&mut mc).await?;
    let mut conn = RawConn::connect(server.port, T).await?;
    let before: i64 = info_field(&mut conn, "memory", "used_memory")
        .await?
        .parse()?;
    let cmds: Vec<Vec<u8>> = (0..n)
        .map(|i| lock_cmd_ttl(ctx, c, mode, &format!("lock:{i:08}")))
        .collect();
    pipeline_all(&mut conn, &cmds, Reply::is_grant).await?;
    drop(cmds);
    let after: i64 = info_field(&mut conn, "memory", "used_memory")
        .await?
        .parse()?;
    Ok((after - before) as f64 / n as f64)
}

pub async fn run(ctx: &Ctx, st: &Settings) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut levels = |what: &str, op: &str, ns: &[usize], cost: Costs| {
        for (i, label) in ["client µs/op (pipelined)", "server µs/op"]
            .iter()
            .enumerate()
        {
            for (j, &n) in ns.iter().enumerate() {
                let mut row = Row::new(SC, &format!("{n} {what}: {op}"), label, "µs");
                for c in PAIR {
                    let v = &cost[&(n, c.name())];
                    row = row.val(
                        c.name(),
                        Val::of(v, |x| Val::Num(if i == 0 { x.0 } else { x.1 })),
                    );
                }
                if j + 1 == ns.len() && j > 0 {
                    let first = |who: &str| {
                        cost[&(ns[0], who)]
                            .as_ref()
                            .ok()
                            .map(|x| if i == 0 { x.0 } else { x.1 })
                    };
                    row = row.target_by(
                        &format!("<= 1.5 x the cost at {} {what}", ns[0]),
                        |who, x| first(who).is_some_and(|a| x <= 1.5 * a),
                    );
                }
                rows.push(row);
            }
        }
    };
    let mut cost = HashMap::new();
    for &m in &st.s5_readers {
        for c in PAIR {
            cost.insert(
                (m, c.name()),
                readers_cost(ctx, st, c, m).await.map_err(|e| e.to_string()),
            );
        }
    }
    levels(
        "readers",
        "RLOCK+UNLOCK by one more owner",
        &st.s5_readers,
        cost,
    );
    let (mut cost, mut drains) = (HashMap::new(), Vec::new());
    for &w in &st.s5_waiters {
        let mut row = Row::new(
            SC,
            &format!("{w} waiters: hand-off to each in turn"),
            "release -> all served",
            "ms",
        );
        for c in PAIR {
            let r = waiters(ctx, st, c, w).await.map_err(|e| e.to_string());
            row = row.val(c.name(), Val::of(&r, |x| x.1.clone()));
            cost.insert((w, c.name()), r.map(|x| x.0));
        }
        drains.push(
            row.note(
                st.s5_waiter_note
                    .clone()
                    .unwrap_or_else(|| "each waiter releases as soon as it is served".into()),
            ),
        );
    }
    levels(
        "waiters",
        "refused try-WLOCK (a writer holds)",
        &st.s5_waiters,
        cost,
    );
    rows.extend(drains);

    let mem = [
        (Contender::Floor, Mode::Write),
        (Contender::Module, Mode::Write),
        (Contender::Module, Mode::Read),
        (Contender::Seed, Mode::Read),
    ];
    for (metric, many) in [("MEMORY USAGE", false), ("used_memory per lock", true)] {
        let case = if many {
            format!(
                "{} one-holder locks, 13-byte keys, 36-byte owners",
                st.s5_mem_locks
            )
        } else {
            "one holder, 13-byte key, 36-byte owner".to_string()
        };
        let mut by_mode = [
            Row::new(SC, &format!("{case}, write"), metric, "B"),
            Row::new(SC, &format!("{case}, read"), metric, "B"),
        ];
        for (c, mode) in mem {
            let r = if many {
                memory_many(ctx, c, mode, st.s5_mem_locks).await
            } else {
                memory_one(ctx, c, mode).await
            };
            let i = usize::from(mode == Mode::Read);
            by_mode[i] = std::mem::take(&mut by_mode[i]).val(
                c.name(),
                Val::of(&r.map_err(|e| e.to_string()), |x| Val::Num(*x)),
            );
        }
        let floor = by_mode[0].get("floor").num();
        for row in by_mode {
            let row =
                row.note("floor: SET key owner NX PX; seed read: its readers counter (no owner)");
            rows.push(match floor {
                _ if !many => row
                    .target("module <= 160 B", |x| x <= 160.0)
                    .judged_for(&["module"]),
                Some(f) => row
                    .target(&format!("module <= 1.3 x floor = {:.0} B", 1.3 * f), |x| {
                        x <= 1.3 * f
                    })
                    .judged_for(&["module"]),
                None => row,
            });
        }
    }
    rows
}

//! Scenario 8: transfers. N workers each move one unit between two random accounts of M
//! (plain Redis strings holding balances) for a fixed window: lock both, read both, write
//! a-1 / b+1, release. A transfer needs both locks, which is where a multi-key lock matters:
//! the module's `RWLOCK.MLOCK` (one request, all or nothing, FIFO in every key's queue)
//! against two single locks taken in sorted key order (the usual client-side way to avoid a
//! deadlock), on the module (`WLOCK ... WAIT`) and on the seed's design (polling).
//!
//! Figures: transfers per second in the window; every request's wait for both locks, counted
//! as `waiting.rs` does (a wait still open at the window's end counts up to it); fewest / most
//! transfers of one worker; and the lost updates, which must be 0. A lock that lets two
//! transfers touch one account at once loses one's write: that is a failure of the run, shown
//! as an error in every figure of that contender, never as a number among the others.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;

use crate::contender::{connect, new_owner, Client, Contender, Several};
use crate::report::{fmt_num, Row, Val};
use crate::waiting::Censored;
use crate::worker::{instant_at, now, Report};
use crate::{BenchResult, Ctx, Settings};

const SC: &str = "8 transfers";
/// Every account's balance at the start.
const START: i64 = 1_000_000;
/// Far longer than any transfer: a lapsed lease would let a second transfer in.
const TTL_MS: u64 = 30_000;
/// Worker `i` of every contender draws the same pairs (seed `SEED + i`), so runs compare.
const SEED: u64 = 0x5eed_0008;
/// Past its last deadline a worker has one transfer and a release left; longer is a stuck server.
const SLACK_S: f64 = 10.0;

/// One column: who takes the two accounts, and how.
struct Way {
    column: &'static str,
    who: Contender,
    how: Several,
    /// In the keys, so that every case has keys of its own.
    slug: &'static str,
}

const WAYS: [Way; 3] = [
    Way {
        column: "module",
        who: Contender::Module,
        how: Several::Mlock,
        slug: "mlock",
    },
    Way {
        column: "module 2 WLOCKs",
        who: Contender::Module,
        how: Several::InOrder,
        slug: "wlocks",
    },
    Way {
        column: "seed",
        who: Contender::Seed,
        how: Several::InOrder,
        slug: "seed",
    },
];

/// SplitMix64: small, seeded and dependency-free; enough to pick pairs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Two distinct accounts of `m` (>= 2).
    fn pair(&mut self, m: usize) -> (usize, usize) {
        let a = (self.next() % m as u64) as usize;
        let b = (self.next() % (m as u64 - 1)) as usize;
        (a, if b >= a { b + 1 } else { b })
    }
}

/// One case's keys, all under one hash tag: a Cluster would keep them in one slot, as MLOCK
/// needs there.
struct Keys(String);

impl Keys {
    fn lock(&self, i: usize) -> String {
        format!("{{{}}}:lock:{i:03}", self.0)
    }

    fn account(&self, i: usize) -> String {
        format!("{{{}}}:acct:{i:03}", self.0)
    }
}

/// A run's bounds, on the workers' clock (seconds), and the most transfers per worker.
#[derive(Clone, Copy)]
struct Window {
    go: f64,
    stop: f64,
    hard: f64,
    max: u64,
}

/// What one worker did: its requests and holds, and what its transfers moved per account.
struct Moved {
    rep: Report,
    delta: Vec<i64>,
}

/// Transfers until the window ends; each request waits at most to `hard`.
async fn transfers(
    mut cl: Client,
    mut data: MultiplexedConnection,
    how: Several,
    keys: Arc<Keys>,
    m: usize,
    seed: u64,
    w: Window,
) -> BenchResult<Moved> {
    let owner = new_owner();
    let mut rng = Rng(seed);
    let mut out = Moved {
        rep: Report::default(),
        delta: vec![0; m],
    };
    tokio::time::sleep_until(instant_at(w.go).into()).await;
    while now() < w.stop && out.rep.grants < w.max {
        let (a, b) = rng.pair(m);
        let locks = [keys.lock(a), keys.lock(b)];
        let asked = now();
        let ok = cl
            .acquire_all(how, &locks, &owner, TTL_MS, instant_at(w.hard))
            .await?;
        let at = now();
        out.rep.asked.push(asked);
        out.rep.granted.push(ok.then_some(at));
        if !ok {
            break;
        }
        out.rep.grants += 1;
        // Read, then write, as an application would: a second holder in between loses a write.
        let (x, y): (i64, i64) = redis::cmd("MGET")
            .arg(keys.account(a))
            .arg(keys.account(b))
            .query_async(&mut data)
            .await?;
        redis::cmd("MSET")
            .arg(keys.account(a))
            .arg(x - 1)
            .arg(keys.account(b))
            .arg(y + 1)
            .query_async::<()>(&mut data)
            .await?;
        out.delta[a] -= 1;
        out.delta[b] += 1;
        out.rep.holds.push(now() - at);
        if !cl.release_all(how, &locks, &owner, TTL_MS).await? {
            return Err("the release of a transfer's two locks did not release both".into());
        }
    }
    Ok(out)
}

#[derive(Clone, Debug, Default)]
struct Outcome {
    /// Transfers granted inside the window, per worker.
    in_window: Vec<u64>,
    window: f64,
    waits: Censored,
    mean_hold_ms: f64,
    /// The server's CPU time in the window, seconds.
    server_cpu: Option<f64>,
    /// Every account's distance from what the transfers made it, summed: each lost write
    /// counts 1 (the sum of balances alone would miss a lost debit and a lost credit together).
    lost: u64,
    /// The balances' sum, end minus start.
    drift: i64,
}

impl Outcome {
    fn fairness(&self) -> f64 {
        let min = *self.in_window.iter().min().unwrap_or(&0) as f64;
        let max = *self.in_window.iter().max().unwrap_or(&0) as f64;
        if max == 0.0 {
            0.0
        } else {
            min / max
        }
    }

    fn failed(&self) -> Option<Val> {
        (self.lost > 0).then(|| Val::Error(format!("{} lost updates", self.lost)))
    }
}

/// The server's CPU seconds so far, user and system (`INFO cpu`: microseconds, where /proc
/// counts 10 ms ticks, too coarse for a short window).
async fn server_cpu(c: &mut MultiplexedConnection) -> Option<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(c).await.ok()?;
    let field = |name: &str| {
        info.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(':')?
                .trim()
                .parse::<f64>()
                .ok()
        })
    };
    Some(field("used_cpu_user")? + field("used_cpu_sys")?)
}

async fn measure(ctx: &Ctx, st: &Settings, way: &Way, n: usize, m: usize) -> BenchResult<Outcome> {
    let keys = Arc::new(Keys(format!("bench:s8:{}:{n}:{m}", way.slug)));
    let accounts: Vec<String> = (0..m).map(|i| keys.account(i)).collect();
    let data_conn = || connect(&ctx.client, Some(Duration::from_secs(5)));
    let mut admin = data_conn().await?;
    let mut set = redis::cmd("MSET");
    for a in &accounts {
        set.arg(a).arg(START);
    }
    set.query_async::<()>(&mut admin).await?;
    // Every connection is made before the clock starts.
    let mut clients = Vec::new();
    for _ in 0..n {
        let cl = Client::connect(way.who, &ctx.client, &ctx.scripts).await?;
        clients.push((cl, data_conn().await?));
    }
    let go = now() + 0.05;
    let w = Window {
        go,
        stop: go + st.s8_secs,
        hard: go + st.s8_secs + st.s8_grace.as_secs_f64(),
        max: st.s8_max_transfers,
    };
    let mut tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, (cl, dc))| {
            let job = transfers(cl, dc, way.how, keys.clone(), m, SEED + i as u64, w);
            tokio::spawn(job)
        })
        .collect();
    // The server's CPU time in the window, for its cost per transfer (polling included).
    tokio::time::sleep_until(instant_at(w.go).into()).await;
    let cpu0 = server_cpu(&mut admin).await;
    tokio::time::sleep_until(instant_at(w.stop).into()).await;
    let server_cpu = cpu0.zip(server_cpu(&mut admin).await).map(|(a, b)| b - a);
    let until = instant_at(w.hard + SLACK_S);
    let mut moved = Vec::new();
    let mut failure = None;
    for t in &mut tasks {
        match tokio::time::timeout_at(until.into(), t).await {
            Ok(Ok(Ok(mv))) => moved.push(mv),
            Ok(Ok(Err(e))) => failure = failure.or(Some(e.to_string())),
            Ok(Err(e)) => failure = failure.or(Some(format!("a worker panicked: {e}"))),
            Err(_) => {
                failure = failure.or(Some(format!("a worker ran {SLACK_S} s past its end")));
                break;
            }
        }
    }
    for t in &tasks {
        t.abort();
    }
    if let Some(e) = failure {
        return Err(e.into());
    }
    let end: Vec<i64> = redis::cmd("MGET")
        .arg(&accounts)
        .query_async(&mut admin)
        .await?;
    let mut expect = vec![START; m];
    for mv in &moved {
        for (e, d) in expect.iter_mut().zip(&mv.delta) {
            *e += d;
        }
    }
    let lost = end.iter().zip(&expect).map(|(x, e)| x.abs_diff(*e)).sum();
    let drift = end.iter().sum::<i64>() - START * m as i64;
    if lost > 0 || drift != 0 {
        eprintln!(
            "[bench] scenario 8: LOST UPDATES: {} at {n} workers, {m} accounts: {lost} \
             (the balances' sum moved by {drift})",
            way.column
        );
    }
    let reps: Vec<Report> = moved.into_iter().map(|mv| mv.rep).collect();
    let holds: Vec<f64> = reps
        .iter()
        .flat_map(|r| &r.holds)
        .map(|h| h * 1e3)
        .collect();
    Ok(Outcome {
        in_window: reps
            .iter()
            .map(|r| r.granted.iter().flatten().filter(|g| **g < w.stop).count() as u64)
            .collect(),
        window: st.s8_secs,
        waits: Censored::new(&reps, w.go, w.stop),
        mean_hold_ms: holds.iter().sum::<f64>() / holds.len().max(1) as f64,
        server_cpu,
        lost,
        drift,
    })
}

pub async fn run(ctx: &Ctx, st: &Settings) -> Vec<Row> {
    // The hold is the transfer's MGET and MSET: two round trips, rounded up to 0.1 ms.
    let hold = (ctx.rtt.as_secs_f64() * 2e4).ceil().max(1.0) / 10.0;
    let mut rows = Vec::new();
    for &n in &st.s8_workers {
        for &m in &st.s8_accounts {
            let mut res: Vec<(&str, Result<Outcome, Val>)> = Vec::new();
            for way in &WAYS {
                let o = measure(ctx, st, way, n, m).await;
                res.push((way.column, o.map_err(|e| Val::Error(e.to_string()))));
            }
            rows.extend(case_rows(&res, n, m, hold));
        }
    }
    rows
}

/// One case's rows. A contender that lost an update has an error in every figure but that one.
fn case_rows(res: &[(&str, Result<Outcome, Val>)], n: usize, m: usize, hold: f64) -> Vec<Row> {
    let case = format!("{n} workers, {m} accounts");
    let row = |metric: &str, unit: &str, f: &dyn Fn(&Outcome) -> Val| {
        res.iter()
            .fold(Row::new(SC, &case, metric, unit), |r, (c, o)| {
                let v = match o {
                    Ok(o) => o.failed().unwrap_or_else(|| f(o)),
                    Err(e) => e.clone(),
                };
                r.val(c, v)
            })
    };
    let mut rows = vec![row("transfers/s", "", &|o| {
        Val::Num(o.in_window.iter().sum::<u64>() as f64 / o.window)
    })
    .note(format!(
        "a transfer: lock both accounts, MGET both, MSET a-1 / b+1, release (hold: two round \
         trips, about {hold} ms). module: one RWLOCK.MLOCK 2 a b ... WAIT, one RWLOCK.MUNLOCK; \
         module 2 WLOCKs: RWLOCK.WLOCK ... WAIT on each in key order, UNLOCK each; seed: the \
         seed's write lock on each in key order (polling), DEL each"
    ))];
    // Strict FIFO over both keys: at most the N-1 others' transfers ahead.
    let limit = (n as f64 * (hold + 1.0) * 10.0).round() / 10.0;
    rows.extend(crate::waiting::rows(res, SC, &case, limit, |o| match o {
        Ok(o) => o.failed().map_or(Ok(&o.waits), Err),
        Err(e) => Err(e.clone()),
    }));
    rows.push(
        row("server CPU per transfer", "µs", &|o| {
            let done = o.in_window.iter().sum::<u64>().max(1) as f64;
            o.server_cpu
                .map_or(Val::Missing, |s| Val::Num(s * 1e6 / done))
        })
        .note(
            "the server's CPU time in the window (INFO cpu, user + system; polling included) \
             over the transfers in it",
        ),
    );
    let detail: Vec<String> = res
        .iter()
        .filter_map(|(c, o)| {
            o.as_ref().ok().map(|o| {
                let busy = o
                    .server_cpu
                    .map_or("?".into(), |s| format!("{:.2}", s / o.window));
                format!(
                    "{c}: {} transfers, {} still waiting at the end, mean hold {:.2} ms, server \
                     busy {busy} of a core",
                    o.in_window.iter().sum::<u64>(),
                    o.waits.open(),
                    o.mean_hold_ms
                )
            })
        })
        .collect();
    rows.push(
        row("min/max transfers per worker", "", &|o| {
            Val::Num(o.fairness())
        })
        .target(">= 0.8", |x| x >= 0.8)
        .note(detail.join("; ")),
    );
    let lost = res
        .iter()
        .fold(Row::new(SC, &case, "lost updates", ""), |r, (c, o)| {
            let v = o
                .as_ref()
                .map_or_else(Val::clone, |o| Val::Num(o.lost as f64));
            r.val(c, v)
        });
    let sums: Vec<String> = res
        .iter()
        .filter_map(|(c, o)| o.as_ref().ok().map(|o| format!("{c}: {:+}", o.drift)))
        .collect();
    rows.push(lost.target("0", |x| x == 0.0).note(format!(
        "each account against the transfers' own tally, {m} accounts of {}; the balances' sum \
         moved by {}",
        fmt_num(START as f64),
        sums.join(", ")
    )));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_distinct_and_cover_every_account() {
        let mut r = Rng(SEED);
        let mut seen = [0u32; 4];
        for _ in 0..1000 {
            let (a, b) = r.pair(4);
            assert!(a != b && a < 4 && b < 4);
            seen[a] += 1;
            seen[b] += 1;
        }
        assert!(seen.iter().all(|&k| k > 400), "{seen:?}");
        // Seeded: the same pairs every run.
        assert_eq!(Rng(7).pair(16), Rng(7).pair(16));
    }

    #[test]
    fn a_lost_update_is_an_error_in_every_figure_but_its_own() {
        let ok = Outcome {
            in_window: vec![10, 10],
            window: 1.0,
            server_cpu: Some(0.1),
            ..Outcome::default()
        };
        let bad = Outcome {
            lost: 2,
            ..ok.clone()
        };
        let rows = case_rows(&[("module", Ok(ok)), ("seed", Ok(bad))], 2, 4, 0.2);
        for r in &rows {
            if r.metric == "lost updates" {
                assert_eq!(r.get("seed"), &Val::Num(2.0));
                assert_eq!(r.met_by("seed"), Some(false));
                assert_eq!(r.met_by("module"), Some(true));
            } else {
                assert!(matches!(r.get("seed"), Val::Error(_)), "{}", r.metric);
                assert!(r.get("module").num().is_some(), "{}", r.metric);
            }
        }
    }
}

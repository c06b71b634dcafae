//! Every waiter is answered exactly once, and its answer agrees with the state, when its
//! wait ends in the same event-loop turn as the holder's lapse (issue 10: the reply was lost
//! on Redis 7.0 and Redis 7.2 died asserting `c->duration == 0`) or as another client's
//! release. Raw sockets (`testkit::socket`): no client retry can hide a lost reply; a reply
//! missing after 5 s fails the test.
//!
//! Each round uses a fresh key: `a` takes it with a 3 ms lease, then, after a gap of 0 to 5 ms,
//! `b` asks with `WAIT 3`; half the rounds keep the gap under 1 ms, where the lapse and the
//! wait's end fall in one turn. `REDIS_LEASE_RACE_ROUNDS` sets the rounds (default 1,000),
//! run in lanes (threads with their own connections and keys) in parallel.

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use redis_lease_testkit::prelude::*;

fn rounds() -> usize {
    std::env::var("REDIS_LEASE_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// Threads that run rounds at once, each on its own keys and connections.
const LANES: usize = 4;

/// The gap in µs before the waiter's request in round `i`: odd rounds anywhere in 0-5 ms,
/// even rounds under 1 ms (the same-turn case), spread evenly.
fn gap_us(i: usize) -> u64 {
    let spread = (i as u64).wrapping_mul(7919) % 1000;
    if i.is_multiple_of(2) {
        spread
    } else {
        spread * 5
    }
}

/// Waits `us` µs precisely (a sleep of under a ms would round up to the scheduler's tick).
fn spin(us: u64) {
    let until = Instant::now() + Duration::from_micros(us);
    if us > 1500 {
        thread::sleep(Duration::from_micros(us - 1000));
    }
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// One of the three kinds of key, as the race uses it.
#[derive(Clone, Copy, Debug)]
enum Kind {
    RwLock,
    Leader,
    Semaphore,
}

impl Kind {
    /// The request of `owner` for `key` with lease `ttl` (and `WAIT wait`).
    fn acquire(self, key: &str, owner: &str, ttl: u64, wait: Option<u64>) -> Vec<String> {
        let mut v: Vec<String> = match self {
            Kind::RwLock => vec!["RWLOCK.WLOCK".into(), key.into(), owner.into()],
            Kind::Leader => vec!["LEADER.CAMPAIGN".into(), key.into(), owner.into()],
            // One permit each, limit 1: exclusive, like the others.
            Kind::Semaphore => vec![
                "SEMAPHORE.ACQUIRE".into(),
                key.into(),
                owner.into(),
                "1".into(),
            ],
        };
        v.push(ttl.to_string());
        if let Some(w) = wait {
            v.extend(["WAIT".into(), w.to_string()]);
        }
        v
    }

    fn release(self, key: &str, owner: &str) -> Vec<String> {
        let name = match self {
            Kind::RwLock => "RWLOCK.UNLOCK",
            Kind::Leader => "LEADER.RESIGN",
            Kind::Semaphore => "SEMAPHORE.RELEASE",
        };
        vec![name.into(), key.into(), owner.into()]
    }

    /// The key's holders and their tokens, as its read command reports them.
    fn holders(self, s: &mut Sock, key: &str) -> BTreeMap<Vec<u8>, i64> {
        let mut out = BTreeMap::new();
        match self {
            Kind::Leader => {
                let r = s.cmd(&["LEADER.CURRENT", key]);
                if !r.is_nil() {
                    let a = r.array();
                    out.insert(a[0].bytes().to_vec(), a[1].int());
                }
            }
            Kind::RwLock | Kind::Semaphore => {
                let cmd = match self {
                    Kind::RwLock => "RWLOCK.INFO",
                    _ => "SEMAPHORE.INFO",
                };
                let r = s.cmd(&[cmd, key]);
                let holders = r
                    .get("holders")
                    .unwrap_or_else(|| panic!("{cmd} {key}: {r:?}"));
                for h in holders.array() {
                    let owner = h.get("owner").expect("owner").bytes().to_vec();
                    out.insert(owner, h.get("token").expect("token").int());
                }
            }
        }
        out
    }
}

fn call(s: &mut Sock, args: &[String]) -> Resp {
    let a: Vec<&[u8]> = args.iter().map(|x| x.as_bytes()).collect();
    s.call(&a)
}

fn send(s: &mut Sock, args: &[String]) {
    let a: Vec<&[u8]> = args.iter().map(|x| x.as_bytes()).collect();
    s.send(&a);
}

/// A waiter's reply: a token or nil; anything else fails the round.
fn token_or_nil(r: &Resp, what: &str) -> Option<i64> {
    match r {
        Resp::Nil => None,
        Resp::Int(t) if *t >= 1 => Some(*t),
        other => panic!("{what}: expected a token or nil, got {other:?}"),
    }
}

/// What the rounds of one lane saw.
#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    granted: usize,
    nil: usize,
    /// Rounds whose gap was under 1 ms.
    close: usize,
}

impl Tally {
    fn add(&mut self, o: Tally) {
        self.granted += o.granted;
        self.nil += o.nil;
        self.close += o.close;
    }
}

/// Runs `rounds` rounds of `round` in `LANES` threads; each gets its lane number and round.
fn in_lanes(s: &Server, rounds: usize, round: fn(&mut [Sock], &str, usize) -> Tally) -> Tally {
    let per_lane = rounds.div_ceil(LANES);
    let handles: Vec<_> = (0..LANES)
        .map(|lane| {
            let port = s.port;
            thread::spawn(move || {
                let mut socks: Vec<Sock> = (0..6).map(|_| Sock::connect(port)).collect();
                let mut t = Tally::default();
                for i in 0..per_lane {
                    let n = lane * per_lane + i;
                    t.add(round(&mut socks, &format!("race:{lane}:{i}"), n));
                }
                t
            })
        })
        .collect();
    let mut total = Tally::default();
    let mut failure = None;
    for h in handles {
        match h.join() {
            Ok(t) => total.add(t),
            Err(e) => failure = Some(e),
        }
    }
    if let Some(e) = failure {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let log = s.log();
        let alive = s.pid().is_some_and(process_alive);
        panic!(
            "{msg}\nserver alive: {alive}; log lines showing a crash: {:?}\nlog tail:\n{}",
            broken_lines(&log),
            tail(&log, 40)
        );
    }
    total
}

fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// After the rounds: nothing is held or awaited any more (no holder nobody knows about), the
/// server answers and its log shows no crash, assertion or panic.
fn settled(s: &Server, what: &str) {
    let mut c = Sock::connect(s.port);
    let empty = eventually(Duration::from_secs(10), || c.cmd(&["DBSIZE"]).int() == 0);
    let info = text(&r!(conn(s), "INFO", "lease"));
    assert!(
        empty,
        "{what}: keys are left after every lease ended:\n{info}"
    );
    let li = lease_info(&mut conn(s));
    for f in ["lease_keys", "lease_holders", "lease_waiters"] {
        assert_eq!(li[f], "0", "{what}: {f}:\n{info}");
    }
    assert_eq!(c.cmd(&["PING"]), Resp::Simple("PONG".into()), "{what}");
    assert_log_clean(s, what);
}

/// One round: `a` takes the key for 3 ms; after the gap `b` asks with `WAIT 3`.
fn lapse_round(kind: Kind, socks: &mut [Sock], key: &str, n: usize) -> Tally {
    let gap = gap_us(n);
    let ta = token_or_nil(&call(&mut socks[0], &kind.acquire(key, "a", 3, None)), key)
        .unwrap_or_else(|| panic!("{key}: a fresh key was not granted"));
    spin(gap);
    let req = kind.acquire(key, "b", 2000, Some(3));
    send(&mut socks[1], &req);
    let what = format!("{req:?} (round {n}, {gap} µs after a's grant)");
    let tb = token_or_nil(&socks[1].reply(&what), &what);
    check_answer(kind, socks, key, "b", tb, Some(ta), &what);
    Tally {
        granted: usize::from(tb.is_some()),
        nil: usize::from(tb.is_none()),
        close: usize::from(gap < 1000),
    }
}

/// `owner`'s answer `t` agrees with the state: a token means it holds (with that token, above
/// `above`) and a release answers 1; nil means it holds nothing and a release answers 0.
fn check_answer(
    kind: Kind,
    socks: &mut [Sock],
    key: &str,
    owner: &str,
    t: Option<i64>,
    above: Option<i64>,
    what: &str,
) {
    let holders = kind.holders(&mut socks[2], key);
    let held = holders.get(owner.as_bytes()).copied();
    match t {
        Some(t) => {
            assert_eq!(
                held,
                Some(t),
                "{what}: answered token {t}, holders {holders:?}"
            );
            if let Some(a) = above {
                assert!(t > a, "{what}: token {t} not above the previous {a}");
            }
        }
        None => assert_eq!(held, None, "{what}: answered nil, holders {holders:?}"),
    }
    let released = call(&mut socks[2], &kind.release(key, owner)).int();
    assert_eq!(
        released,
        i64::from(t.is_some()),
        "{what}: answered {t:?}, then its release answered {released}"
    );
}

fn race(kind: Kind, round: fn(&mut [Sock], &str, usize) -> Tally, what: &str) {
    let s = Server::start();
    let t0 = Instant::now();
    let n = rounds();
    let t = in_lanes(&s, n, round);
    println!(
        "{what} {kind:?}: {n} rounds in {:?}: {} granted, {} nil, {} with a gap under 1 ms",
        t0.elapsed(),
        t.granted,
        t.nil,
        t.close
    );
    assert_eq!(t.granted + t.nil, n.div_ceil(LANES) * LANES);
    settled(&s, what);
}

#[test]
fn rwlock_waiter_whose_wait_ends_as_the_holder_lapses_is_answered_once_and_truly() {
    race(
        Kind::RwLock,
        |s, k, n| lapse_round(Kind::RwLock, s, k, n),
        "lapse",
    );
}

#[test]
fn leader_candidate_whose_wait_ends_as_the_leader_lapses_is_answered_once_and_truly() {
    race(
        Kind::Leader,
        |s, k, n| lapse_round(Kind::Leader, s, k, n),
        "lapse",
    );
}

#[test]
fn semaphore_waiter_whose_wait_ends_as_the_holder_lapses_is_answered_once_and_truly() {
    race(
        Kind::Semaphore,
        |s, k, n| lapse_round(Kind::Semaphore, s, k, n),
        "lapse",
    );
}

/// Waiters on one key whose waits all end with the holder's lease.
const CROWD: usize = 4;

/// `a` takes the key for 3 ms; after the gap, `CROWD` waiters (their own connections, sent
/// back to back) ask with `WAIT 3`: their deadlines equal each other's and the holder's.
fn crowd_round(kind: Kind, socks: &mut [Sock], key: &str, n: usize) -> Tally {
    let gap = gap_us(n);
    let ta = token_or_nil(&call(&mut socks[0], &kind.acquire(key, "a", 3, None)), key)
        .unwrap_or_else(|| panic!("{key}: a fresh key was not granted"));
    spin(gap);
    let owners: Vec<String> = (0..CROWD).map(|i| format!("w{i}")).collect();
    // socks[2] reads the state: the waiters use 1 and 3..
    let at = |i: usize| if i == 0 { 1 } else { i + 2 };
    for (i, o) in owners.iter().enumerate() {
        send(&mut socks[at(i)], &kind.acquire(key, o, 2000, Some(3)));
    }
    let mut answers = Vec::new();
    for (i, o) in owners.iter().enumerate() {
        let what = format!("{key}: waiter {o} (round {n}, {gap} µs after a's grant)");
        answers.push(token_or_nil(&socks[at(i)].reply(&what), &what));
    }
    let granted: Vec<_> = answers.iter().flatten().collect();
    assert!(
        granted.len() <= 1,
        "{key}: an exclusive key granted to several waiters: {answers:?}"
    );
    for (o, t) in owners.iter().zip(&answers) {
        let what = format!("{key}: waiter {o} answered {t:?} (round {n})");
        check_answer(kind, socks, key, o, *t, Some(ta), &what);
    }
    Tally {
        granted: granted.len(),
        nil: CROWD - granted.len(),
        close: usize::from(gap < 1000),
    }
}

fn crowd(kind: Kind, round: fn(&mut [Sock], &str, usize) -> Tally) {
    let s = Server::start();
    let t0 = Instant::now();
    let n = rounds() / 2;
    let t = in_lanes(&s, n, round);
    println!(
        "crowd {kind:?}: {n} rounds of {CROWD} waiters in {:?}: {} granted, {} nil, {} with a \
         gap under 1 ms",
        t0.elapsed(),
        t.granted,
        t.nil,
        t.close
    );
    assert_eq!(t.granted + t.nil, n.div_ceil(LANES) * LANES * CROWD);
    settled(&s, "crowd");
}

#[test]
fn many_waiters_whose_waits_end_with_the_holders_lease_are_each_answered_once_and_truly() {
    crowd(Kind::RwLock, |s, k, n| crowd_round(Kind::RwLock, s, k, n));
    crowd(Kind::Leader, |s, k, n| crowd_round(Kind::Leader, s, k, n));
    crowd(Kind::Semaphore, |s, k, n| {
        crowd_round(Kind::Semaphore, s, k, n)
    });
}

/// `a` holds the key for 2 s; `b` asks with `WAIT 3`; 1.5 to 3.5 ms later `a` releases: the
/// release arrives as `b`'s wait ends.
fn release_round(kind: Kind, socks: &mut [Sock], key: &str, n: usize) -> Tally {
    // 1.5 to 3.5 ms (the wait ends 2 to 3 ms after the request, on the server's whole-ms
    // clock), half the rounds in 2 to 2.5 ms.
    let spread = (n as u64).wrapping_mul(7919) % 1000;
    let gap = if n.is_multiple_of(2) {
        2000 + spread / 2
    } else {
        1500 + spread * 2
    };
    let ta = token_or_nil(
        &call(&mut socks[0], &kind.acquire(key, "a", 2000, None)),
        key,
    )
    .unwrap_or_else(|| panic!("{key}: a fresh key was not granted"));
    let req = kind.acquire(key, "b", 2000, Some(3));
    send(&mut socks[1], &req);
    spin(gap);
    let released = call(&mut socks[0], &kind.release(key, "a")).int();
    assert_eq!(released, 1, "{key}: the holder's release (round {n})");
    let what = format!("{req:?} (round {n}, released {gap} µs after the request)");
    let tb = token_or_nil(&socks[1].reply(&what), &what);
    check_answer(kind, socks, key, "b", tb, Some(ta), &what);
    Tally {
        granted: usize::from(tb.is_some()),
        nil: usize::from(tb.is_none()),
        close: usize::from(n.is_multiple_of(2)),
    }
}

#[test]
fn waiter_whose_wait_ends_as_another_client_releases_is_answered_once_and_truly() {
    race(
        Kind::RwLock,
        |s, k, n| release_round(Kind::RwLock, s, k, n),
        "release",
    );
    race(
        Kind::Leader,
        |s, k, n| release_round(Kind::Leader, s, k, n),
        "release",
    );
    race(
        Kind::Semaphore,
        |s, k, n| release_round(Kind::Semaphore, s, k, n),
        "release",
    );
}

/// A wait that runs out is answered by the module's own timer, within a few ms of its
/// deadline, not at Redis's next `hz` tick (every 100 ms by default).
#[test]
fn waits_of_1_to_50_ms_answer_nil_within_a_few_ms_of_their_deadline() {
    let s = Server::start();
    let mut holder = Sock::connect(s.port);
    let mut w = Sock::connect(s.port);
    token_or_nil(
        &holder.cmd(&["RWLOCK.WLOCK", "busy", "holder", "600000"]),
        "holder",
    )
    .expect("the holder's grant");
    const TRIES: usize = 20;
    for ms in [1u64, 2, 5, 10, 20, 50] {
        let mut took = Vec::with_capacity(TRIES);
        for i in 0..TRIES {
            let owner = format!("w{ms}-{i}");
            let wait = ms.to_string();
            let args = [
                "RWLOCK.WLOCK",
                "busy",
                owner.as_str(),
                "1000",
                "WAIT",
                &wait,
            ];
            let t0 = Instant::now();
            let r = w.cmd(&args);
            let dt = t0.elapsed().as_secs_f64() * 1000.0;
            assert!(r.is_nil(), "WAIT {ms}: {r:?}");
            // The deadline is whole ms on the server's clock: up to 1 ms early.
            assert!(dt >= ms as f64 - 1.0, "WAIT {ms} answered after {dt:.2} ms");
            took.push(dt);
        }
        let p50 = percentile(&mut took, 50.0);
        let p90 = percentile(&mut took, 90.0);
        let max = percentile(&mut took, 100.0);
        println!("WAIT {ms}: nil after p50 {p50:.2} ms, p90 {p90:.2} ms, max {max:.2} ms");
        assert!(
            p50 <= ms as f64 + 10.0,
            "WAIT {ms}: median {p50:.2} ms (at Redis's hz tick, not the deadline?): {took:?}"
        );
        assert!(
            p90 <= ms as f64 + 40.0,
            "WAIT {ms}: p90 {p90:.2} ms: {took:?}"
        );
    }
    assert_eq!(lease_info(&mut conn(&s))["lease_waiters"], "0");
    assert_log_clean(&s, "waits");
}

//! Helpers for the durability and replication tests: reading a key's state (holders, tokens,
//! absolute deadlines) in a form two servers or two moments can be compared by, INFO fields,
//! bounded polling, replication sync, and blocked WAIT-ers on their own threads.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Connection, Value};
use redis_lease_testkit::{Options, Server};

/// How far two readings of one absolute deadline may differ (query latency, not clock drift:
/// deadlines are stored absolute, so only the time between the reply and our clock counts).
pub const DEADLINE_TOLERANCE_MS: i64 = 250;

/// A long lease: lives through every restart of a test.
pub const LONG_TTL: u64 = 120_000;

/// Options with DEBUG enabled (Redis 7 refuses DEBUG otherwise) and a full sync that starts
/// at once (Redis 7 waits 5 s for more replicas by default).
pub fn opts() -> Options {
    Options::default()
        .arg("enable-debug-command", "yes")
        .arg("repl-diskless-sync-delay", "0")
}

pub fn start() -> Server {
    Server::with(opts())
}

/// A connection with a generous read timeout (a hung server fails the test, not the suite).
pub fn conn(s: &Server) -> Connection {
    let c = s.conn();
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    c
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Polls `f` every 20 ms until it is true or `limit` passes; answers whether it became true.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if f() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Sleeps until the local clock reaches `at_ms` (ms since the epoch), plus `margin_ms`.
pub fn sleep_until(at_ms: i64, margin_ms: i64) {
    let wait = at_ms + margin_ms - now_ms();
    if wait > 0 {
        thread::sleep(Duration::from_millis(wait as u64));
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".to_string(),
        Value::Int(i) => i.to_string(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => text(other).parse().expect("an integer"),
    }
}

/// A map reply, in RESP2 (flat field/value array) or RESP3.
fn map(v: &Value) -> BTreeMap<String, Value> {
    match v {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "odd map reply {items:?}");
            items
                .chunks(2)
                .map(|kv| (text(&kv[0]), kv[1].clone()))
                .collect()
        }
        other => panic!("expected a map, got {other:?}"),
    }
}

/// One holder entry of RWLOCK.INFO, with its lease as an absolute deadline (local clock).
#[derive(Clone, Debug)]
pub struct Holder {
    pub owner: String,
    pub mode: String,
    pub count: i64,
    pub token: i64,
    pub ttl: i64,
    pub deadline: i64,
}

#[derive(Clone, Debug)]
pub struct LockInfo {
    pub mode: String,
    /// Sorted by (owner, mode).
    pub holders: Vec<Holder>,
    pub waiters: i64,
    pub token: i64,
}

impl LockInfo {
    /// The largest token of any holder.
    pub fn max_token(&self) -> i64 {
        self.holders
            .iter()
            .map(|h| h.token)
            .max()
            .unwrap_or(0)
            .max(self.token)
    }

    pub fn holder(&self, owner: &str, mode: &str) -> Option<&Holder> {
        self.holders
            .iter()
            .find(|h| h.owner == owner && h.mode == mode)
    }
}

pub fn lock_info(c: &mut Connection, key: &str) -> LockInfo {
    let v: Value = redis::cmd("RWLOCK.INFO")
        .arg(key)
        .query(c)
        .unwrap_or_else(|e| panic!("RWLOCK.INFO {key}: {e}"));
    let now = now_ms();
    let m = map(&v);
    let mut holders: Vec<Holder> = match m.get("holders") {
        Some(Value::Array(hs)) => hs
            .iter()
            .map(|h| {
                let h = map(h);
                let ttl = int(&h["ttl"]);
                Holder {
                    owner: text(&h["owner"]),
                    mode: text(&h["mode"]),
                    count: int(&h["count"]),
                    token: int(&h["token"]),
                    ttl,
                    deadline: now + ttl,
                }
            })
            .collect(),
        other => panic!("RWLOCK.INFO {key}: holders {other:?}"),
    };
    holders.sort_by(|a, b| (&a.owner, &a.mode).cmp(&(&b.owner, &b.mode)));
    LockInfo {
        mode: text(&m["mode"]),
        holders,
        waiters: int(&m["waiters"]),
        token: int(&m["token"]),
    }
}

/// How two readings of a lock differ: mode, holders (owner, mode, count, token) exactly and
/// deadlines within the tolerance; the key's last `token` only if `last_token`.
pub fn lock_diff(expected: &LockInfo, actual: &LockInfo, last_token: bool) -> Option<String> {
    if expected.mode != actual.mode {
        return Some(format!("mode {} then {}", expected.mode, actual.mode));
    }
    let key = |h: &Holder| (h.owner.clone(), h.mode.clone(), h.count, h.token);
    let e: Vec<_> = expected.holders.iter().map(key).collect();
    let a: Vec<_> = actual.holders.iter().map(key).collect();
    if e != a {
        return Some(format!(
            "holders (owner, mode, count, token) {e:?} then {a:?}"
        ));
    }
    for (x, y) in expected.holders.iter().zip(&actual.holders) {
        if (x.deadline - y.deadline).abs() > DEADLINE_TOLERANCE_MS {
            return Some(format!(
                "deadline of {} {} moved: {} then {} (ttl {} then {})",
                x.owner, x.mode, x.deadline, y.deadline, x.ttl, y.ttl
            ));
        }
    }
    if last_token && expected.token != actual.token {
        return Some(format!(
            "last token {} then {}",
            expected.token, actual.token
        ));
    }
    None
}

/// Asserts two readings of a lock agree (see `lock_diff`).
pub fn assert_same_lock(what: &str, expected: &LockInfo, actual: &LockInfo, last_token: bool) {
    if let Some(d) = lock_diff(expected, actual, last_token) {
        panic!("{what}: {d}\nexpected {expected:?}\nactual {actual:?}");
    }
}

/// LEADER.CURRENT: (candidate, term, absolute deadline), or None.
#[derive(Clone, Debug)]
pub struct Leader {
    pub candidate: String,
    pub term: i64,
    pub ttl: i64,
    pub deadline: i64,
}

pub fn leader(c: &mut Connection, key: &str) -> Option<Leader> {
    let v: Value = redis::cmd("LEADER.CURRENT")
        .arg(key)
        .query(c)
        .unwrap_or_else(|e| panic!("LEADER.CURRENT {key}: {e}"));
    let now = now_ms();
    match v {
        Value::Nil => None,
        Value::Array(items) if items.len() == 3 => {
            let ttl = int(&items[2]);
            Some(Leader {
                candidate: text(&items[0]),
                term: int(&items[1]),
                ttl,
                deadline: now + ttl,
            })
        }
        other => panic!("LEADER.CURRENT {key}: {other:?}"),
    }
}

/// How two readings of an election differ: candidate and term exactly, deadline within the
/// tolerance.
pub fn leader_diff(expected: &Option<Leader>, actual: &Option<Leader>) -> Option<String> {
    match (expected, actual) {
        (None, None) => None,
        (Some(e), Some(a)) => {
            if (&e.candidate, e.term) != (&a.candidate, a.term) {
                Some(format!("leader {e:?} then {a:?}"))
            } else if (e.deadline - a.deadline).abs() > DEADLINE_TOLERANCE_MS {
                Some(format!(
                    "leader deadline moved: {} then {} (ttl {} then {})",
                    e.deadline, a.deadline, e.ttl, a.ttl
                ))
            } else {
                None
            }
        }
        _ => Some(format!("leader {expected:?} then {actual:?}")),
    }
}

pub fn assert_same_leader(what: &str, expected: &Option<Leader>, actual: &Option<Leader>) {
    if let Some(d) = leader_diff(expected, actual) {
        panic!("{what}: {d}");
    }
}

/// The state of some lock and election keys on one server.
#[derive(Clone, Debug)]
pub struct State {
    pub locks: Vec<(String, LockInfo)>,
    pub leaders: Vec<(String, Option<Leader>)>,
}

pub fn state(c: &mut Connection, locks: &[&str], leaders: &[&str]) -> State {
    State {
        locks: locks
            .iter()
            .map(|k| (k.to_string(), lock_info(c, k)))
            .collect(),
        leaders: leaders
            .iter()
            .map(|k| (k.to_string(), leader(c, k)))
            .collect(),
    }
}

pub fn state_diff(expected: &State, actual: &State) -> Option<String> {
    for ((k, e), (_, a)) in expected.locks.iter().zip(&actual.locks) {
        if let Some(d) = lock_diff(e, a, true) {
            return Some(format!("{k}: {d}"));
        }
    }
    for ((k, e), (_, a)) in expected.leaders.iter().zip(&actual.leaders) {
        if let Some(d) = leader_diff(e, a) {
            return Some(format!("{k}: {d}"));
        }
    }
    None
}

pub fn rlock(c: &mut Connection, key: &str, owner: &str, ttl: u64) -> Option<i64> {
    redis::cmd("RWLOCK.RLOCK")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .query(c)
        .unwrap_or_else(|e| panic!("RWLOCK.RLOCK {key} {owner}: {e}"))
}

pub fn wlock(c: &mut Connection, key: &str, owner: &str, ttl: u64) -> Option<i64> {
    redis::cmd("RWLOCK.WLOCK")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .query(c)
        .unwrap_or_else(|e| panic!("RWLOCK.WLOCK {key} {owner}: {e}"))
}

pub fn unlock(c: &mut Connection, key: &str, owner: &str) -> i64 {
    redis::cmd("RWLOCK.UNLOCK")
        .arg(key)
        .arg(owner)
        .query(c)
        .unwrap_or_else(|e| panic!("RWLOCK.UNLOCK {key} {owner}: {e}"))
}

pub fn renew(c: &mut Connection, key: &str, owner: &str, ttl: u64) -> Option<i64> {
    redis::cmd("RWLOCK.RENEW")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .query(c)
        .unwrap_or_else(|e| panic!("RWLOCK.RENEW {key} {owner}: {e}"))
}

pub fn campaign(c: &mut Connection, key: &str, candidate: &str, ttl: u64) -> Option<i64> {
    redis::cmd("LEADER.CAMPAIGN")
        .arg(key)
        .arg(candidate)
        .arg(ttl)
        .query(c)
        .unwrap_or_else(|e| panic!("LEADER.CAMPAIGN {key} {candidate}: {e}"))
}

pub fn resign(c: &mut Connection, key: &str, candidate: &str) -> i64 {
    redis::cmd("LEADER.RESIGN")
        .arg(key)
        .arg(candidate)
        .query(c)
        .unwrap_or_else(|e| panic!("LEADER.RESIGN {key} {candidate}: {e}"))
}

pub fn exists(c: &mut Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(c).unwrap() == 1
}

pub fn dbsize(c: &mut Connection) -> i64 {
    redis::cmd("DBSIZE").query(c).unwrap()
}

/// One field of `INFO section` (e.g. `info_field(c, "lease", "lease_holders")`).
pub fn info_field(c: &mut Connection, section: &str, field: &str) -> Option<String> {
    let text: String = redis::cmd("INFO").arg(section).query(c).unwrap();
    text.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    })
}

pub fn info_int(c: &mut Connection, section: &str, field: &str) -> i64 {
    info_field(c, section, field)
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
        .parse()
        .unwrap_or_else(|_| panic!("INFO {section} {field} is not an integer"))
}

/// A blocking request on its own thread and connection (e.g. `RWLOCK.WLOCK k o 5000 WAIT 5000`):
/// the reply (token, nil, or the error text) arrives through the handle.
pub fn spawn_wait(s: &Server, args: &[&str]) -> JoinHandle<Result<Option<i64>, String>> {
    let mut c = conn(s);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    thread::spawn(move || {
        let mut cmd = redis::cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a);
        }
        cmd.query::<Option<i64>>(&mut c).map_err(|e| e.to_string())
    })
}

/// Waits until `lease_waiters` on the server reaches `n`.
pub fn wait_for_waiters(c: &mut Connection, n: i64) {
    assert!(
        eventually(Duration::from_secs(10), || info_int(
            c,
            "lease",
            "lease_waiters"
        ) == n),
        "lease_waiters never reached {n}"
    );
}

/// Waits for a background save / rewrite to finish (`field` is e.g.
/// `rdb_bgsave_in_progress` or `aof_rewrite_in_progress`).
pub fn wait_persistence_idle(c: &mut Connection) {
    let idle = eventually(Duration::from_secs(30), || {
        info_int(c, "persistence", "rdb_bgsave_in_progress") == 0
            && info_int(c, "persistence", "aof_rewrite_in_progress") == 0
            && info_int(c, "persistence", "aof_rewrite_scheduled") == 0
    });
    assert!(idle, "background save/rewrite did not finish");
}

/// A replica of `master`: a server started now, told `REPLICAOF 127.0.0.1 <port>` (which
/// connects at once, where `--replicaof` waits for the next replication cron tick).
pub fn start_replica(master: &Server) -> Server {
    let replica = start();
    replicate_from(&replica, master);
    replica
}

/// `REPLICAOF 127.0.0.1 <master's port>` on `replica`.
pub fn replicate_from(replica: &Server, master: &Server) {
    let ok: String = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(&mut conn(replica))
        .expect("REPLICAOF");
    assert_eq!(ok, "OK");
}

/// A replica started with `--replicaof 127.0.0.1 <port>` on its command line.
pub fn start_replica_by_config(master: &Server) -> Server {
    Server::with(opts().arg("replicaof", &format!("127.0.0.1 {}", master.port)))
}

/// Waits until `replica` is linked to `master` and has applied everything the master wrote.
pub fn sync(master: &Server, replica: &Server) {
    let mut m = conn(master);
    let mut r = conn(replica);
    let up = eventually(Duration::from_secs(20), || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    assert!(
        up,
        "replica never linked; replica log:\n{}\nmaster log:\n{}",
        replica.log(),
        master.log()
    );
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut m).unwrap();
    assert_eq!(acked, 1, "WAIT 1 5000 on the master");
    let same = eventually(Duration::from_secs(10), || {
        let mo = info_int(&mut m, "replication", "master_repl_offset");
        let ro = info_int(&mut r, "replication", "slave_repl_offset");
        mo == ro
    });
    assert!(same, "replica offset never caught up with the master");
}

/// Sends a signal to a server process (SIGSTOP / SIGCONT), by its pid.
pub fn signal(s: &Server, sig: &str) {
    let pid = s.pid().expect("server running");
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// Text of every file of the server's AOF directory (Redis 7 multi-part AOF), by file name.
pub fn aof_files(s: &Server) -> Vec<(String, Vec<u8>)> {
    let dir = s.dir().join("appendonlydir");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        out.push((name, std::fs::read(e.path()).unwrap()));
    }
    out.sort();
    out
}

/// The incremental AOF file the server appends to (from the manifest).
pub fn aof_incr_path(s: &Server) -> std::path::PathBuf {
    let dir = s.dir().join("appendonlydir");
    let manifest = std::fs::read_to_string(dir.join("appendonly.aof.manifest")).expect("manifest");
    let name = manifest
        .lines()
        .rev()
        .filter(|l| l.contains("type i"))
        .find_map(|l| l.split_whitespace().nth(1))
        .expect("an incr file in the manifest")
        .to_string();
    dir.join(name)
}

/// A command in RESP, as it would be appended to an AOF.
pub fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{}\r\n", a.len(), a).as_bytes());
    }
    out
}

/// Whether `hay` contains `needle`.
pub fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// A connection to database `db` of the server.
pub fn conn_db(s: &Server, db: i64) -> Connection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/{db}", s.port)).unwrap();
    let c = client.get_connection().expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    c
}

/// Like `spawn_wait`, on database `db`.
pub fn spawn_wait_db(
    s: &Server,
    db: i64,
    args: &[&str],
) -> JoinHandle<Result<Option<i64>, String>> {
    let mut c = conn_db(s, db);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    thread::spawn(move || {
        let mut cmd = redis::cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a);
        }
        cmd.query::<Option<i64>>(&mut c).map_err(|e| e.to_string())
    })
}

/// The commands of an AOF file in RESP form (an RDB preamble, if any, is skipped).
pub fn parse_aof(bytes: &[u8]) -> Vec<Vec<String>> {
    let mut cmds = Vec::new();
    let mut i = match bytes.iter().position(|&b| b == b'*') {
        Some(p) if !bytes.starts_with(b"REDIS") => p,
        _ => return cmds,
    };
    let line = |i: &mut usize| -> Option<String> {
        let end = bytes[*i..].windows(2).position(|w| w == b"\r\n")? + *i;
        let s = String::from_utf8_lossy(&bytes[*i..end]).into_owned();
        *i = end + 2;
        Some(s)
    };
    while i < bytes.len() {
        let Some(head) = line(&mut i) else { break };
        let Some(n) = head.strip_prefix('*').and_then(|n| n.parse::<usize>().ok()) else {
            break;
        };
        let mut cmd = Vec::with_capacity(n);
        for _ in 0..n {
            let Some(len) = line(&mut i)
                .and_then(|l| l.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()))
            else {
                return cmds;
            };
            if i + len + 2 > bytes.len() {
                return cmds;
            }
            cmd.push(String::from_utf8_lossy(&bytes[i..i + len]).into_owned());
            i += len + 2;
        }
        cmds.push(cmd);
    }
    cmds
}

/// Leases that lapse while the server is down.
pub const SHORT_TTL: u64 = 2000;

/// What `populate` made, to check after a restart.
pub struct Fixture {
    /// Keys whose every hold outlives the test: expected exactly as they were.
    pub locks: Vec<(&'static str, LockInfo)>,
    pub leaders: Vec<(&'static str, Option<Leader>)>,
    /// `lk:mixed` after its short reader lapsed: only the long reader is left.
    pub mixed_after: LockInfo,
    /// Keys whose only holds are short: nothing must be left of them.
    pub gone_locks: Vec<&'static str>,
    pub gone_leaders: Vec<&'static str>,
    /// When the short leases end.
    pub short_deadline: i64,
    /// The highest token or term handed out.
    pub max_token: i64,
    /// Holders left once the short leases lapsed.
    pub live_holders: i64,
    pub live_keys: i64,
}

/// Takes every kind of hold there is: shared readers (one reentrant), a downgraded writer, a
/// reentrant writer, a renewed lease, a key with a short and a long reader, short locks and
/// a short leader, an elected leader after a change of leader, a released key.
pub fn populate(c: &mut Connection) -> Fixture {
    populate_with(c, SHORT_TTL)
}

/// `populate` with short leases of `short_ttl` ms.
pub fn populate_with(c: &mut Connection, short_ttl: u64) -> Fixture {
    let t = rlock(c, "lk:shared", "r1", LONG_TTL).unwrap();
    let t2 = rlock(c, "lk:shared", "r2", LONG_TTL).unwrap();
    assert!(t2 > t);
    assert_eq!(rlock(c, "lk:shared", "r2", LONG_TTL), Some(t2), "reentrant");

    let tw = wlock(c, "lk:down", "w", LONG_TTL).unwrap();
    assert_eq!(rlock(c, "lk:down", "w", LONG_TTL), Some(tw), "downgrade");

    let tw2 = wlock(c, "lk:writer", "w2", LONG_TTL).unwrap();
    assert_eq!(
        wlock(c, "lk:writer", "w2", LONG_TTL),
        Some(tw2),
        "reentrant"
    );

    let tr = wlock(c, "lk:renewed", "rn", short_ttl).unwrap();
    assert_eq!(renew(c, "lk:renewed", "rn", LONG_TTL), Some(tr));

    rlock(c, "lk:mixed", "a", short_ttl).unwrap();
    rlock(c, "lk:mixed", "b", LONG_TTL).unwrap();

    let start = now_ms();
    wlock(c, "lk:short", "s", short_ttl).unwrap();
    rlock(c, "lk:short-r", "s1", short_ttl).unwrap();
    rlock(c, "lk:short-r", "s2", short_ttl).unwrap();

    wlock(c, "lk:gone", "g", LONG_TTL).unwrap();
    assert_eq!(unlock(c, "lk:gone", "g"), 1);

    let term1 = campaign(c, "el", "c1", LONG_TTL).unwrap();
    assert_eq!(resign(c, "el", "c1"), 1);
    let term2 = campaign(c, "el", "c2", LONG_TTL).unwrap();
    assert!(term2 > term1, "a new leader has a higher term");
    campaign(c, "el:short", "cs", short_ttl).unwrap();
    let short_deadline = now_ms().max(start) + short_ttl as i64;

    let mut mixed_after = lock_info(c, "lk:mixed");
    mixed_after.holders.retain(|h| h.owner == "b");
    mixed_after.mode = "read".into();
    let fx = Fixture {
        locks: ["lk:shared", "lk:down", "lk:writer", "lk:renewed"]
            .into_iter()
            .map(|k| (k, lock_info(c, k)))
            .collect(),
        leaders: vec![("el", leader(c, "el"))],
        mixed_after,
        gone_locks: vec!["lk:short", "lk:short-r", "lk:gone"],
        gone_leaders: vec!["el:short"],
        short_deadline,
        max_token: info_int(c, "lease", "lease_token_high_water"),
        // r1, r2, w, w2, rn, b, c2
        live_holders: 7,
        live_keys: 6,
    };
    assert_eq!(
        fx.locks[1].1.holders.len(),
        2,
        "downgraded writer: write + read"
    );
    assert_eq!(fx.locks[0].1.holder("r2", "read").unwrap().count, 2);
    assert_eq!(fx.locks[2].1.holder("w2", "write").unwrap().count, 2);
    assert_eq!(fx.leaders[0].1.as_ref().unwrap().term, term2);
    fx
}

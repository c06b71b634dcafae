//! Shared helpers for the module's integration tests: raw commands against a real
//! redis-server with the module loaded (testkit), reply decoding and bounded polling.

#![allow(dead_code, unused_imports)]

use std::collections::HashMap;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::{Cmd, ConnectionLike};
pub use redis::{Connection, Value};
pub use redis_lease_testkit::{Options, Server};

/// Runs a command and answers its raw reply (an error reply is `Value::ServerError`).
/// `r!(conn, "RWLOCK.RLOCK", "k", "owner", 1000)`.
#[macro_export]
macro_rules! r {
    ($c:expr, $name:expr $(, $a:expr)* $(,)?) => {{
        #[allow(unused_mut)]
        let mut cmd = redis::cmd($name);
        $( cmd.arg($a); )*
        use $crate::common::Exec as _;
        $c.exec_cmd(&cmd)
    }};
}

/// Sends a command without reading its reply (for requests that park in the server).
#[macro_export]
macro_rules! send {
    ($c:expr, $name:expr $(, $a:expr)* $(,)?) => {{
        #[allow(unused_mut)]
        let mut cmd = redis::cmd($name);
        $( cmd.arg($a); )*
        use $crate::common::Exec as _;
        $c.send_cmd(&cmd)
    }};
}

/// What `r!` and `send!` call (method syntax, so both a `Connection` and a `&mut Connection`
/// work).
pub trait Exec {
    fn exec_cmd(&mut self, cmd: &Cmd) -> Value;
    fn send_cmd(&mut self, cmd: &Cmd);
}

impl Exec for Connection {
    fn exec_cmd(&mut self, cmd: &Cmd) -> Value {
        self.req_packed_command(&cmd.get_packed_command())
            .unwrap_or_else(|e| panic!("I/O error: {e}"))
    }

    fn send_cmd(&mut self, cmd: &Cmd) {
        self.send_packed_command(&cmd.get_packed_command())
            .expect("send");
    }
}

/// The next reply on a connection that `send!` was used on.
pub fn recv(c: &mut Connection) -> Value {
    c.recv_response().expect("recv")
}

/// Runs an argument vector of raw bytes.
pub fn exec_args(c: &mut Connection, args: &[Vec<u8>]) -> redis::RedisResult<Value> {
    let mut cmd = Cmd::new();
    for a in args {
        cmd.arg(a.as_slice());
    }
    c.req_packed_command(&cmd.get_packed_command())
}

pub fn is_nil(v: &Value) -> bool {
    matches!(v, Value::Nil)
}

pub fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an integer: {v:?}")),
        other => panic!("not an integer: {other:?}"),
    }
}

/// An integer reply > 0 (a token or term).
pub fn token(v: &Value) -> i64 {
    let t = int(v);
    assert!(t >= 1, "token must be >= 1, got {t}");
    t
}

/// The text of an error reply ("CODE detail"); panics on anything else.
pub fn err(v: &Value) -> String {
    match v {
        Value::ServerError(e) => match e.details() {
            Some(d) => format!("{} {}", e.code(), d),
            None => e.code().to_string(),
        },
        other => panic!("expected an error reply, got {other:?}"),
    }
}

pub fn is_err(v: &Value) -> bool {
    matches!(v, Value::ServerError(_))
}

pub fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".into(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::Int(n) => n.to_string(),
        other => panic!("not a string: {other:?}"),
    }
}

pub fn array(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) | Value::Set(a) => a,
        other => panic!("not an array: {other:?}"),
    }
}

/// Field/value pairs of a map reply: a RESP3 map or a RESP2 flat array.
pub fn pairs(v: &Value) -> Vec<(String, Value)> {
    match v {
        Value::Map(m) => m.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        Value::Array(a) => {
            assert!(a.len() % 2 == 0, "odd-length map array: {a:?}");
            a.chunks(2).map(|c| (text(&c[0]), c[1].clone())).collect()
        }
        other => panic!("not a map: {other:?}"),
    }
}

fn field<'a>(p: &'a [(String, Value)], name: &str) -> &'a Value {
    &p.iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no field {name} in {p:?}"))
        .1
}

/// One entry of `RWLOCK.INFO`'s holders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub owner: String,
    pub mode: String,
    pub count: i64,
    pub ttl: i64,
    pub token: i64,
}

/// A decoded `RWLOCK.INFO` reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    pub mode: String,
    /// Sorted by (owner, mode).
    pub holders: Vec<Holder>,
    pub waiters: i64,
    pub token: i64,
}

/// `Info` without the ttls: (mode, [(owner, mode, count, token)], waiters, token).
pub type Shape = (String, Vec<(String, String, i64, i64)>, i64, i64);

impl Info {
    /// The state without the ttls (which run down by themselves).
    pub fn shape(&self) -> Shape {
        (
            self.mode.clone(),
            self.holders
                .iter()
                .map(|h| (h.owner.clone(), h.mode.clone(), h.count, h.token))
                .collect(),
            self.waiters,
            self.token,
        )
    }

    pub fn holder(&self, owner: &str, mode: &str) -> Option<&Holder> {
        self.holders
            .iter()
            .find(|h| h.owner == owner && h.mode == mode)
    }

    pub fn owners(&self) -> Vec<String> {
        let mut o: Vec<String> = self.holders.iter().map(|h| h.owner.clone()).collect();
        o.dedup();
        o
    }
}

pub fn parse_info(v: &Value) -> Info {
    let p = pairs(v);
    let mut holders: Vec<Holder> = array(field(&p, "holders"))
        .iter()
        .map(|h| {
            let hp = pairs(h);
            Holder {
                owner: text(field(&hp, "owner")),
                mode: text(field(&hp, "mode")),
                count: int(field(&hp, "count")),
                ttl: int(field(&hp, "ttl")),
                token: int(field(&hp, "token")),
            }
        })
        .collect();
    holders.sort_by(|a, b| (&a.owner, &a.mode).cmp(&(&b.owner, &b.mode)));
    Info {
        mode: text(field(&p, "mode")),
        holders,
        waiters: int(field(&p, "waiters")),
        token: int(field(&p, "token")),
    }
}

pub fn info(c: &mut Connection, key: &str) -> Info {
    let v = r!(c, "RWLOCK.INFO", key);
    parse_info(&v)
}

/// `INFO lease` as field -> value.
pub fn lease_info(c: &mut Connection) -> HashMap<String, String> {
    let v = r!(c, "INFO", "lease");
    text(&v)
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(':'))
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.to_string(), v.trim().to_string())
        })
        .collect()
}

pub fn client_id(c: &mut Connection) -> i64 {
    int(&r!(c, "CLIENT", "ID"))
}

pub fn exists(c: &mut Connection, key: &str) -> i64 {
    int(&r!(c, "EXISTS", key))
}

/// Polls `f` every 5 ms until it is true or `limit` passes; true if it became true.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if f() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        sleep(Duration::from_millis(5));
    }
}

/// Waits (up to 10 s) until `key` has exactly `n` waiters.
pub fn await_waiters(c: &mut Connection, key: &str, n: i64) {
    let mut last = -1;
    let ok = eventually(Duration::from_secs(10), || {
        last = info(c, key).waiters;
        last == n
    });
    assert!(ok, "{key}: expected {n} waiters, still {last}");
}

/// A connection with a read timeout, so a reply that never comes fails the test instead of
/// hanging it.
pub fn conn(s: &Server) -> Connection {
    let c = s.conn();
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    c
}

/// Whether the server process still runs (not exited, not a zombie).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("?");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

/// The p-th percentile (0..=100) of `v` (sorted in place).
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let idx = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[idx.min(v.len() - 1)]
}

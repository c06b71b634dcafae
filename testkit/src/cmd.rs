//! The module's commands as typed calls (a token or term as `Some`, nil as `None`; an error
//! reply panics with the command), plain key commands, and blocking requests on their own
//! thread.

use std::thread::{self, JoinHandle};

use redis::Connection;

use crate::r;
use crate::reply::int;
use crate::server::{conn, conn_db, Server};

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

/// `EXISTS key`: 1 or 0.
pub fn exists(c: &mut Connection, key: &str) -> i64 {
    int(&r!(c, "EXISTS", key))
}

pub fn dbsize(c: &mut Connection) -> i64 {
    int(&r!(c, "DBSIZE"))
}

pub fn client_id(c: &mut Connection) -> i64 {
    int(&r!(c, "CLIENT", "ID"))
}

/// A blocking request on its own thread and connection (e.g. `RWLOCK.WLOCK k o 5000 WAIT 5000`):
/// the reply (token, nil, or the error text) arrives through the handle.
pub fn spawn_wait(s: &Server, args: &[&str]) -> JoinHandle<Result<Option<i64>, String>> {
    spawn_on(conn(s), args)
}

/// Like `spawn_wait`, on database `db`.
pub fn spawn_wait_db(
    s: &Server,
    db: i64,
    args: &[&str],
) -> JoinHandle<Result<Option<i64>, String>> {
    spawn_on(conn_db(s, db), args)
}

fn spawn_on(mut c: Connection, args: &[&str]) -> JoinHandle<Result<Option<i64>, String>> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    thread::spawn(move || {
        let mut cmd = redis::cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a);
        }
        cmd.query::<Option<i64>>(&mut c).map_err(|e| e.to_string())
    })
}

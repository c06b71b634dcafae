//! A blocking request on its own thread whose reply arrives with the moment it arrived, so a
//! test can say when a waiter was served (at a lapse, not before a deadline) and whether it is
//! still waiting, and a missing reply fails the test after a bound instead of hanging it.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use redis::Connection;

use crate::server::{conn_db, Server};

/// A reply: a token, nil (`Ok(None)`), or the error ("CODE detail" for a server error).
pub type Reply = Result<Option<i64>, String>;

/// A request in flight.
pub struct Pending {
    what: String,
    rx: Receiver<(Reply, Instant)>,
    got: Option<(Reply, Instant)>,
}

/// Sends `args` on a new connection to db `db` of `s` from its own thread.
pub fn send_timed(s: &Server, db: i64, args: &[&str]) -> Pending {
    send_timed_on(conn_db(s, db), args)
}

/// Like `send_timed`, on a given connection.
pub fn send_timed_on(mut c: Connection, args: &[&str]) -> Pending {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let what = args.join(" ");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut cmd = redis::cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a);
        }
        let reply = cmd
            .query::<Option<i64>>(&mut c)
            .map_err(|e| match e.code() {
                // The server's own words: "LOCKGONE ...", "READONLY ...", "UNBLOCKED ...".
                Some(code) => format!("{code} {}", e.detail().unwrap_or_default()),
                None => e.to_string(),
            });
        let _ = tx.send((reply, Instant::now()));
    });
    Pending {
        what,
        rx,
        got: None,
    }
}

impl Pending {
    /// The reply and when it came; panics if none came within `limit`.
    pub fn wait(mut self, limit: Duration) -> (Reply, Instant) {
        if let Some(g) = self.got.take() {
            return g;
        }
        match self.rx.recv_timeout(limit) {
            Ok(g) => g,
            Err(RecvTimeoutError::Timeout) => {
                panic!("no reply to `{}` within {limit:?}", self.what)
            }
            Err(RecvTimeoutError::Disconnected) => panic!("`{}`: thread died", self.what),
        }
    }

    /// Whether a reply has come (keeps it for `wait`).
    pub fn answered(&mut self) -> bool {
        if self.got.is_none() {
            if let Ok(g) = self.rx.try_recv() {
                self.got = Some(g);
            }
        }
        self.got.is_some()
    }

    /// Panics with the reply if one came within `d`: the request must still be waiting.
    pub fn assert_waiting_for(&mut self, d: Duration, why: &str) {
        if self.got.is_none() {
            if let Ok(g) = self.rx.recv_timeout(d) {
                self.got = Some(g);
            }
        }
        if let Some((r, _)) = &self.got {
            panic!(
                "`{}` was answered {r:?} ({why}): it should still wait",
                self.what
            );
        }
    }
}

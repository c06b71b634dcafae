//! Many raw client connections at once (thousands of parked waiters), each a plain socket:
//! a redis-rs connection per waiter would be a thread per waiter.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::raw::resp;

/// Connections to one server, each with one command sent and its reply not yet read.
pub struct Crowd {
    conns: Vec<BufReader<TcpStream>>,
    /// A large crowd's turn on this machine (see [`Crowd::connect`]), held until it drops.
    _turn: Option<std::fs::File>,
}

/// From this many connections a crowd waits for its turn on the machine.
const LARGE: usize = 1_000;

/// Waits until no other process on this machine runs a large crowd: suites run side by side
/// (make test's parallel binaries, test-redis8 beside test-valkey) would otherwise open tens
/// of thousands of sockets at once, and a loaded machine answers them too late.
fn turn() -> std::fs::File {
    let path = std::env::temp_dir().join("redis-lease-testkit-crowd.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
    f
}

impl Crowd {
    /// `n` connections to `127.0.0.1:port` (nothing sent yet). A crowd of a thousand or more
    /// first waits for its turn on the machine (one large crowd at a time, across processes).
    pub fn connect(port: u16, n: usize) -> Crowd {
        let turn = (n >= LARGE).then(turn);
        let conns = (0..n)
            .map(|i| {
                let s = TcpStream::connect(("127.0.0.1", port))
                    .unwrap_or_else(|e| panic!("connection {i} of {n}: {e}"));
                s.set_nodelay(true).unwrap();
                BufReader::new(s)
            })
            .collect();
        Crowd { conns, _turn: turn }
    }

    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Sends connection i the command `args(i)`.
    pub fn send_each(&mut self, args: impl Fn(usize) -> Vec<String>) {
        for (i, c) in self.conns.iter_mut().enumerate() {
            let a = args(i);
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            c.get_mut()
                .write_all(&resp(&a))
                .unwrap_or_else(|e| panic!("send to connection {i}: {e}"));
        }
    }

    /// The first line of each connection's next reply ("$-1" nil, ":7" a token, "-ERR ..."),
    /// each read within what is left of `limit` (a missing reply fails the test).
    pub fn first_lines(&mut self, limit: Duration) -> Vec<String> {
        let end = Instant::now() + limit;
        let mut out = Vec::with_capacity(self.conns.len());
        for (i, c) in self.conns.iter_mut().enumerate() {
            let left = end
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            c.get_ref().set_read_timeout(Some(left)).unwrap();
            let mut line = String::new();
            match c.read_line(&mut line) {
                Ok(0) => panic!("connection {i}: closed with no reply"),
                Ok(_) => out.push(line.trim_end().to_string()),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    panic!("connection {i}: no reply within {limit:?}")
                }
                Err(e) => panic!("connection {i}: {e}"),
            }
        }
        out
    }

    /// Closes every connection.
    pub fn close(self) {
        drop(self.conns);
    }
}

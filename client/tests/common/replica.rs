//! Replicas and frozen processes for replication tests (candidates for the shared test kit).

use std::time::{Duration, Instant};

use redis_lease_testkit::{Options, Server};

/// A replica of `master` (with the module), once the master counts it as online.
pub fn replica_of(master: &Server) -> Server {
    let r =
        Server::with(Options::default().arg("replicaof", &format!("127.0.0.1 {}", master.port)));
    wait_replicas(master, 1);
    r
}

/// Waits until `master` has `n` online replicas that acknowledge its writes.
pub fn wait_replicas(master: &Server, n: i64) {
    let mut c = master.conn();
    let start = Instant::now();
    loop {
        // A write of this connection's own, so that WAIT needs a real acknowledgement.
        let _: () = redis::cmd("SET")
            .arg("test:sync")
            .arg(1)
            .query(&mut c)
            .unwrap();
        let acked: i64 = redis::cmd("WAIT").arg(n).arg(200).query(&mut c).unwrap();
        if acked >= n {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{acked} of {n} replicas in sync after 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A process stopped with SIGSTOP (a frozen replica: connected, but acknowledging nothing);
/// continued when dropped.
pub struct Frozen(libc::pid_t);

pub fn freeze(s: &Server) -> Frozen {
    let pid = s.pid().expect("running") as libc::pid_t;
    // SAFETY: signals a process this test started, by its pid.
    unsafe {
        libc::kill(pid, libc::SIGSTOP);
    }
    Frozen(pid)
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe {
            libc::kill(self.0, libc::SIGCONT);
        }
    }
}

/// The owners holding `key` on `s`, from RWLOCK.INFO (with their tokens).
pub fn holders(s: &Server, key: &str) -> Vec<(String, u64)> {
    let mut c = s.conn();
    let v: redis::Value = redis::cmd("RWLOCK.INFO").arg(key).query(&mut c).unwrap();
    let fields = as_pairs(v);
    let mut out = Vec::new();
    for (k, v) in fields {
        if k == "holders" {
            if let redis::Value::Array(hs) = v {
                for h in hs {
                    let mut owner = String::new();
                    let mut token = 0;
                    for (hk, hv) in as_pairs(h) {
                        match (hk.as_str(), hv) {
                            ("owner", redis::Value::BulkString(b)) => {
                                owner = String::from_utf8_lossy(&b).into_owned()
                            }
                            ("token", redis::Value::Int(t)) => token = t as u64,
                            _ => {}
                        }
                    }
                    out.push((owner, token));
                }
            }
        }
    }
    out
}

fn as_pairs(v: redis::Value) -> Vec<(String, redis::Value)> {
    match v {
        redis::Value::Array(items) => {
            let mut it = items.into_iter();
            let mut out = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                if let redis::Value::BulkString(k) = k {
                    out.push((String::from_utf8_lossy(&k).into_owned(), v));
                }
            }
            out
        }
        redis::Value::Map(pairs) => pairs
            .into_iter()
            .filter_map(|(k, v)| match k {
                redis::Value::BulkString(k) => Some((String::from_utf8_lossy(&k).into_owned(), v)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// `LEADER.CURRENT key` on `s`: the leader's candidate id.
pub fn leader_on(s: &Server, key: &str) -> Option<String> {
    let mut c = s.conn();
    match redis::cmd("LEADER.CURRENT").arg(key).query(&mut c).unwrap() {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        },
        _ => None,
    }
}

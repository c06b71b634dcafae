//! Replication set-ups: a replica of a server, and waiting until it has applied everything.

use std::time::Duration;

use crate::info::{info_field, info_int};
use crate::poll::eventually;
use crate::server::{conn, debug_opts, debug_server, Server};

/// A replica of `master`: a server started now, told `REPLICAOF 127.0.0.1 <port>` (which
/// connects at once, where `--replicaof` waits for the next replication cron tick).
pub fn start_replica(master: &Server) -> Server {
    let replica = debug_server();
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
    Server::with(debug_opts().arg("replicaof", &format!("127.0.0.1 {}", master.port)))
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

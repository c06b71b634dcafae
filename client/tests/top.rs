//! `redis-lease top` (on a real pty, and as one text frame) and `redis-lease status`, against
//! real servers and a real Cluster.

mod common;

use std::process::Command;
use std::time::Duration;

use common::pty;
use redis_lease_testkit::cluster::Cluster;
use redis_lease_testkit::{Options, Server};

const BIN: &str = env!("CARGO_BIN_EXE_redis-lease");

fn cmd(c: &mut redis::Connection, args: &[&str]) -> redis::Value {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c).unwrap()
}

/// A blocking request on its own connection, left waiting.
fn park(s: &Server, args: &[&str]) {
    let mut c = s.conn();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    std::thread::spawn(move || {
        let mut cmd = redis::cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a);
        }
        let _: redis::RedisResult<redis::Value> = cmd.query(&mut c);
    });
}

fn waiters(s: &Server, n: usize) {
    let mut c = s.conn();
    let ok = redis_lease_testkit::poll::eventually(Duration::from_secs(10), || {
        let info: String = redis::cmd("INFO").arg("lease").query(&mut c).unwrap();
        info.contains(&format!("lease_waiters:{n}\r"))
    });
    assert!(ok, "lease_waiters never reached {n}");
}

/// A server with keyspace events on (for per-key grants/s), a held lock with two waiters, a
/// leader with one, a semaphore.
fn busy_server() -> Server {
    let s = Server::with(Options::default().arg("notify-keyspace-events", "Kd"));
    let mut c = s.conn();
    cmd(&mut c, &["RWLOCK.WLOCK", "orders", "worker-7f3a", "60000"]);
    park(
        &s,
        &[
            "RWLOCK.WLOCK",
            "orders",
            "worker-2c91",
            "10000",
            "WAIT",
            "30000",
        ],
    );
    waiters(&s, 1);
    park(
        &s,
        &["RWLOCK.RLOCK", "orders", "report-1", "10000", "WAIT", "0"],
    );
    waiters(&s, 2);
    cmd(&mut c, &["LEADER.CAMPAIGN", "scheduler", "node-a", "60000"]);
    park(
        &s,
        &[
            "LEADER.CAMPAIGN",
            "scheduler",
            "node-b",
            "60000",
            "WAIT",
            "20000",
        ],
    );
    waiters(&s, 3);
    cmd(
        &mut c,
        &[
            "SEMAPHORE.ACQUIRE",
            "api-quota",
            "svc-1",
            "3",
            "60000",
            "PERMITS",
            "2",
        ],
    );
    s
}

#[test]
fn status_prints_holders_and_the_queue_in_order() {
    let s = busy_server();
    let out = Command::new(BIN)
        .args(["--url", &s.url(), "status", "orders"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "key: orders");
    assert_eq!(lines[1], "type: lock");
    assert!(text.contains("worker-7f3a\twrite\tcount=1"), "{text}");
    assert!(text.contains("waiters: 2"), "{text}");
    let first = lines
        .iter()
        .position(|l| l.contains("1. worker-2c91\twrite"))
        .unwrap();
    assert!(lines[first + 1].contains("2. report-1\tread"), "{text}");
    assert!(lines[first + 1].ends_with("left=-"), "WAIT 0: {text}");
    let out = Command::new(BIN)
        .args(["--url", &s.url(), "status", "scheduler"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("type: election") && text.contains("leader: node-a"),
        "{text}"
    );
    assert!(text.contains("1. node-b\t"), "{text}");
    let out = Command::new(BIN)
        .args(["--url", &s.url(), "status", "api-quota"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("type: semaphore") && text.contains("svc-1\tpermits=2"),
        "{text}"
    );
    assert!(text.contains("waiters: 0"), "{text}");
}

#[test]
fn top_once_prints_a_frame_with_keys_figures_and_the_histogram() {
    let s = busy_server();
    let mut c = s.conn();
    for i in 0..3 {
        let owner = format!("w{i}");
        cmd(
            &mut c,
            &["RWLOCK.WLOCK", "orders", &owner, "1000", "WAIT", "20"],
        );
    }
    let out = Command::new(BIN)
        .args(["--url", &s.url(), "top", "--once", "100x30"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert_eq!(text.lines().count(), 30, "{text}");
    assert!(text.contains("1 server"), "{text}");
    assert!(text.contains("keys 3  holders 3  waiters 3"), "{text}");
    assert!(text.contains("timeouts 3"), "{text}");
    let orders = text.lines().find(|l| l.contains("orders")).unwrap();
    assert!(
        orders.contains("lock") && orders.contains("worker-7f3a"),
        "{orders}"
    );
    // Busiest first: orders (2 waiters), then scheduler (1), then api-quota.
    let at = |k: &str| text.find(k).unwrap();
    assert!(at("orders") < at("scheduler") && at("scheduler") < at("api-quota"));
    assert!(text.contains("≤100ms") && text.contains(">10s"), "{text}");
    let bad = Command::new(BIN)
        .args(["--url", &s.url(), "top", "--once", "wide"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(64), "a usage error (EX_USAGE)");
}

/// What a 100x30 terminal shows after everything `term` received.
fn screen(term: &pty::Pty) -> String {
    let mut p = vt100::Parser::new(30, 100, 0);
    p.process(term.seen().as_bytes());
    p.screen().contents()
}

/// Waits until the screen shows a line for which `f` holds.
fn shows(term: &mut pty::Pty, limit: Duration, f: impl Fn(&str) -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if screen(term).lines().any(&f) {
            return true;
        }
        term.wait_for("\u{0}never", Duration::from_millis(100));
    }
    false
}

#[test]
fn top_runs_live_on_a_pty_shows_grants_and_quits_on_q() {
    let s = busy_server();
    let script = format!("stty cols 100 rows 30; exec {BIN} --url {} top", s.url());
    let mut c = Command::new("sh");
    c.args(["-c", &script]);
    let mut term = pty::Pty::spawn(c);
    let limit = Duration::from_secs(15);
    assert!(
        shows(&mut term, limit, |l| l.contains("busiest keys (3 of 3)")),
        "{}",
        screen(&term)
    );
    assert!(
        shows(&mut term, limit, |l| l.contains("orders")
            && l.contains("worker-7f3a")),
        "{}",
        screen(&term)
    );
    // Grants on a key show up as its grants/s, and the whole server's, at a later refresh.
    let mut rc = s.conn();
    for i in 0..20 {
        let owner = format!("h{i}");
        let t = cmd(
            &mut rc,
            &["SEMAPHORE.ACQUIRE", "api-quota", &owner, "3", "60000"],
        );
        assert!(matches!(t, redis::Value::Int(_)), "{t:?}");
        cmd(&mut rc, &["SEMAPHORE.RELEASE", "api-quota", &owner]);
    }
    let rate = |l: &str| {
        l.contains("api-quota")
            && l.split_whitespace()
                .filter_map(|w| w.parse::<f64>().ok())
                .any(|g| g >= 5.0)
    };
    assert!(shows(&mut term, limit, rate), "{}", screen(&term));
    println!("{}", screen(&term));
    term.send(b"q");
    let st = term
        .wait(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("q did not end it: {}", screen(&term)));
    assert!(st.success(), "{st:?}");
    assert!(
        term.wait_for("\x1b[?1049l", Duration::from_secs(2)),
        "the screen is restored"
    );
}

#[test]
fn top_shows_every_master_of_a_cluster() {
    let cluster = Cluster::start();
    // One key on each of the 3 masters.
    let mut keys: Vec<String> = Vec::new();
    let mut ports = Vec::new();
    for i in 0..200 {
        let key = format!("lock-{i}");
        let owner = cluster.owner_of(&key);
        if ports.contains(&owner.port) {
            continue;
        }
        let mut c = cluster.node(owner.port).conn();
        cmd(&mut c, &["RWLOCK.WLOCK", &key, "o", "60000"]);
        ports.push(owner.port);
        keys.push(key);
        if keys.len() == 3 {
            break;
        }
    }
    assert_eq!(keys.len(), 3);
    let out = Command::new(BIN)
        .args(["--url", &cluster.urls()[0], "top", "--once", "100x30"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("3 servers"), "{text}");
    assert!(text.contains("keys 3  holders 3"), "{text}");
    for k in &keys {
        assert!(text.contains(k.as_str()), "{k}: {text}");
    }
}

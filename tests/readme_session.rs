//! The README's "A session" pastes into `redis-cli` as written (issue 21, item 7): each of its
//! code blocks, read from README.md itself, is piped into a real `redis-cli` against a server
//! with the module, the waiting writer's block in a second `redis-cli` started beside the
//! first, and every reply is what the README's text says it is, in the form a terminal shows
//! it (`--no-raw`: `(integer) ...`, `(nil)`, `(error) ...`).

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis_lease_testkit::prelude::*;

/// The code blocks of the README's "## A session" section, in order.
fn session_blocks() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let text = std::fs::read_to_string(&path).expect("README.md");
    let section = text
        .split("\n## A session\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("README.md has a section \"A session\"");
    section
        .split("```")
        .skip(1)
        .step_by(2)
        .map(|b| b.trim_start_matches('\n').to_owned())
        .collect()
}

/// `redis-cli -p port` reading `input` as typed or pasted (stdin), started now.
fn redis_cli(port: u16, input: &str) -> Child {
    let mut child = Command::new("redis-cli")
        .args(["--no-raw", "-p", &port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("redis-cli (Debian's redis-tools)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write to redis-cli");
    child
}

/// The lines `child` printed, once it ended (within `limit`).
fn lines_of(child: Child, limit: Duration) -> Vec<String> {
    let start = Instant::now();
    let pid = child.id();
    let out = std::thread::spawn(move || child.wait_with_output().expect("redis-cli"));
    while !out.is_finished() {
        assert!(
            start.elapsed() < limit,
            "redis-cli (pid {pid}) still runs after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = out.join().expect("redis-cli output");
    assert!(
        out.stderr.is_empty(),
        "redis-cli wrote to stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Runs `input` in a `redis-cli` of its own and answers what it printed.
fn paste(port: u16, input: &str) -> Vec<String> {
    lines_of(redis_cli(port, input), Duration::from_secs(10))
}

/// The integer of a line `(integer) N`.
fn token(line: &str) -> u64 {
    line.strip_prefix("(integer) ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("expected an integer reply, got {line:?}"))
}

const NIL: &str = "(nil)";

#[test]
fn the_readme_session_pastes_into_redis_cli_as_written() {
    let blocks = session_blocks();
    assert_eq!(blocks.len(), 6, "the session's blocks: {blocks:#?}");
    let s = Server::start();
    // Two readers share the lock; the writer is refused: two tokens, then nil.
    let first = paste(s.port, &blocks[0]);
    assert_eq!(first.len(), 3, "{first:?}");
    let (a, b) = (token(&first[0]), token(&first[1]));
    assert!(a > 0 && b > a, "{first:?}");
    assert_eq!(first[2], NIL, "the writer is refused: {first:?}");
    // The waiting writer, in a second redis-cli: parked until the readers let go.
    let waiting = redis_cli(s.port, &blocks[1]);
    let mut c = conn(&s);
    let parked = eventually(Duration::from_secs(5), || {
        let info: String = redis::cmd("INFO").arg("lease").query(&mut c).unwrap();
        info.contains("lease_waiters:1")
    });
    assert!(parked, "the second redis-cli's WLOCK ... WAIT did not park");
    let unlocks = paste(s.port, &blocks[2]);
    assert_eq!(unlocks, ["(integer) 1"; 2], "the readers let go");
    let writer = lines_of(waiting, Duration::from_secs(5));
    assert_eq!(writer.len(), 1, "{writer:?}");
    assert!(
        token(&writer[0]) > b,
        "the writer's token follows the readers': {writer:?}"
    );
    // Then, in either: the writer lets go (nothing left), an election, a semaphore.
    let rest = paste(s.port, &blocks[3]);
    assert_eq!(rest.len(), 10, "{rest:?}");
    assert_eq!(rest[0], "(integer) 1", "UNLOCK: {rest:?}");
    assert_eq!(
        rest[1], "(integer) 0",
        "EXISTS report: nothing left: {rest:?}"
    );
    let term = token(&rest[2]);
    assert_eq!(rest[3], NIL, "node-2 is refused: {rest:?}");
    // LEADER.CURRENT: the leader, its term and the ms left of its lease.
    assert_eq!(rest[4], "1) \"node-1\"", "{rest:?}");
    assert_eq!(
        rest[5],
        format!("2) (integer) {term}"),
        "the term is the grant's token"
    );
    let left: u64 = rest[6]
        .strip_prefix("3) (integer) ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("ms left: {rest:?}"));
    assert!((1..=5000).contains(&left), "ms left: {rest:?}");
    token(&rest[7]);
    assert_eq!(rest[8], NIL, "worker-2's 2 permits are refused: {rest:?}");
    token(&rest[9]);
    // The fenced write: a token that is not the live hold's runs nothing.
    let fence = paste(s.port, &blocks[4]);
    assert_eq!(fence.len(), 3, "{fence:?}");
    let live = token(&fence[0]);
    assert!(
        fence[1].starts_with("(error) FENCED token 1 is not live on this key"),
        "{fence:?}"
    );
    assert_eq!(
        fence[2], NIL,
        "GET: the fenced write ran nothing: {fence:?}"
    );
    // The live token, typed in place of TOKEN: the write runs within the 2 s lease.
    assert!(blocks[5].contains("TOKEN"), "{:?}", blocks[5]);
    let typed = blocks[5].replace("TOKEN", &live.to_string());
    assert_eq!(paste(s.port, &typed), ["OK"]);
    let status: Option<String> = redis::cmd("GET")
        .arg("order:42:status")
        .query(&mut c)
        .unwrap();
    assert_eq!(status.as_deref(), Some("shipped"));
    // And refused once it has lapsed.
    std::thread::sleep(Duration::from_millis(2300));
    let late = paste(s.port, &typed);
    assert_eq!(late.len(), 1, "{late:?}");
    assert!(
        late[0].starts_with("(error) FENCED token") && late[0].contains("the key holds nothing"),
        "{late:?}"
    );
}

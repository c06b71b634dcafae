//! LEASE.EXEC: a command runs only while the hold with the given token is live (an RWLOCK's
//! write hold, a LEADER's term, any SEMAPHORE hold), atomically with the check, as the calling
//! user; otherwise the reply starts with FENCED and nothing runs. docs/COMMANDS.md, LEASE.EXEC.

use std::process::{Command, Stdio};
use std::time::Duration;

use redis_lease_testkit::prelude::*;

const LONG: i64 = 60_000;

fn start() -> (Server, Connection) {
    let s = debug_server();
    let c = conn(&s);
    (s, c)
}

fn fenced(v: &Value) -> bool {
    matches!(v, Value::ServerError(_)) && err(v).starts_with("FENCED")
}

#[test]
fn a_command_runs_only_while_the_write_hold_is_live() {
    let (_s, mut c) = start();
    let t = token(&r!(c, "RWLOCK.WLOCK", "lk", "a", LONG));
    assert_eq!(
        text(&r!(c, "LEASE.EXEC", "lk", t, "SET", "data", "v1")),
        "OK"
    );
    assert_eq!(int(&r!(c, "LEASE.EXEC", "lk", t, "INCR", "n")), 1);
    assert_eq!(text(&r!(c, "GET", "data")), "v1");
    // Another token of this key, or a made-up one: FENCED, nothing runs.
    for bad in [t - 1, t + 1, 1] {
        assert!(fenced(&r!(c, "LEASE.EXEC", "lk", bad, "SET", "data", "x")));
    }
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "lk", "a")), 1);
    assert!(fenced(&r!(c, "LEASE.EXEC", "lk", t, "SET", "data", "v2")));
    assert_eq!(text(&r!(c, "GET", "data")), "v1");
    // A read hold's token does not fence writes; a reader may not write through it.
    let r = token(&r!(c, "RWLOCK.RLOCK", "rk", "r", LONG));
    let e = err(&r!(c, "LEASE.EXEC", "rk", r, "SET", "data", "x"));
    assert!(e.starts_with("FENCED") && e.contains("read hold"), "{e}");
    // A downgraded writer's token is its write hold's: it fences while the write hold lasts.
    let w = token(&r!(c, "RWLOCK.WLOCK", "dk", "w", LONG));
    assert_eq!(token(&r!(c, "RWLOCK.RLOCK", "dk", "w", LONG)), w);
    assert_eq!(text(&r!(c, "LEASE.EXEC", "dk", w, "SET", "d", "1")), "OK");
    assert_eq!(
        int(&r!(c, "RWLOCK.UNLOCK", "dk", "w")),
        1,
        "releases the write hold"
    );
    assert!(fenced(&r!(c, "LEASE.EXEC", "dk", w, "SET", "d", "2")));
    assert_eq!(text(&r!(c, "GET", "d")), "1");
    // The reply is the command's own, of any shape.
    token(&r!(c, "RWLOCK.WLOCK", "lk", "a", LONG));
    let t = lock_info(&mut c, "lk").token;
    r!(c, "RPUSH", "list", "x", "y");
    let v = r!(c, "LEASE.EXEC", "lk", t, "LRANGE", "list", 0, -1);
    assert_eq!(array(&v).iter().map(text).collect::<Vec<_>>(), ["x", "y"]);
    assert!(is_nil(&r!(c, "LEASE.EXEC", "lk", t, "GET", "nothing")));
    // Errors of the command come back as they are.
    assert!(err(&r!(c, "LEASE.EXEC", "lk", t, "INCR", "data")).contains("not an integer"));
}

#[test]
fn elections_and_semaphores_fence_too() {
    let (_s, mut c) = start();
    let term = token(&r!(c, "LEADER.CAMPAIGN", "el", "a", LONG));
    assert_eq!(int(&r!(c, "LEASE.EXEC", "el", term, "INCR", "n")), 1);
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "el", "a")), 1);
    let next = token(&r!(c, "LEADER.CAMPAIGN", "el", "b", LONG));
    assert!(
        fenced(&r!(c, "LEASE.EXEC", "el", term, "INCR", "n")),
        "an old term"
    );
    assert_eq!(int(&r!(c, "LEASE.EXEC", "el", next, "INCR", "n")), 2);
    // Any hold of a semaphore.
    let s1 = token(&r!(c, "SEMAPHORE.ACQUIRE", "sem", "x", 2, LONG));
    let s2 = token(&r!(c, "SEMAPHORE.ACQUIRE", "sem", "y", 2, LONG));
    assert_eq!(int(&r!(c, "LEASE.EXEC", "sem", s1, "INCR", "n")), 3);
    assert_eq!(int(&r!(c, "LEASE.EXEC", "sem", s2, "INCR", "n")), 4);
    assert_eq!(int(&r!(c, "SEMAPHORE.RELEASE", "sem", "x")), 1);
    assert!(fenced(&r!(c, "LEASE.EXEC", "sem", s1, "INCR", "n")));
    assert_eq!(text(&r!(c, "GET", "n")), "4");
    // A missing key holds nothing; another type's key is WRONGTYPE.
    assert!(fenced(&r!(c, "LEASE.EXEC", "missing", 1, "INCR", "n")));
    r!(c, "SET", "str", "v");
    assert!(err(&r!(c, "LEASE.EXEC", "str", 1, "INCR", "n")).starts_with("WRONGTYPE"));
    // Bad tokens are bad input.
    for bad in ["0", "-1", "x", ""] {
        assert!(err(&r!(c, "LEASE.EXEC", "el", bad, "INCR", "n")).contains("token"));
    }
    assert_eq!(text(&r!(c, "GET", "n")), "4");
}

#[test]
fn a_holder_whose_lease_ran_out_cannot_overwrite_the_next_holders_write() {
    let (s, mut c) = start();
    let ta = token(&r!(c, "RWLOCK.WLOCK", "lk", "a", 400));
    // B waits for the lock; A stops renewing (it is frozen: a real process, SIGSTOPped with
    // its fenced write already typed, see below).
    let b = spawn_wait(&s, &["RWLOCK.WLOCK", "lk", "b", "60000", "WAIT", "10000"]);
    let frozen = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "sleep 0.2; redis-cli -p {} LEASE.EXEC lk {ta} SET data from-a",
            s.port
        ))
        .stdout(Stdio::piped())
        .spawn()
        .expect("sh");
    let pid = frozen.id();
    let stop = Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status();
    assert!(stop.unwrap().success());
    let tb = b
        .join()
        .unwrap()
        .unwrap()
        .expect("b is handed the lock at a's lapse");
    assert!(tb > ta);
    assert_eq!(
        text(&r!(c, "LEASE.EXEC", "lk", tb, "SET", "data", "from-b")),
        "OK"
    );
    // A wakes up and writes, believing it still holds.
    let cont = Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status();
    assert!(cont.unwrap().success());
    let out = frozen.wait_with_output().expect("the frozen writer ends");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("FENCED"), "a's late write: {said}");
    assert_eq!(text(&r!(c, "GET", "data")), "from-b");
}

#[test]
fn the_commands_a_fenced_write_may_not_run_are_refused_and_run_nothing() {
    let (_s, mut c) = start();
    let t = token(&r!(c, "RWLOCK.WLOCK", "lk", "a", LONG));
    for cmd in [
        vec!["BLPOP", "q", "0"],
        vec!["BRPOPLPUSH", "q", "q2", "0"],
        vec!["WAIT", "1", "0"],
        vec!["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        vec!["MULTI"],
        vec!["EXEC"],
        vec!["EVAL", "return redis.call('SET','data','x')", "0"],
        vec!["RWLOCK.UNLOCK", "lk", "a"],
        vec!["LEASE.EXEC", "lk", "1", "SET", "data", "x"],
        vec!["SEMAPHORE.ACQUIRE", "s", "o", "1", "1000"],
    ] {
        let mut args: Vec<Vec<u8>> = vec![b"LEASE.EXEC".to_vec(), b"lk".to_vec()];
        args.push(t.to_string().into_bytes());
        args.extend(cmd.iter().map(|a| a.as_bytes().to_vec()));
        let v = exec_args(&mut c, &args).expect("io");
        assert!(is_err(&v), "{cmd:?} ran: {v:?}");
    }
    assert_eq!(exists(&mut c, "data"), 0);
    assert_eq!(exists(&mut c, "s"), 0);
    assert_eq!(
        lock_info(&mut c, "lk").holder("a", "write").unwrap().count,
        1
    );
    // Unknown commands and wrong arity are errors too.
    assert!(is_err(&r!(c, "LEASE.EXEC", "lk", t, "NOSUCHCOMMAND")));
    assert!(is_err(&r!(c, "LEASE.EXEC", "lk", t, "GET")));
}

#[test]
fn the_command_runs_as_the_calling_user() {
    let (s, mut c) = start();
    assert_eq!(
        text(&r!(
            c, "ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-set"
        )),
        "OK"
    );
    let mut app = conn(&s);
    assert_eq!(text(&r!(app, "AUTH", "app", "pw")), "OK");
    let t = token(&r!(app, "RWLOCK.WLOCK", "lk", "a", LONG));
    let e = err(&r!(app, "LEASE.EXEC", "lk", t, "SET", "data", "x"));
    assert!(
        !e.starts_with("FENCED"),
        "an ACL refusal is not a fence: {e}"
    );
    assert!(
        e.contains("acl") || e.contains("NOPERM") || e.contains("permission"),
        "{e}"
    );
    assert_eq!(exists(&mut c, "data"), 0);
    assert_eq!(int(&r!(app, "LEASE.EXEC", "lk", t, "INCR", "n")), 1);
    // Key patterns apply to the inner command's keys.
    r!(c, "ACL", "SETUSER", "narrow", "on", ">pw", "~mine:*", "+@all");
    let mut narrow = conn(&s);
    assert_eq!(text(&r!(narrow, "AUTH", "narrow", "pw")), "OK");
    let t = token(&r!(narrow, "RWLOCK.WLOCK", "mine:lk", "n", LONG));
    assert!(is_err(&r!(
        narrow,
        "LEASE.EXEC",
        "mine:lk",
        t,
        "SET",
        "other",
        "x"
    )));
    assert_eq!(exists(&mut c, "other"), 0);
    assert_eq!(
        text(&r!(
            narrow,
            "LEASE.EXEC",
            "mine:lk",
            t,
            "SET",
            "mine:x",
            "1"
        )),
        "OK"
    );
}

#[test]
fn the_commands_effects_replicate_and_reach_the_aof() {
    let master = Server::with(debug_opts().arg("appendonly", "yes"));
    let replica = start_replica(&master);
    sync(&master, &replica);
    let mut m = conn(&master);
    // The first AOF rewrite (made at start, put off while the replica's sync saved) is over
    // before the writes, so they are in the incremental file, not in a new base.
    wait_persistence_idle(&mut m);
    let t = token(&r!(m, "RWLOCK.WLOCK", "lk", "a", LONG));
    assert_eq!(
        text(&r!(m, "LEASE.EXEC", "lk", t, "SET", "data", "v")),
        "OK"
    );
    assert_eq!(int(&r!(m, "LEASE.EXEC", "lk", t, "INCR", "n")), 1);
    sync(&master, &replica);
    let mut r = conn(&replica);
    assert_eq!(text(&r!(r, "GET", "data")), "v");
    assert_eq!(text(&r!(r, "GET", "n")), "1");
    // A replica refuses it (it is a write; the master decides).
    assert!(is_err(&r!(r, "LEASE.EXEC", "lk", t, "SET", "data", "w")));
    // The AOF holds the command, not LEASE.EXEC (a replay must not check a clock).
    wait_persistence_idle(&mut m);
    // A write to the AOF may be put off while an fsync runs (appendfsync everysec): look
    // again for a moment.
    let mut cmds = Vec::new();
    let written = eventually(Duration::from_secs(5), || {
        cmds = parse_aof(&std::fs::read(aof_incr_path(&master)).unwrap());
        cmds.iter()
            .any(|c| c[0].eq_ignore_ascii_case("SET") && c[1] == "data")
    });
    assert!(written, "no SET data in the AOF: {cmds:?}");
    assert!(
        cmds.iter()
            .all(|c| !c[0].eq_ignore_ascii_case("LEASE.EXEC")),
        "{cmds:?}"
    );
}

#[test]
fn a_grant_the_new_master_never_saw_fences_nothing_there() {
    let old = debug_server();
    // The new master quarantines itself after its promotion: its first token is then above
    // any the old master issued before the promotion plus the quarantine. (Without it, two
    // masters of a split brain may issue the same token in the same millisecond.)
    let promoted = Server::with(debug_opts().module_arg("quarantine", "500"));
    replicate_from(&promoted, &old);
    sync(&old, &promoted);
    // A partition: the replica is promoted while the old master still takes requests.
    let mut r = conn(&promoted);
    assert_eq!(text(&r!(r, "REPLICAOF", "NO", "ONE")), "OK");
    let mut m = conn(&old);
    let t = token(&r!(m, "RWLOCK.WLOCK", "lk", "a", 400));
    assert_eq!(
        text(&r!(m, "LEASE.EXEC", "lk", t, "SET", "data", "old")),
        "OK"
    );
    // The holder's fenced write on the new master does nothing.
    assert!(fenced(&r!(
        r,
        "LEASE.EXEC",
        "lk",
        t,
        "SET",
        "data",
        "stale"
    )));
    assert_eq!(exists(&mut r, "data"), 0);
    let t2 = token(&r!(r, "RWLOCK.WLOCK", "lk", "b", 400, "WAIT", 5000));
    assert!(
        t2 > t,
        "the new master's token {t2} is above the old master's {t}"
    );
    let v = r!(r, "LEASE.EXEC", "lk", t2, "SET", "data", "new");
    assert_eq!(text(&v), "OK");
    assert!(fenced(&r!(
        r,
        "LEASE.EXEC",
        "lk",
        t,
        "SET",
        "data",
        "stale"
    )));
    assert_eq!(text(&r!(r, "GET", "data")), "new");
}

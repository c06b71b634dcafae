//! The `redis-lease` binary against a real redis-server with the module.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::pty;
use common::*;
use redis_lease_testkit::Server;

const BIN: &str = env!("CARGO_BIN_EXE_redis-lease");

fn cli(s: &Server) -> Command {
    let mut c = Command::new(BIN);
    c.env("REDIS_URL", s.url()).stdin(Stdio::null());
    c
}

/// Waits for a child we started, killing it (by its pid) if it overruns `limit`.
fn wait_bounded(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process {} overran {limit:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn redis_get(s: &Server, args: &[&str]) -> redis::Value {
    let mut c = s.conn();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut c).unwrap()
}

#[test]
fn lock_processes_exclude_each_other() {
    let s = server();
    let dir = tempfile_dir();
    let counter = dir.join("counter");
    std::fs::write(&counter, "0").unwrap();
    let script = format!(
        "v=$(cat {p}); sleep 0.02; echo $((v+1)) > {p}",
        p = counter.display()
    );
    let mut workers = Vec::new();
    for _ in 0..4 {
        let url = s.url();
        let script = script.clone();
        workers.push(std::thread::spawn(move || {
            for _ in 0..5 {
                let mut child = Command::new(BIN)
                    .env("REDIS_URL", &url)
                    .args(["lock", "--ttl", "5000", "cli:counter", "--", "sh", "-c"])
                    .arg(&script)
                    .spawn()
                    .unwrap();
                let st = wait_bounded(&mut child, Duration::from_secs(30));
                assert!(st.success(), "{st:?}");
            }
        }));
    }
    for w in workers {
        w.join().unwrap();
    }
    let v: i64 = std::fs::read_to_string(&counter)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(v, 20);
    assert_eq!(
        redis_get(&s, &["EXISTS", "cli:counter"]),
        redis::Value::Int(0)
    );
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("redis-lease-cli-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn lock_passes_env_and_exit_status() {
    let s = server();
    let out = cli(&s)
        .args(["lock", "--read", "cli:env", "--", "sh", "-c"])
        .arg("echo $REDIS_LEASE_KEY $REDIS_LEASE_MODE $REDIS_LEASE_TOKEN; exit 5")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let parts: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(&parts[..2], &["cli:env", "read"]);
    assert!(parts[2].parse::<u64>().unwrap() >= 1);
    // Released when CMD ended.
    assert_eq!(redis_get(&s, &["EXISTS", "cli:env"]), redis::Value::Int(0));
}

#[test]
fn lock_wait_limit_gives_up_with_status_75() {
    let s = server();
    let mut holder = cli(&s)
        .args(["lock", "cli:busy", "--", "sleep", "5"])
        .spawn()
        .unwrap();
    let t = Instant::now();
    while redis_get(&s, &["EXISTS", "cli:busy"]) != redis::Value::Int(1) {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = Instant::now();
    let out = cli(&s)
        .args(["lock", "--wait", "300", "cli:busy", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(t.elapsed() < Duration::from_secs(3));
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn lost_lease_stops_the_command() {
    let s = server();
    let mut child = cli(&s)
        .args([
            "lock", "--ttl", "900", "--grace", "500", "cli:lost", "--", "sleep", "30",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while redis_get(&s, &["EXISTS", "cli:lost"]) != redis::Value::Int(1) {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
    }
    redis_get(&s, &["DEL", "cli:lost"]);
    let t = Instant::now();
    let st = wait_bounded(&mut child, Duration::from_secs(10));
    assert_eq!(st.code(), Some(3));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("lost"), "{err}");
}

#[test]
fn elect_fails_over_within_about_one_ttl_when_the_leader_is_killed() {
    let s = server();
    let ttl = 1_000u64;
    let start = |name: &str| {
        cli(&s)
            .args(["elect", "--ttl", &ttl.to_string(), "--candidate", name])
            .args(["cli:election", "--", "sleep", "30"])
            .spawn()
            .unwrap()
    };
    let leader = |s: &Server| match redis_get(s, &["LEADER.CURRENT", "cli:election"]) {
        redis::Value::Array(items) => match &items[0] {
            redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            other => panic!("{other:?}"),
        },
        _ => None,
    };
    let mut a = start("a");
    let t = Instant::now();
    while leader(&s).as_deref() != Some("a") {
        assert!(t.elapsed() < Duration::from_secs(5), "a never led");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut b = start("b");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(leader(&s).as_deref(), Some("a"));

    a.kill().unwrap(); // SIGKILL: no resignation
    let killed = Instant::now();
    a.wait().unwrap();
    while leader(&s).as_deref() != Some("b") {
        assert!(
            killed.elapsed() < Duration::from_millis(ttl + 1_500),
            "no failover after {:?}",
            killed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let failover = killed.elapsed();
    eprintln!("failover after {failover:?} (ttl {ttl} ms)");
    assert!(failover <= Duration::from_millis(ttl + 500), "{failover:?}");
    b.kill().unwrap();
    b.wait().unwrap();
}

#[test]
fn elect_runs_the_command_and_resigns_after_it() {
    let s = server();
    let out = cli(&s)
        .args(["elect", "cli:elect-once", "--", "sh", "-c"])
        .arg("echo $REDIS_LEASE_TERM; exit 7")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let term: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(term >= 1);
    assert_eq!(
        redis_get(&s, &["LEADER.CURRENT", "cli:elect-once"]),
        redis::Value::Nil
    );
}

#[test]
fn info_and_leader_print_state() {
    let s = server();
    let mut holder = cli(&s)
        .args(["lock", "--owner", "me", "cli:info", "--", "sleep", "5"])
        .spawn()
        .unwrap();
    let t = Instant::now();
    while redis_get(&s, &["EXISTS", "cli:info"]) != redis::Value::Int(1) {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = cli(&s).args(["info", "cli:info"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("mode: write"), "{text}");
    assert!(text.contains("me\twrite"), "{text}");
    let _ = holder.kill();
    let _ = holder.wait();

    let out = cli(&s).args(["leader", "cli:nobody"]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "(none)");

    let help = Command::new(BIN).args(["lock", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("--ttl"));
}

fn wait_exists(s: &Server, key: &str) {
    let t = Instant::now();
    while redis_get(s, &["EXISTS", key]) != redis::Value::Int(1) {
        assert!(t.elapsed() < Duration::from_secs(5), "{key} never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_is_forwarded_and_the_lock_released() {
    let s = server();
    let mut child = cli(&s)
        .args(["lock", "cli:sig", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    wait_exists(&s, "cli:sig");
    // SIGTERM to the redis-lease process this test started.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let st = wait_bounded(&mut child, Duration::from_secs(10));
    assert_eq!(
        st.code(),
        Some(128 + 15),
        "CMD's status (killed by SIGTERM)"
    );
    assert_eq!(redis_get(&s, &["EXISTS", "cli:sig"]), redis::Value::Int(0));
}

#[test]
fn elect_stops_the_command_when_leadership_is_lost() {
    let s = server();
    let mut child = cli(&s)
        .args(["elect", "--ttl", "900", "--grace", "500", "cli:lose"])
        .args(["--", "sleep", "30"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_exists(&s, "cli:lose");
    redis_get(&s, &["DEL", "cli:lose"]);
    let st = wait_bounded(&mut child, Duration::from_secs(10));
    assert_eq!(st.code(), Some(3));
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("leadership"), "{err}");
}

#[test]
fn leader_watch_prints_every_change() {
    use std::io::{BufRead, BufReader};
    let s = server();
    let mut watcher = cli(&s)
        .args(["leader", "--watch", "cli:watch"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = watcher.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = || rx.recv_timeout(Duration::from_secs(5)).expect("a line");
    assert_eq!(next(), "(none)");
    redis_get(&s, &["LEADER.CAMPAIGN", "cli:watch", "x", "5000"]);
    assert!(next().starts_with("x\tterm="));
    redis_get(&s, &["LEADER.RESIGN", "cli:watch", "x"]);
    assert_eq!(next(), "(none)");
    redis_get(&s, &["LEADER.CAMPAIGN", "cli:watch", "y", "5000"]);
    assert!(next().starts_with("y\tterm="));
    let _ = watcher.kill();
    let _ = watcher.wait();
    reader.join().unwrap();
}

/// The CLI at a real terminal: CMD reads what is typed there, and it is not stopped by SIGTTIN
/// for reading from a background process group.
#[test]
fn an_interactive_command_reads_the_terminal_under_the_lock() {
    let s = server();
    let mut c = Command::new(BIN);
    c.env("REDIS_URL", s.url()).args([
        "lock",
        "--ttl",
        "1500",
        "cli:tty",
        "--",
        "sh",
        "-c",
        "printf 'name? '; read x; echo \"got:[$x]\"",
    ]);
    let mut term = pty::Pty::spawn(c);
    assert!(
        term.wait_for("name? ", Duration::from_secs(10)),
        "no prompt: {:?}",
        term.seen()
    );
    wait_exists(&s, "cli:tty");
    // Several renewals pass while the prompt waits.
    std::thread::sleep(Duration::from_millis(2_000));
    term.send(b"hello\n");
    assert!(
        term.wait_for("got:[hello]", Duration::from_secs(5)),
        "CMD could not read the terminal: {:?}",
        term.seen()
    );
    let st = term
        .wait(Duration::from_secs(10))
        .expect("redis-lease ended");
    assert_eq!(st.code(), Some(0), "{:?}", term.seen());
    assert_eq!(redis_get(&s, &["EXISTS", "cli:tty"]), redis::Value::Int(0));
}

/// Ctrl-C at the terminal (SIGINT to the terminal's foreground process group) ends a CMD that
/// is reading the terminal, and the lock is released.
#[test]
fn ctrl_c_at_the_terminal_ends_the_command_and_releases_the_lock() {
    let s = server();
    let mut c = Command::new(BIN);
    c.env("REDIS_URL", s.url()).args([
        "lock",
        "--ttl",
        "1500",
        "cli:ctrl-c",
        "--",
        "sh",
        "-c",
        "echo waiting; read x; echo never",
    ]);
    let mut term = pty::Pty::spawn(c);
    assert!(
        term.wait_for("waiting", Duration::from_secs(10)),
        "{:?}",
        term.seen()
    );
    wait_exists(&s, "cli:ctrl-c");
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    term.send(b"\x03");
    let st = term
        .wait(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("Ctrl-C did not end it: {:?}", term.seen()));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    // Ended as CMD did, by SIGINT (a calling shell's $? is 130).
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), Some(libc::SIGINT), "{st:?}: {:?}", term.seen());
    assert!(!term.seen().contains("never"));
    assert_eq!(
        redis_get(&s, &["EXISTS", "cli:ctrl-c"]),
        redis::Value::Int(0)
    );
}

/// A shell script that runs redis-lease stops at Ctrl-C too (as it would without redis-lease
/// in between), although the terminal's SIGINT reached only CMD's process group.
#[test]
fn ctrl_c_stops_the_calling_script_too() {
    let s = server();
    let script =
        format!("{BIN} lock --ttl 1500 cli:script -- sh -c 'echo waiting; read x'; echo after:$?");
    let mut c = Command::new("bash");
    c.env("REDIS_URL", s.url()).args(["-c", &script]);
    let mut term = pty::Pty::spawn(c);
    assert!(
        term.wait_for("waiting", Duration::from_secs(10)),
        "{:?}",
        term.seen()
    );
    wait_exists(&s, "cli:script");
    std::thread::sleep(Duration::from_millis(200));
    term.send(b"\x03");
    term.wait(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("Ctrl-C did not end it: {:?}", term.seen()));
    // (Reads what the terminal showed until the end.)
    assert!(
        !term.wait_for("after:", Duration::from_millis(500)),
        "the script went on: {:?}",
        term.seen()
    );
    assert_eq!(
        redis_get(&s, &["EXISTS", "cli:script"]),
        redis::Value::Int(0)
    );
}

/// Job control under a shell (`set -m`): Ctrl-Z stops the job as a whole (the shell sees it
/// stopped and gets its terminal back), `fg` continues it with the terminal, and CMD goes on
/// reading. A job that stayed stopped past its lease is not continued: CMD is stopped, exit 3.
#[test]
fn ctrl_z_stops_the_job_and_fg_continues_it_only_while_the_lease_is_held() {
    let s = server();
    let run = |key: &str, ttl: &str, pause: &str| {
        let script = format!(
            "set -m; {bin} lock --ttl {ttl} --grace 500 {key} -- sh -c 'read x; echo \"got:[$x]\"'; \
             echo \"stopped:$?\"; sleep {pause}; fg; echo \"after-fg:$?\"",
            bin = BIN
        );
        let mut c = Command::new("bash");
        c.env("REDIS_URL", s.url()).args(["-c", &script]);
        pty::Pty::spawn(c)
    };

    // Continued in time: CMD reads on.
    let mut term = run("cli:job", "3000", "0.2");
    wait_exists(&s, "cli:job");
    std::thread::sleep(Duration::from_millis(300));
    term.send(b"\x1a");
    assert!(
        term.wait_for("stopped:148", Duration::from_secs(5)),
        "the shell did not see the job stop: {:?}",
        term.seen()
    );
    std::thread::sleep(Duration::from_millis(500));
    term.send(b"again\n");
    assert!(
        term.wait_for("got:[again]", Duration::from_secs(5)),
        "CMD did not get the terminal back after fg: {:?}",
        term.seen()
    );
    assert!(
        term.wait_for("after-fg:0", Duration::from_secs(5)),
        "{:?}",
        term.seen()
    );
    term.wait(Duration::from_secs(5)).expect("the shell ended");
    assert_eq!(redis_get(&s, &["EXISTS", "cli:job"]), redis::Value::Int(0));

    // Stopped for longer than the lease: fg finds it lost and stops CMD.
    let mut term = run("cli:job-lapsed", "1000", "2.5");
    wait_exists(&s, "cli:job-lapsed");
    std::thread::sleep(Duration::from_millis(300));
    term.send(b"\x1a");
    assert!(
        term.wait_for("stopped:148", Duration::from_secs(5)),
        "{:?}",
        term.seen()
    );
    assert!(
        term.wait_for("after-fg:3", Duration::from_secs(10)),
        "a job continued past its lease must be stopped: {:?}",
        term.seen()
    );
    assert!(term.seen().contains("was lost"), "{:?}", term.seen());
    term.wait(Duration::from_secs(5)).expect("the shell ended");
}

/// `redis-lease leader --watch | head -1`: when the reader of stdout goes away, redis-lease
/// ends quietly (status 0, no panic), whether or not another line comes.
#[test]
fn leader_watch_ends_quietly_when_its_reader_goes_away() {
    use std::io::{BufRead, BufReader};
    let s = server();
    for another_change in [true, false] {
        let mut watcher = cli(&s)
            .args(["leader", "--watch", "cli:pipe"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(watcher.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap(); // the reader is dropped here: like `head -1` exiting
        assert!(!first.is_empty());
        if another_change {
            redis_get(&s, &["LEADER.CAMPAIGN", "cli:pipe", "x", "5000"]);
            redis_get(&s, &["LEADER.RESIGN", "cli:pipe", "x"]);
        }
        let st = wait_bounded(&mut watcher, Duration::from_secs(10));
        let mut err = String::new();
        use std::io::Read;
        watcher
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(st.code(), Some(0), "stderr: {err}");
        assert!(err.is_empty(), "nothing on stderr: {err}");
    }
}

/// `--replicas N`: CMD runs only once N replicas acknowledged the grant.
#[test]
fn lock_with_replicas_runs_only_once_they_acknowledged_the_grant() {
    let s = server();
    let args = |replica_timeout: &'static str| {
        [
            "lock",
            "--replicas",
            "1",
            "--replica-timeout",
            replica_timeout,
            "--wait",
            "0",
            "cli:acked",
            "--",
            "sh",
            "-c",
            "echo ran",
        ]
    };
    let out = cli(&s).args(args("200")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("replica"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
    assert_eq!(
        redis_get(&s, &["EXISTS", "cli:acked"]),
        redis::Value::Int(0)
    );

    let _replica = common::replica::replica_of(&s);
    // A generous limit where the acknowledgement must come (a busy machine can take 200 ms).
    let out = cli(&s).args(args("2000")).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");
}

/// `--url redis+sentinel://...`: the CLI finds the master through the sentinels.
#[test]
fn lock_and_info_through_sentinel() {
    let group = common::sentinel::Group::start(1);
    let out = Command::new(BIN)
        .args([
            "--url",
            &group.url(),
            "lock",
            "--replicas",
            "1",
            "cli:sentinel",
        ])
        .args(["--", "sh", "-c", "echo token=$REDIS_LEASE_TOKEN"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let token: u64 = stdout
        .trim()
        .strip_prefix("token=")
        .unwrap()
        .parse()
        .unwrap();
    assert!(token >= 1);
    let out = Command::new(BIN)
        .args(["--url", &group.url(), "info", "cli:sentinel"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("holders: 0"));
    // A bad URL is an error that says what is wrong.
    let out = Command::new(BIN)
        .args(["--url", "redis+sentinel://127.0.0.1:1", "info", "k"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("service name"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `redis-lease semaphore` processes taking 1 or 2 permits of 2: each CMD adds its permits
/// (after the grant) and takes them off (before the release) in Redis and records the sum:
/// never more than the limit.
#[test]
fn semaphore_processes_never_exceed_the_limit() {
    let s = server();
    let dir = tempfile_dir();
    let seen = dir.join("seen");
    let script = format!(
        "n=$(redis-cli -p {port} INCRBY cli:sem:inside $REDIS_LEASE_PERMITS); echo $n >> {f}; \
         sleep 0.05; redis-cli -p {port} DECRBY cli:sem:inside $REDIS_LEASE_PERMITS > /dev/null",
        port = s.port,
        f = seen.display()
    );
    let mut workers = Vec::new();
    for i in 0..6 {
        let url = s.url();
        let script = script.clone();
        workers.push(std::thread::spawn(move || {
            for _ in 0..3 {
                let permits = if i % 3 == 0 { "2" } else { "1" };
                let mut child = Command::new(BIN)
                    .env("REDIS_URL", &url)
                    .args(["semaphore", "--limit", "2", "--permits", permits])
                    .args(["--ttl", "5000", "cli:sem", "--", "sh", "-c"])
                    .arg(&script)
                    .stdin(Stdio::null())
                    .spawn()
                    .unwrap();
                let st = wait_bounded(&mut child, Duration::from_secs(30));
                assert!(st.success(), "{st:?}");
            }
        }));
    }
    for w in workers {
        w.join().unwrap();
    }
    let counts: Vec<u32> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 18);
    assert!(counts.iter().all(|&n| (1..=2).contains(&n)), "{counts:?}");
    assert_eq!(redis_get(&s, &["EXISTS", "cli:sem"]), redis::Value::Int(0));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn semaphore_passes_env_waits_and_info_shows_it() {
    let s = server();
    let mut holder = cli(&s)
        .args([
            "semaphore",
            "--limit",
            "3",
            "--permits",
            "2",
            "--owner",
            "me",
        ])
        .args(["cli:sem-info", "--", "sleep", "10"])
        .spawn()
        .unwrap();
    wait_exists(&s, "cli:sem-info");
    let out = cli(&s).args(["info", "cli:sem-info"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "type: semaphore",
        "limit: 3",
        "used: 2",
        "holders: 1",
        "me\tpermits=2",
    ] {
        assert!(text.contains(want), "{want:?} in {text}");
    }

    let t = Instant::now();
    let out = cli(&s)
        .args([
            "semaphore",
            "--limit",
            "3",
            "--permits",
            "2",
            "--wait",
            "300",
        ])
        .args(["cli:sem-info", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());

    let out = cli(&s)
        .args(["semaphore", "--limit", "3", "cli:sem-info", "--", "sh", "-c"])
        .arg("echo $REDIS_LEASE_KEY $REDIS_LEASE_PERMITS $REDIS_LEASE_LIMIT $REDIS_LEASE_TOKEN; exit 4")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let parts: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(&parts[..3], &["cli:sem-info", "1", "3"]);
    assert!(parts[3].parse::<u64>().unwrap() >= 1);

    let out = cli(&s)
        .args(["semaphore", "--limit", "4", "cli:sem-info", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("limit is 3"), "{err}");
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn semaphore_lost_lease_stops_the_command() {
    let s = server();
    let mut child = cli(&s)
        .args([
            "semaphore",
            "--limit",
            "2",
            "--ttl",
            "900",
            "--grace",
            "500",
        ])
        .args(["cli:sem-lost", "--", "sleep", "30"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_exists(&s, "cli:sem-lost");
    redis_get(&s, &["DEL", "cli:sem-lost"]);
    let t = Instant::now();
    let st = wait_bounded(&mut child, Duration::from_secs(10));
    assert_eq!(st.code(), Some(3));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("lost"), "{err}");
}

/// The adversary of fencing: `redis-lease` is frozen (SIGSTOP, like a GC pause) past its
/// lease while its CMD goes on; the next holder writes; then CMD writes with its stale token
/// through LEASE.EXEC: the server refuses it and the data stays the next holder's. Once
/// continued, redis-lease notices the loss and stops CMD (exit 3).
#[test]
fn a_frozen_holders_fenced_write_fails_after_the_next_holders() {
    let s = server();
    let dir = tempfile_dir();
    let (ready, out) = (dir.join("ready"), dir.join("out"));
    let script = format!(
        "touch {ready}; sleep 3; \
         redis-cli -p {port} LEASE.EXEC cli:frozen $REDIS_LEASE_TOKEN SET cli:frozen:data stale \
         > {out} 2>&1; sleep 30",
        ready = ready.display(),
        out = out.display(),
        port = s.port
    );
    let mut child = cli(&s)
        .args([
            "semaphore",
            "--limit",
            "1",
            "--ttl",
            "600",
            "--grace",
            "500",
        ])
        .args(["cli:frozen", "--", "sh", "-c", &script])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !ready.exists() {
        assert!(t.elapsed() < Duration::from_secs(5), "CMD never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = child.id() as libc::pid_t;
    // SAFETY: signals the redis-lease process this test started, by its pid.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let t = Instant::now();
    let token = loop {
        let v = redis_get(
            &s,
            &["SEMAPHORE.ACQUIRE", "cli:frozen", "next", "1", "10000"],
        );
        if let redis::Value::Int(t) = v {
            break t;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the frozen hold never lapsed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let token = token.to_string();
    let wrote = redis_get(
        &s,
        &[
            "LEASE.EXEC",
            "cli:frozen",
            &token,
            "SET",
            "cli:frozen:data",
            "new",
        ],
    );
    assert_eq!(wrote, redis::Value::Okay);
    let t = Instant::now();
    while std::fs::read_to_string(&out).unwrap_or_default().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(10), "CMD never wrote");
        std::thread::sleep(Duration::from_millis(20));
    }
    let answer = std::fs::read_to_string(&out).unwrap();
    assert!(answer.contains("FENCED"), "{answer}");
    assert_eq!(
        redis_get(&s, &["GET", "cli:frozen:data"]),
        redis::Value::BulkString(b"new".to_vec())
    );
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let st = wait_bounded(&mut child, Duration::from_secs(10));
    assert_eq!(st.code(), Some(3));
    let _ = std::fs::remove_dir_all(dir);
}

/// The size of `f` (0 if it does not exist yet).
fn size_of(f: &std::path::Path) -> u64 {
    std::fs::metadata(f).map_or(0, |m| m.len())
}

/// A shell that starts a background writer appending to `f` every 50 ms (for at most 15 s),
/// then `tail` (`wait`: stays until the writer ends; empty: ends at once).
fn background_writer(f: &std::path::Path, tail: &str) -> String {
    format!(
        "(for i in $(seq 1 300); do echo $i >> {p}; sleep 0.05; done) & {tail}",
        p = f.display()
    )
}

/// Waits until `f` grows, then until it has not grown for `quiet`; fails past `limit`.
fn assert_stops_growing(f: &std::path::Path, quiet: Duration, limit: Duration) -> Duration {
    let t = Instant::now();
    let mut last = size_of(f);
    let mut since = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = size_of(f);
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return since.duration_since(t);
        }
        assert!(
            t.elapsed() < limit,
            "{} still grows {:?} after the check began",
            f.display(),
            t.elapsed()
        );
    }
}

#[test]
fn kill_9_of_redis_lease_kills_cmds_whole_process_group_within_the_ttl() {
    let s = server();
    let dir = tempfile_dir();
    let f = dir.join("writes");
    let mut child = cli(&s)
        .args(["lock", "--ttl", "1500", "cli:kill9", "--", "sh", "-c"])
        .arg(background_writer(&f, "wait"))
        .spawn()
        .unwrap();
    let t = Instant::now();
    while size_of(&f) == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the writer never wrote"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SIGKILL to the redis-lease process this test started: no clean-up of its own can run.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGKILL);
    }
    let _ = child.wait();
    let killed = Instant::now();
    // The writer (a grandchild, in CMD's process group) must be gone before the lease lapses.
    assert_stops_growing(&f, Duration::from_millis(400), Duration::from_secs(5));
    let quiet_since = killed.elapsed();
    assert!(
        quiet_since < Duration::from_millis(1500),
        "the writer ran {quiet_since:?} after redis-lease died (ttl 1.5 s)"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn what_cmd_leaves_running_is_stopped_before_the_lock_is_released() {
    let s = server();
    let dir = tempfile_dir();
    let f = dir.join("writes");
    // CMD starts a background writer and exits at once.
    let mut child = cli(&s)
        .args(["lock", "--grace", "500", "cli:leftover", "--", "sh", "-c"])
        .arg(background_writer(&f, "sleep 0.3; exit 4"))
        .spawn()
        .unwrap();
    let st = wait_bounded(&mut child, Duration::from_secs(10));
    assert_eq!(st.code(), Some(4), "CMD's own status");
    // Released, and nothing of CMD writes any more.
    assert_eq!(
        redis_get(&s, &["EXISTS", "cli:leftover"]),
        redis::Value::Int(0)
    );
    let grew = size_of(&f);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        size_of(&f),
        grew,
        "CMD's background writer outlived the lock"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sigterm_during_an_acquisition_releases_what_may_have_been_granted() {
    // No replica: every grant waits a second for an acknowledgement that never comes, so a
    // SIGTERM lands while a grant exists but is not confirmed.
    let s = server();
    for round in 0..3 {
        let key = format!("cli:sigacq{round}");
        let mut child = cli(&s)
            .args([
                "lock",
                "--ttl",
                "30000",
                "--replicas",
                "1",
                "--replica-timeout",
                "3000",
                &key,
                "--",
                "true",
            ])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_exists(&s, &key);
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let st = wait_bounded(&mut child, Duration::from_secs(10));
        assert_eq!(st.code(), Some(128 + 15));
        assert_eq!(
            redis_get(&s, &["EXISTS", &key]),
            redis::Value::Int(0),
            "round {round}: the unconfirmed grant was left on the server"
        );
    }
}

#[test]
fn after_a_loss_with_the_server_gone_the_release_is_bounded() {
    let mut s = server();
    let mut child = cli(&s)
        .args([
            "lock", "--ttl", "3000", "--grace", "500", "cli:gone", "--", "sleep", "30",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_exists(&s, "cli:gone");
    s.kill9();
    let t = Instant::now();
    let st = wait_bounded(&mut child, Duration::from_secs(20));
    let took = t.elapsed();
    assert_eq!(st.code(), Some(3), "lost");
    // The loss comes within the ttl; CMD ends at once on SIGTERM; the release after a loss
    // may take at most 1 s (documented), not another ttl of retries.
    assert!(
        took < Duration::from_millis(5_000),
        "exited {took:?} after the server died"
    );
}

#[test]
fn replicas_with_no_replica_print_progress_and_give_up_with_status_1() {
    let s = server();
    let t = Instant::now();
    let out = cli(&s)
        .args([
            "lock",
            "--replicas",
            "1",
            "--replica-timeout",
            "200",
            "cli:norepl",
            "--",
            "echo",
            "ran",
        ])
        .output()
        .unwrap();
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty(), "CMD must not run unreplicated");
    // Within the retry budget (30 s), with a line per attempt meanwhile.
    assert!(took < Duration::from_secs(45), "gave up after {took:?}");
    assert!(
        err.matches("reached 0 of 1 replica(s); it was released, asking again")
            .count()
            >= 2,
        "no progress shown while retrying: {err}"
    );
    assert!(err.contains("1 were asked for"), "{err}");
    assert_eq!(
        redis_get(&s, &["EXISTS", "cli:norepl"]),
        redis::Value::Int(0)
    );
}

#[test]
fn durations_take_units_and_usage_errors_exit_64() {
    let s = server();
    let mut holder = cli(&s)
        .args(["lock", "--ttl", "10s", "cli:units", "--", "sleep", "5"])
        .spawn()
        .unwrap();
    wait_exists(&s, "cli:units");
    // The ttl in the server is the one written with its unit.
    let info = cli(&s).args(["info", "cli:units"]).output().unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    let ttl: u64 = info
        .split("ttl=")
        .nth(1)
        .and_then(|r| r.split("ms").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no ttl in {info}"));
    assert!(ttl > 5_000 && ttl <= 10_000, "ttl {ttl} ms");
    let t = Instant::now();
    let st = cli(&s)
        .args(["lock", "--wait", "300ms", "cli:units", "--", "true"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(75));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    unsafe {
        libc::kill(holder.id() as libc::pid_t, libc::SIGTERM);
    }
    wait_bounded(&mut holder, Duration::from_secs(10));
    // Usage errors: their own status, and nothing runs.
    for args in [
        &["lock", "--ttl", "10x", "cli:units", "--", "echo", "ran"][..],
        &["lock", "--ttl", "0", "cli:units", "--", "echo", "ran"],
        &["lock", "cli:units"],
        &["lock", "--no-such-flag", "cli:units", "--", "echo", "ran"],
    ] {
        let out = cli(&s).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        if args.contains(&"10x") {
            assert!(err.contains("10s") && err.contains("500ms"), "{err}");
        }
    }
}

#[test]
fn help_documents_every_exit_status() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "CMD's own status",
        "\n  3 ",
        "\n  64 ",
        "\n  75 ",
        "\n  127 ",
        "128+N",
        "\n  1 ",
        "SIGKILL",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
}

#[test]
fn a_refused_connection_fails_fast_and_names_the_address() {
    let port = redis_lease_testkit::free_port();
    let url = format!("redis://127.0.0.1:{port}/");
    for args in [
        &["lock", "cli:refused", "--", "echo", "ran"][..],
        &["info", "cli:refused"],
    ] {
        let t = Instant::now();
        let out = Command::new(BIN)
            .env("REDIS_URL", &url)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(out.stdout.is_empty());
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        assert!(
            err.contains(&format!("127.0.0.1:{port}")) && err.to_lowercase().contains("refused"),
            "{err}"
        );
    }
}

#[test]
fn what_cmd_leaves_running_outside_its_group_is_stopped_too() {
    let s = server();
    let dir = tempfile_dir();
    let f = dir.join("writes");
    // The writer leaves CMD's process group (setsid), then CMD exits.
    let writer = format!(
        "for i in $(seq 1 300); do echo $i >> {p}; sleep 0.05; done",
        p = f.display()
    );
    let script = format!("setsid sh -c '{writer}' & sleep 0.3; exit 0");
    let mut child = cli(&s)
        .args(["lock", "--grace", "500ms", "cli:strays", "--", "sh", "-c"])
        .arg(script)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let st = wait_bounded(&mut child, Duration::from_secs(10));
    assert_eq!(st.code(), Some(0));
    let grew = size_of(&f);
    assert!(grew > 0, "the writer never wrote");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        size_of(&f),
        grew,
        "a writer outside CMD's group outlived the lock"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn lock_takes_several_keys_at_once() {
    let s = server();
    let out = cli(&s)
        .args(["lock", "{cli}:k1", "{cli}:k2", "{cli}:k3", "--", "sh", "-c"])
        .arg("echo $REDIS_LEASE_KEYS; echo $REDIS_LEASE_TOKENS; echo $REDIS_LEASE_KEY $REDIS_LEASE_TOKEN; exit 4")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "{cli}:k1 {cli}:k2 {cli}:k3");
    let tokens: Vec<u64> = lines[1].split(' ').map(|t| t.parse().unwrap()).collect();
    assert_eq!(tokens.len(), 3);
    assert_eq!(lines[2], format!("{{cli}}:k1 {}", tokens[0]));
    // Every key released when CMD ended.
    assert_eq!(
        redis_get(&s, &["EXISTS", "{cli}:k1", "{cli}:k2", "{cli}:k3"]),
        redis::Value::Int(0)
    );
    // One of them held elsewhere: not acquired in time, and none of them taken meanwhile.
    redis_get(&s, &["RWLOCK.WLOCK", "{cli}:k2", "other", "10000"]);
    let mut child = cli(&s)
        .args([
            "lock", "--wait", "1500", "{cli}:k1", "{cli}:k2", "--", "true",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // k1 holds nothing (no key: its waiter waits outside the keyspace), and its INFO shows
    // the request waiting there.
    assert_eq!(redis_get(&s, &["EXISTS", "{cli}:k1"]), redis::Value::Int(0));
    let info = format!("{:?}", redis_get(&s, &["RWLOCK.INFO", "{cli}:k1"]));
    assert!(!info.contains("token\", int(1"), "a partial hold: {info}");
    assert!(info.contains("\"waiters\"'), int(1)"), "{info}");
    let st = wait_bounded(&mut child, Duration::from_secs(10));
    assert_eq!(st.code(), Some(75));
    assert_eq!(redis_get(&s, &["EXISTS", "{cli}:k1"]), redis::Value::Int(0));
    // --owner names one key's holder only.
    let out = cli(&s)
        .args(["lock", "--owner", "me", "{cli}:a", "{cli}:b", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn sigterm_while_several_keys_wait_leaves_nothing_held() {
    let s = server();
    redis_get(&s, &["RWLOCK.WLOCK", "{cli}:w2", "other", "60000"]);
    let mut child = cli(&s)
        .args(["lock", "{cli}:w1", "{cli}:w2", "--", "true"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    until_waiters(&s, "{cli}:w2", 1);
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let st = wait_bounded(&mut child, Duration::from_secs(10));
    assert_eq!(st.code(), Some(128 + 15));
    assert_eq!(
        redis_get(&s, &["RWLOCK.UNLOCK", "{cli}:w2", "other"]),
        redis::Value::Int(1)
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        redis_get(&s, &["EXISTS", "{cli}:w1", "{cli}:w2"]),
        redis::Value::Int(0),
        "the interrupted request was granted after it left"
    );
}

fn until_waiters(s: &Server, key: &str, n: i64) {
    let start = Instant::now();
    loop {
        let info = redis_get(s, &["RWLOCK.INFO", key]);
        if format!("{info:?}").contains(&format!("\"waiters\"'), int({n})")) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{key} never had {n} waiters: {info:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn max_hold_stops_the_command_at_the_cap() {
    let s = server();
    for kind in ["lock", "semaphore"] {
        let t = Instant::now();
        let mut args = vec![
            kind,
            "--ttl",
            "600ms",
            "--max-hold",
            "1200ms",
            "--grace",
            "300ms",
        ];
        if kind == "semaphore" {
            args.extend(["--limit", "2"]);
        }
        args.extend(["cli:cap", "--", "sleep", "30"]);
        let out = cli(&s).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{kind}: {err}");
        let took = t.elapsed();
        assert!(
            took > Duration::from_millis(1100) && took < Duration::from_secs(6),
            "{kind}: {took:?}"
        );
        assert!(err.contains("max hold"), "{kind}: {err}");
    }
}

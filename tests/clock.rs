//! Which clock measures what (issue 20, items 7 and 8). Stalls and the quarantine are local
//! durations: they are measured on the monotonic clock, so a step of the wall clock neither
//! hides a stall nor revives a quarantine that ended; and a stall is a time the server did not
//! run for more than the bound (a second at hz 10), measured from the last moment it ran, not
//! from its last cron tick. The wall clock of the server under test is shifted by an
//! LD_PRELOAD shim (tests/fixture/clockshift.c) that adds an offset the test writes to a file.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use redis_lease_testkit::prelude::*;

/// The shim, built once per test process into the target directory.
fn shim() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR"));
            let out = std::env::temp_dir().join(format!("clockshift-{}.so", std::process::id()));
            let ok = Command::new("cc")
                .args(["-shared", "-fPIC", "-O2", "-o"])
                .arg(&out)
                .arg(root.join("tests/fixture/clockshift.c"))
                .arg("-ldl")
                .status()
                .expect("cc (a C compiler builds the clock shim)")
                .success();
            assert!(ok, "the clock shim did not build");
            out
        })
        .clone()
}

/// A server whose wall clock the test can step, and the file holding the step.
struct Shifted {
    server: Server,
    file: PathBuf,
}

impl Shifted {
    fn start(opts: Options) -> Shifted {
        let file =
            std::env::temp_dir().join(format!("clockshift-{}-{}", std::process::id(), free_port()));
        std::fs::write(&file, 0i64.to_ne_bytes()).unwrap();
        let opts = opts
            .env("LD_PRELOAD", &shim().display().to_string())
            .env("CLOCKSHIFT_FILE", &file.display().to_string());
        Shifted {
            server: Server::with(opts),
            file,
        }
    }

    /// Whether the shim steps this server's clock as the module reads it (it cannot where the
    /// server reads the time without going through libc, or loads modules with
    /// `RTLD_DEEPBIND`, which binds the module's own libc calls past the preloaded shim): the
    /// tests that need it say so and stop otherwise.
    fn steps(&self, c: &mut Connection) -> bool {
        // A hold the module granted before the step: the ttl it shows (its deadline less the
        // module's clock) grows by the step once the module reads the stepped clock. A
        // quarantine after the start holds the grant back for a moment.
        until(
            Duration::from_secs(10),
            "a grant to read the clock by",
            || token_or_nil(&r!(c, "RWLOCK.WLOCK", "clock:probe", "probe", 1000)).is_some(),
        );
        let ttl = |c: &mut Connection| {
            let info = lock_info(c, "clock:probe");
            info.holders.first().map_or(0, |h| h.ttl)
        };
        self.shift(-60_000);
        let ok = eventually(Duration::from_secs(2), || ttl(c) > 30_000);
        self.shift(0);
        until(Duration::from_secs(2), "the clock is back", || {
            ttl(c) <= 1000
        });
        r!(c, "RWLOCK.UNLOCK", "clock:probe", "probe");
        if !ok {
            eprintln!(
                "SKIPPED: the clock shim does not step the wall clock the module reads on {}",
                server_binary()
            );
        }
        ok
    }

    /// Steps the server's wall clock by `ms` (negative: back) from the real one.
    fn shift(&self, ms: i64) {
        // Written in place: the shim maps the file, so the server sees it at once.
        use std::io::{Seek, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.file)
            .unwrap();
        f.seek(std::io::SeekFrom::Start(0)).unwrap();
        f.write_all(&ms.to_ne_bytes()).unwrap();
    }
}

impl Drop for Shifted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

fn real_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn time_ms(c: &mut Connection) -> i64 {
    let t: Vec<i64> = redis::cmd("TIME").query(c).unwrap();
    t[0] * 1000 + t[1] / 1000
}

fn stalls(c: &mut Connection) -> i64 {
    info_int(c, "lease", "lease_stalls")
}

fn quarantine_left(c: &mut Connection) -> i64 {
    info_int(c, "lease", "lease_quarantine_ms")
}

#[test]
fn the_shim_steps_the_servers_wall_clock() {
    let s = Shifted::start(debug_opts());
    let mut c = conn(&s.server);
    if !s.steps(&mut c) {
        return;
    }
    // Valkey may answer TIME from a clock it caches for a moment: each reading is looked at
    // again (up to 2 s) until it shows the step it should.
    let real = real_ms;
    let mut before = time_ms(&mut c);
    let unshifted = eventually(Duration::from_secs(2), || {
        before = time_ms(&mut c);
        (before - real()).abs() < 1000
    });
    assert!(unshifted, "TIME {before} is not the real clock {}", real());
    token(&r!(c, "RWLOCK.WLOCK", "k", "a", 10_000));
    s.shift(-5000);
    let mut after = time_ms(&mut c);
    let stepped = eventually(Duration::from_secs(2), || {
        after = time_ms(&mut c);
        (before - after - 5000).abs() < 1000
    });
    assert!(stepped, "TIME went from {before} to {after}");
    // The module reads the same clock: the lease it granted before the step (for 10 s) has
    // about 15 s left on the stepped clock.
    let ttl = lock_info(&mut c, "k").holders[0].ttl;
    assert!(
        (ttl - 15_000).abs() < 1000,
        "ttl {ttl} on a clock stepped back 5 s"
    );
}

/// Item 7: after the wall clock steps back 5 s, a 2 s SIGSTOP is still a stall.
#[test]
fn a_stall_is_seen_after_the_wall_clock_steps_back() {
    let s = Shifted::start(debug_opts().module_arg("quarantine", "1000"));
    let mut c = conn(&s.server);
    if !s.steps(&mut c) {
        return;
    }
    until(Duration::from_secs(10), "the start quarantine ends", || {
        quarantine_left(&mut c) == 0
    });
    s.shift(-5000);
    // Let the server run (cron ticks, commands) on the stepped clock first.
    std::thread::sleep(Duration::from_millis(300));
    token(&r!(c, "RWLOCK.WLOCK", "before", "a", 500));
    let seen = stalls(&mut c);
    signal(&s.server, "STOP");
    std::thread::sleep(Duration::from_millis(2000));
    signal(&s.server, "CONT");
    until(Duration::from_secs(5), "the stall is counted", || {
        stalls(&mut c) > seen
    });
    assert!(
        is_nil(&r!(c, "RWLOCK.WLOCK", "after", "b", 500)),
        "granted right after a 2 s stall: no quarantine"
    );
    assert!(quarantine_left(&mut c) > 0);
}

/// Item 7: a quarantine that ended does not come back when the wall clock steps back.
#[test]
fn a_quarantine_that_ended_stays_ended_when_the_wall_clock_steps_back() {
    let s = Shifted::start(debug_opts().module_arg("quarantine", "1000"));
    let mut c = conn(&s.server);
    if !s.steps(&mut c) {
        return;
    }
    until(Duration::from_secs(10), "the start quarantine ends", || {
        quarantine_left(&mut c) == 0
    });
    s.shift(-5000);
    assert_eq!(quarantine_left(&mut c), 0, "the quarantine came back");
    assert!(
        !is_nil(&r!(c, "RWLOCK.WLOCK", "k", "a", 500)),
        "no grant after the clock stepped back"
    );
    // And a forward step of the wall clock is not a stall: the server kept running.
    let seen = stalls(&mut c);
    s.shift(10_000);
    std::thread::sleep(Duration::from_millis(300));
    token(&r!(c, "RWLOCK.WLOCK", "k2", "a", 500));
    assert_eq!(stalls(&mut c), seen, "a clock step counted as a stall");
}

/// Item 8: a command that blocks the server for less than the bound is no stall, wherever it
/// falls between two cron ticks; one that blocks it for longer is. At hz 2 the bound is 1.5 s
/// (three cron periods) and a cron period is 500 ms: measured from the last cron tick, a
/// 1.2 s block starting more than 300 ms after one looks like a stall (about 4 in 10 of
/// these; the issue saw the same with 0.92 s at hz 10), while measured from the last moment
/// the server ran it never does, with 300 ms to spare for a loaded machine.
#[test]
fn a_block_shorter_than_the_bound_is_no_stall() {
    let s = Server::with(debug_opts().arg("hz", "2"));
    let mut c = conn(&s);
    let mut other = conn(&s);
    for i in 0..10 {
        // Vary where the block starts between two cron ticks.
        std::thread::sleep(Duration::from_millis(97 * i + 5));
        r!(c, "DEBUG", "SLEEP", "1.2");
        token(&r!(other, "RWLOCK.WLOCK", format!("k{i}"), "a", 500));
    }
    assert_eq!(
        stalls(&mut c),
        0,
        "DEBUG SLEEP 1.2 at hz 2 counted as a stall"
    );
    r!(c, "DEBUG", "SLEEP", "2");
    token(&r!(other, "RWLOCK.WLOCK", "k", "a", 500));
    assert_eq!(stalls(&mut c), 1, "DEBUG SLEEP 2 is a stall");
}

fn waiters(c: &mut Connection) -> i64 {
    info_int(c, "lease", "lease_waiters")
}

/// Item 7: a wait is a local duration: a step of the wall clock back during it does not
/// lengthen it (the key's wake-up, on the wall clock, is set again when the step is seen),
/// and a step forward does not cut it short. Leases keep their absolute deadlines.
#[test]
fn a_wait_is_neither_lengthened_nor_cut_short_by_a_step_of_the_wall_clock() {
    let s = Shifted::start(debug_opts());
    let mut c = conn(&s.server);
    if !s.steps(&mut c) {
        return;
    }
    token(&r!(c, "RWLOCK.WLOCK", "k", "a", 60_000));
    // Back: a WAIT 1500 still ends about 1.5 s after it was asked.
    let mut w = Sock::connect(s.server.port);
    let sent = Instant::now();
    w.send_text(&["RWLOCK.WLOCK", "k", "b", "1000", "WAIT", "1500"]);
    until(Duration::from_secs(5), "b parks", || waiters(&mut c) == 1);
    s.shift(-5000);
    let r = w.reply_within(Duration::from_secs(9), "b's wait");
    let took = sent.elapsed();
    assert!(r.is_nil(), "{r:?}");
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_millis(3500),
        "a WAIT 1500 took {took:?} with the wall clock stepped back 5 s"
    );
    // Forward: a WAIT 3000 is not over at once when the wall clock jumps 10 s ahead.
    let sent = Instant::now();
    w.send_text(&["RWLOCK.WLOCK", "k", "c", "1000", "WAIT", "3000"]);
    until(Duration::from_secs(5), "c parks", || waiters(&mut c) == 1);
    s.shift(5000);
    let r = w.reply_within(Duration::from_secs(9), "c's wait");
    let took = sent.elapsed();
    assert!(r.is_nil(), "{r:?}");
    assert!(
        took >= Duration::from_millis(3000) && took < Duration::from_millis(5000),
        "a WAIT 3000 took {took:?} with the wall clock stepped 10 s ahead"
    );
    // The holder's lease (60 s from the start) still runs: absolute deadlines.
    token(&r!(c, "RWLOCK.RENEW", "k", "a", 60_000));
}

/// Item 7, in the lobby: a request parked while grants are held (a quarantine) keeps its
/// wait's length whatever the wall clock does meanwhile, and is answered once.
#[test]
fn a_lobby_wait_is_not_lengthened_by_a_backward_step_of_the_wall_clock() {
    let s = Shifted::start(debug_opts());
    let mut c = conn(&s.server);
    if !s.steps(&mut c) {
        return;
    }
    // A quarantine after a load: grants are held, requests wait in the lobby.
    r!(c, "CONFIG", "SET", "lease.quarantine", "30000");
    r!(c, "DEBUG", "RELOAD");
    assert!(quarantine_left(&mut c) > 20_000);
    let mut w = Sock::connect(s.server.port);
    let sent = Instant::now();
    w.send_text(&["RWLOCK.WLOCK", "q", "b", "1000", "WAIT", "1500"]);
    until(Duration::from_secs(5), "b parks in the lobby", || {
        waiters(&mut c) == 1
    });
    s.shift(-5000);
    let r = w.reply_within(Duration::from_secs(9), "b's wait");
    let took = sent.elapsed();
    assert!(r.is_nil(), "{r:?}");
    assert!(
        took < Duration::from_millis(3500),
        "a WAIT 1500 in the lobby took {took:?} with the wall clock stepped back 5 s"
    );
    assert!(
        w.try_reply(Duration::from_millis(300)).unwrap().is_none(),
        "answered twice"
    );
}

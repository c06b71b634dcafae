//! Durability: RDB (SAVE, BGSAVE, DEBUG RELOAD), AOF (fsync always / everysec, rewrites with
//! and without the RDB preamble), DUMP/RESTORE, COPY and MIGRATE keep every live hold with
//! its token and absolute deadline, never revive a lease that lapsed while the server was
//! down, and never let a token or a term go backwards.

mod fixture;

use std::time::Duration;

use fixture::*;
use redis_lease_testkit::prelude::*;

/// Checks the state after a restart (or reload) that happened once the short leases ended.
fn verify(s: &Server, c: &mut Connection, fx: &Fixture, what: &str) {
    let ctx = |k: &str| format!("{what}: {k}; log:\n{}", s.log());
    for (k, before) in &fx.locks {
        assert_same_lock(&ctx(k), before, &lock_info(c, k), true);
    }
    for (k, before) in &fx.leaders {
        assert_same_leader(&ctx(k), before, &leader(c, k));
    }
    assert_same_lock(
        &ctx("lk:mixed"),
        &fx.mixed_after,
        &lock_info(c, "lk:mixed"),
        true,
    );
    for k in &fx.gone_locks {
        let info = lock_info(c, k);
        assert_eq!(info.mode, "none", "{}", ctx(k));
        assert!(info.holders.is_empty(), "{}: {info:?}", ctx(k));
    }
    for k in &fx.gone_leaders {
        assert!(leader(c, k).is_none(), "{}", ctx(k));
    }
    let gone = eventually(Duration::from_secs(5), || {
        fx.gone_locks
            .iter()
            .chain(&fx.gone_leaders)
            .all(|k| exists(c, k) == 0)
    });
    assert!(gone, "{}", ctx("lapsed keys still exist"));
    let settled = eventually(Duration::from_secs(5), || {
        info_int(c, "lease", "lease_holders") == fx.live_holders
            && info_int(c, "lease", "lease_keys") == fx.live_keys
            && dbsize(c) == fx.live_keys
    });
    assert!(
        settled,
        "{}: lease_holders {} lease_keys {} dbsize {}",
        what,
        info_int(c, "lease", "lease_holders"),
        info_int(c, "lease", "lease_keys"),
        dbsize(c)
    );
}

/// After `verify`: holds still work as before, and every new token exceeds the old ones.
fn verify_tokens_move_on(c: &mut Connection, fx: &Fixture, what: &str) {
    let r1 = fx.locks[0].1.holder("r1", "read").unwrap().token;
    assert_eq!(
        rlock(c, "lk:shared", "r1", LONG_TTL),
        Some(r1),
        "{what}: r1's reentrant grant keeps its token"
    );
    assert_eq!(
        wlock(c, "lk:shared", "x", LONG_TTL),
        None,
        "{what}: readers hold it"
    );
    assert_eq!(
        wlock(c, "lk:writer", "x", LONG_TTL),
        None,
        "{what}: w2 holds it"
    );
    let fresh = [
        rlock(c, "lk:shared", "r3", LONG_TTL).unwrap(),
        wlock(c, "lk:gone", "g2", LONG_TTL).unwrap(),
        wlock(c, "lk:short", "s9", LONG_TTL).unwrap(),
        wlock(c, "lk:brand-new", "n", LONG_TTL).unwrap(),
        campaign(c, "el:short", "cs2", LONG_TTL).unwrap(),
        campaign(c, "el:brand-new", "cn", LONG_TTL).unwrap(),
    ];
    for t in fresh {
        assert!(
            t > fx.max_token,
            "{what}: new token {t} not above the old high-water {}",
            fx.max_token
        );
    }
    assert_eq!(
        campaign(c, "el", "c3", LONG_TTL),
        None,
        "{what}: c2 still leads"
    );
}

fn save(c: &mut Connection) {
    let r: String = redis::cmd("SAVE").query(c).unwrap();
    assert_eq!(r, "OK");
}

fn bgsave(c: &mut Connection) {
    let before = info_int(c, "persistence", "rdb_last_save_time");
    // LASTSAVE has second resolution: make sure the next save is seen as new.
    while now_ms() / 1000 == before {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _: String = redis::cmd("BGSAVE").query(c).unwrap();
    let done = eventually(Duration::from_secs(30), || {
        info_int(c, "persistence", "rdb_bgsave_in_progress") == 0
            && info_int(c, "persistence", "rdb_last_save_time") > before
    });
    assert!(done, "BGSAVE did not finish");
    assert_eq!(
        info_field(c, "persistence", "rdb_last_bgsave_status").as_deref(),
        Some("ok")
    );
}

/// Kills the server with SIGKILL, waits until the short leases ended, starts it again.
fn kill_wait_restart(s: &mut Server, fx: &Fixture, opts: Option<Options>) -> Connection {
    s.kill9();
    sleep_until(fx.short_deadline, 300);
    s.restart(opts);
    conn(s)
}

#[test]
fn rdb_save_kill9_restart_keeps_live_holds_and_drops_lapsed() {
    let mut s = debug_server();
    let mut c = conn(&s);
    let fx = populate(&mut c);
    save(&mut c);
    let mut c = kill_wait_restart(&mut s, &fx, None);
    verify(&s, &mut c, &fx, "SAVE + kill -9 + restart");
    verify_tokens_move_on(&mut c, &fx, "SAVE + restart");
}

#[test]
fn rdb_bgsave_kill9_restart_keeps_live_holds_and_drops_lapsed() {
    let mut s = debug_server();
    let mut c = conn(&s);
    let fx = populate(&mut c);
    bgsave(&mut c);
    let mut c = kill_wait_restart(&mut s, &fx, None);
    verify(&s, &mut c, &fx, "BGSAVE + kill -9 + restart");
    verify_tokens_move_on(&mut c, &fx, "BGSAVE + restart");
}

#[test]
fn rdb_shutdown_save_restart_keeps_live_holds() {
    let mut s = debug_server();
    let mut c = conn(&s);
    let fx = populate(&mut c);
    s.shutdown(true);
    sleep_until(fx.short_deadline, 300);
    s.restart(None);
    let mut c = conn(&s);
    verify(&s, &mut c, &fx, "SHUTDOWN SAVE + restart");
    verify_tokens_move_on(&mut c, &fx, "SHUTDOWN SAVE + restart");
}

#[test]
fn debug_reload_keeps_live_holds() {
    let s = debug_server();
    let mut c = conn(&s);
    let fx = populate(&mut c);
    // Reload once with the short leases alive, once after they ended.
    let r: String = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    assert_eq!(r, "OK");
    for (k, before) in &fx.locks {
        assert_same_lock(
            &format!("DEBUG RELOAD: {k}"),
            before,
            &lock_info(&mut c, k),
            true,
        );
    }
    let short = lock_info(&mut c, "lk:short");
    assert_eq!(
        short.holders.len(),
        1,
        "short lock alive after the first reload"
    );
    sleep_until(fx.short_deadline, 300);
    let r: String = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    assert_eq!(r, "OK");
    verify(&s, &mut c, &fx, "DEBUG RELOAD");
    verify_tokens_move_on(&mut c, &fx, "DEBUG RELOAD");
}

/// Writes `LEASE.APPLY` records with tokens far above this machine's clock floor (as a master
/// whose clock ran 10 minutes ahead would have handed out) into the AOF of a stopped server,
/// and starts it again: the server then knows tokens only its high-water mark can carry.
fn forge_future_tokens(s: &mut Server, opts: Options) -> (i64, i64) {
    s.kill9();
    let future = (now_ms() + 600_000) * 1000;
    let deadline = (now_ms() + LONG_TTL as i64).to_string();
    let (lock_token, term) = (future, future + 5);
    let mut records = resp(&[
        "LEASE.APPLY",
        "hw:lock",
        "rwlock",
        "GRANT",
        "ghost",
        "write",
        &deadline,
        &lock_token.to_string(),
    ]);
    records.extend(resp(&[
        "LEASE.APPLY",
        "hw:el",
        "leader",
        "GRANT",
        "boss",
        "write",
        &deadline,
        &term.to_string(),
    ]));
    let incr = aof_incr_path(s);
    let mut bytes = std::fs::read(&incr).unwrap();
    bytes.extend(records);
    std::fs::write(&incr, bytes).unwrap();
    s.restart(Some(opts));
    let mut c = conn(s);
    let info = lock_info(&mut c, "hw:lock");
    assert_eq!(
        info.holder("ghost", "write").map(|h| h.token),
        Some(lock_token),
        "forged AOF record loaded; log:\n{}",
        s.log()
    );
    assert_eq!(leader(&mut c, "hw:el").map(|l| l.term), Some(term));
    (lock_token, term)
}

fn aof_opts(fsync: &str) -> Options {
    debug_opts()
        .arg("appendonly", "yes")
        .arg("appendfsync", fsync)
}

/// Deletes the forged keys, so only the server-wide high-water mark remembers their tokens.
fn delete_forged(c: &mut Connection) {
    let n: i64 = redis::cmd("DEL")
        .arg("hw:lock")
        .arg("hw:el")
        .query(c)
        .unwrap();
    assert_eq!(n, 2);
}

fn assert_above_forged(c: &mut Connection, lock_token: i64, term: i64, what: &str) {
    let t = wlock(c, "hw:lock", "new", LONG_TTL).unwrap();
    assert!(
        t > lock_token,
        "{what}: lock token {t} <= {lock_token} before the restart"
    );
    let t = wlock(c, "hw:other", "new", LONG_TTL).unwrap();
    assert!(
        t > term,
        "{what}: token {t} <= {term} (server-wide high-water)"
    );
    let t = campaign(c, "hw:el", "new", LONG_TTL).unwrap();
    assert!(t > term, "{what}: term {t} <= {term} before the restart");
}

#[test]
fn rdb_restart_keeps_token_high_water_of_deleted_keys() {
    let mut s = Server::with(aof_opts("always"));
    let (lock_token, term) = forge_future_tokens(&mut s, aof_opts("always"));
    let mut c = conn(&s);
    delete_forged(&mut c);
    save(&mut c);
    // Restart from the RDB file alone.
    s.kill9();
    s.restart(Some(debug_opts()));
    let mut c = conn(&s);
    assert_eq!(dbsize(&mut c), 0);
    assert!(
        info_int(&mut c, "lease", "lease_token_high_water") >= term,
        "high-water mark after restart; log:\n{}",
        s.log()
    );
    assert_above_forged(&mut c, lock_token, term, "RDB restart");
}

#[test]
fn aof_restart_keeps_token_high_water_of_deleted_keys() {
    let mut s = Server::with(aof_opts("always"));
    let (lock_token, term) = forge_future_tokens(&mut s, aof_opts("always"));
    let mut c = conn(&s);
    delete_forged(&mut c);
    s.kill9();
    s.restart(None);
    let mut c = conn(&s);
    assert_eq!(dbsize(&mut c), 0);
    assert_above_forged(&mut c, lock_token, term, "AOF restart");
}

fn rewrite_aof(c: &mut Connection) {
    wait_persistence_idle(c);
    let _: String = redis::cmd("BGREWRITEAOF").query(c).unwrap();
    wait_persistence_idle(c);
    assert_eq!(
        info_field(c, "persistence", "aof_last_bgrewrite_status").as_deref(),
        Some("ok")
    );
}

/// The base file of the AOF after a rewrite: (name, bytes).
fn aof_base(s: &Server) -> (String, Vec<u8>) {
    aof_files(s)
        .into_iter()
        .find(|(n, _)| n.contains(".base."))
        .expect("a base file")
}

/// `keeper`: another lock key stays held through the rewrite. Without the RDB preamble the
/// high-water mark rides on the LEASE.APPLY records of the keys that still exist, and with no
/// lock key left at all on a record the module writes to the rewrite's new incremental file.
fn high_water_after_rewrite(preamble: &str, keeper: bool) {
    let o = aof_opts("always").arg("aof-use-rdb-preamble", preamble);
    let mut s = Server::with(o.clone());
    let (lock_token, term) = forge_future_tokens(&mut s, o);
    let mut c = conn(&s);
    delete_forged(&mut c);
    if keeper {
        let t: Option<i64> = redis::cmd("RWLOCK.WLOCK")
            .arg("keeper")
            .arg("k")
            .arg(LONG_TTL)
            .query(&mut c)
            .unwrap();
        assert!(t.is_some());
    }
    rewrite_aof(&mut c);
    s.kill9();
    s.restart(None);
    let mut c = conn(&s);
    assert_eq!(dbsize(&mut c), i64::from(keeper));
    assert_above_forged(
        &mut c,
        lock_token,
        term,
        &format!("BGREWRITEAOF (aof-use-rdb-preamble {preamble}) + restart"),
    );
}

#[test]
fn aof_rewrite_with_preamble_keeps_token_high_water_of_deleted_keys() {
    high_water_after_rewrite("yes", false);
}

#[test]
fn aof_rewrite_without_preamble_keeps_token_high_water_of_deleted_keys() {
    high_water_after_rewrite("no", true);
}

/// Issue 20, item 6: with no lock key at all when the AOF is rewritten without an RDB
/// preamble, tokens still never go backward after a restart.
#[test]
fn aof_rewrite_without_preamble_or_any_lock_key_keeps_token_high_water() {
    high_water_after_rewrite("no", false);
}

/// Every GRANT / RENEW / HOLD deadline in the AOF commands is an absolute time (ms since the
/// epoch) within the test's window; no command with a relative ttl was logged.
fn assert_aof_is_effects(cmds: &[Vec<String>], from: i64, what: &str) {
    let to = now_ms() + LONG_TTL as i64 + 60_000;
    let mut applies = 0;
    for cmd in cmds {
        let name = cmd[0].to_ascii_uppercase();
        // A give-back that was all its command did is logged as it came: it names no time.
        let own = ["RWLOCK.UNLOCK", "LEADER.RESIGN", "SEMAPHORE.RELEASE"].contains(&name.as_str());
        assert!(
            own || !(name.starts_with("RWLOCK.") || name.starts_with("LEADER.")),
            "{what}: the AOF holds a relative command: {cmd:?}"
        );
        if name != "LEASE.APPLY" {
            continue;
        }
        applies += 1;
        let mut i = 3;
        while i < cmd.len() {
            let (deadline, used) = match cmd[i].to_ascii_uppercase().as_str() {
                "GRANT" => (Some(&cmd[i + 3]), 5),
                "RENEW" => (Some(&cmd[i + 2]), 3),
                "HOLD" => (Some(&cmd[i + 4]), 6),
                "RELEASE" => (None, 2),
                "DROP" => (None, 3),
                "LAST" | "HIGH" => (None, 2),
                other => panic!("{what}: unknown op {other} in {cmd:?}"),
            };
            if let Some(d) = deadline {
                let d: i64 = d.parse().unwrap();
                assert!(
                    d >= from && d <= to,
                    "{what}: deadline {d} is not absolute (window {from}..{to}) in {cmd:?}"
                );
            }
            i += used;
        }
    }
    assert!(applies > 0, "{what}: no LEASE.APPLY in the AOF");
}

fn aof_kill9_restart(fsync: &str) {
    let from = now_ms();
    let mut s = Server::with(aof_opts(fsync));
    let mut c = conn(&s);
    let fx = populate(&mut c);
    if fsync != "always" {
        std::thread::sleep(Duration::from_millis(1200));
    }
    let incr = std::fs::read(aof_incr_path(&s)).unwrap();
    let cmds = parse_aof(&incr);
    assert_aof_is_effects(&cmds, from, &format!("appendfsync {fsync}"));
    // The short write lock's grant carries its absolute deadline.
    let grant = cmds
        .iter()
        .find(|c| c.len() >= 8 && c[1] == "lk:short" && c[3] == "GRANT" && c[4] == "s")
        .unwrap_or_else(|| panic!("no GRANT of lk:short in {cmds:?}"));
    let d: i64 = grant[6].parse().unwrap();
    assert!(
        (d - fx.short_deadline).abs() <= DEADLINE_TOLERANCE_MS,
        "GRANT deadline {d} vs expected {}",
        fx.short_deadline
    );
    let mut c = kill_wait_restart(&mut s, &fx, None);
    verify(
        &s,
        &mut c,
        &fx,
        &format!("AOF appendfsync {fsync} + kill -9"),
    );
    verify_tokens_move_on(&mut c, &fx, &format!("AOF appendfsync {fsync}"));
}

#[test]
fn aof_fsync_always_kill9_restart_keeps_live_holds_and_drops_lapsed() {
    aof_kill9_restart("always");
}

#[test]
fn aof_fsync_everysec_kill9_restart_keeps_live_holds_and_drops_lapsed() {
    aof_kill9_restart("everysec");
}

#[test]
fn aof_restart_long_after_the_ttl_revives_nothing() {
    let mut s = Server::with(aof_opts("always"));
    let mut c = conn(&s);
    let ttl = 300;
    let t = wlock(&mut c, "lk:w", "w", ttl).unwrap();
    assert_eq!(wlock(&mut c, "lk:w", "w", ttl), Some(t));
    rlock(&mut c, "lk:w", "w", ttl).unwrap();
    rlock(&mut c, "lk:r", "a", ttl).unwrap();
    rlock(&mut c, "lk:r", "b", ttl).unwrap();
    let term = campaign(&mut c, "el", "c", ttl).unwrap();
    let high = info_int(&mut c, "lease", "lease_token_high_water");
    assert!(high >= term);
    s.kill9();
    std::thread::sleep(Duration::from_millis(ttl * 8));
    s.restart(None);
    let mut c = conn(&s);
    for k in ["lk:w", "lk:r"] {
        let info = lock_info(&mut c, k);
        assert!(info.holders.is_empty(), "{k} revived: {info:?}");
        assert_eq!(info.mode, "none");
    }
    assert!(leader(&mut c, "el").is_none(), "leader revived");
    let empty = eventually(Duration::from_secs(5), || {
        dbsize(&mut c) == 0 && info_int(&mut c, "lease", "lease_holders") == 0
    });
    assert!(empty, "keys left after the restart; log:\n{}", s.log());
    // A second restart (the AOF now also holds the lapses) still revives nothing.
    s.kill9();
    s.restart(None);
    let mut c = conn(&s);
    assert_eq!(dbsize(&mut c), 0);
    let t2 = wlock(&mut c, "lk:w", "w", ttl).unwrap();
    assert!(t2 > high, "token {t2} after restart <= {high} before");
}

fn aof_rewrite_restart(preamble: &str) {
    let from = now_ms();
    let o = aof_opts("always").arg("aof-use-rdb-preamble", preamble);
    let mut s = Server::with(o);
    let mut c = conn(&s);
    let fx = populate(&mut c);
    rewrite_aof(&mut c);
    assert!(
        now_ms() < fx.short_deadline,
        "the rewrite took longer than the short leases"
    );
    let (name, base) = aof_base(&s);
    if preamble == "yes" {
        assert!(name.ends_with(".rdb"), "base file {name}");
        // Redis writes "REDIS...", Valkey 9 "VALKEY...".
        assert!(
            base.starts_with(b"REDIS") || base.starts_with(b"VALKEY"),
            "base file is an RDB"
        );
    } else {
        assert!(name.ends_with(".aof"), "base file {name}");
        let cmds = parse_aof(&base);
        assert_aof_is_effects(&cmds, from, "rewritten AOF");
        // One command per key: its last token and the high-water mark, then its holders, so
        // the key it makes is never empty (an empty one would be deleted and lose LAST).
        let applies: Vec<&Vec<String>> = cmds
            .iter()
            .filter(|c| c[0].eq_ignore_ascii_case("LEASE.APPLY"))
            .collect();
        let holds: usize = applies
            .iter()
            .map(|c| c.iter().filter(|a| *a == "HOLD").count())
            .sum();
        // r1, r2, w, w2, rn, a, b, s, s1, s2, c2, cs
        assert_eq!(holds, 12, "HOLD records in {cmds:?}");
        assert!(
            applies.iter().all(|c| c[3] == "LAST"
                && c[5] == "HIGH"
                && c.get(7).map(String::as_str) == Some("HOLD")),
            "each key's command starts with LAST, HIGH, then its holders: {cmds:?}"
        );
    }
    let mut c = kill_wait_restart(&mut s, &fx, None);
    let what = format!("BGREWRITEAOF (aof-use-rdb-preamble {preamble}) + kill -9");
    verify(&s, &mut c, &fx, &what);
    verify_tokens_move_on(&mut c, &fx, &what);
}

#[test]
fn aof_rewrite_with_rdb_preamble_then_restart_keeps_state() {
    aof_rewrite_restart("yes");
}

#[test]
fn aof_rewrite_without_rdb_preamble_then_restart_keeps_state() {
    aof_rewrite_restart("no");
}

/// A key with a short writer, to check that a copied or restored key still lapses by itself
/// and hands over to a WAIT-er.
fn short_writer(c: &mut Connection, key: &str, ttl: u64) -> (i64, i64) {
    let t = wlock(c, key, "s", ttl).unwrap();
    let deadline = lock_info(c, key).holder("s", "write").unwrap().deadline;
    (t, deadline)
}

/// Parks a writer on `key` (db `db`) and checks it is granted when the short writer's lease
/// (ending at `deadline`, token `old`) lapses.
fn waiter_gets_it_at_lapse(s: &Server, db: i64, key: &str, old: i64, deadline: i64) {
    let mut c = conn_db(s, db);
    let waiting = info_int(&mut c, "lease", "lease_waiters");
    let h = spawn_wait_db(
        s,
        db,
        &["RWLOCK.WLOCK", key, "waiter", "10000", "WAIT", "10000"],
    );
    await_lease_waiters(&mut c, waiting + 1);
    assert!(
        now_ms() < deadline,
        "{key}: parked too late to test the hand-off"
    );
    let got = h.join().unwrap();
    let at = now_ms();
    let t = got
        .unwrap_or_else(|e| panic!("{key}: WAIT-er got an error: {e}"))
        .unwrap_or_else(|| panic!("{key}: WAIT-er timed out; log:\n{}", s.log()));
    assert!(t > old, "{key}: hand-off token {t} <= {old}");
    assert!(at >= deadline - 5, "{key}: granted before the lease ended");
    assert!(
        at <= deadline + 3000,
        "{key}: granted long after the lease ended"
    );
    let info = lock_info(&mut c, key);
    assert_eq!(info.holders.len(), 1, "{key}: {info:?}");
    assert_eq!(
        (info.holders[0].owner.as_str(), info.holders[0].token),
        ("waiter", t)
    );
}

fn dump(c: &mut Connection, key: &str) -> Vec<u8> {
    redis::cmd("DUMP")
        .arg(key)
        .query::<Option<Vec<u8>>>(c)
        .unwrap()
        .unwrap_or_else(|| panic!("DUMP {key}: nil"))
}

fn restore(c: &mut Connection, key: &str, payload: &[u8], replace: bool) {
    let mut cmd = redis::cmd("RESTORE");
    cmd.arg(key).arg(0).arg(payload);
    if replace {
        cmd.arg("REPLACE");
    }
    let r: String = cmd
        .query(c)
        .unwrap_or_else(|e| panic!("RESTORE {key}: {e}"));
    assert_eq!(r, "OK");
}

#[test]
fn dump_restore_keeps_holders_tokens_and_lapses() {
    let s = debug_server();
    let mut c = conn(&s);
    let fx = populate(&mut c);
    for (k, before) in &fx.locks {
        let payload = dump(&mut c, k);
        let copy = format!("{k}:restored");
        restore(&mut c, &copy, &payload, false);
        assert_same_lock(
            &format!("RESTORE {k} as {copy}"),
            before,
            &lock_info(&mut c, &copy),
            true,
        );
        // Into the same name, after DEL, and with REPLACE over itself.
        let _: i64 = redis::cmd("DEL").arg(*k).query(&mut c).unwrap();
        restore(&mut c, k, &payload, false);
        assert_same_lock(&format!("RESTORE {k}"), before, &lock_info(&mut c, k), true);
        restore(&mut c, k, &payload, true);
        assert_same_lock(
            &format!("RESTORE {k} REPLACE"),
            before,
            &lock_info(&mut c, k),
            true,
        );
    }
    let payload = dump(&mut c, "el");
    restore(&mut c, "el:restored", &payload, false);
    assert_same_leader(
        "RESTORE el",
        &fx.leaders[0].1,
        &leader(&mut c, "el:restored"),
    );
    assert_eq!(
        campaign(&mut c, "el:restored", "other", LONG_TTL),
        None,
        "the restored leader leads"
    );
    // The restored holders are real holders: a writer is refused, the reentrant read keeps
    // its token.
    let r1 = fx.locks[0].1.holder("r1", "read").unwrap().token;
    assert_eq!(wlock(&mut c, "lk:shared:restored", "x", 1000), None);
    assert_eq!(
        rlock(&mut c, "lk:shared:restored", "r1", LONG_TTL),
        Some(r1)
    );

    // Lapse and hand-off on restored keys.
    let (old, deadline) = short_writer(&mut c, "lk:ds", 1500);
    let payload = dump(&mut c, "lk:ds");
    restore(&mut c, "lk:ds:waited", &payload, false);
    restore(&mut c, "lk:ds:alone", &payload, false);
    assert_eq!(
        lock_info(&mut c, "lk:ds:alone")
            .holder("s", "write")
            .map(|h| h.token),
        Some(old)
    );
    waiter_gets_it_at_lapse(&s, 0, "lk:ds:waited", old, deadline);
    let gone = eventually(Duration::from_secs(5), || {
        exists(&mut c, "lk:ds:alone") == 0 && exists(&mut c, "lk:ds") == 0
    });
    assert!(gone, "restored key with a lapsed lease still exists");
}

#[test]
fn copy_keeps_holders_and_tokens_also_into_another_db() {
    let s = debug_server();
    let mut c = conn(&s);
    let mut c1 = conn_db(&s, 1);
    let fx = populate(&mut c);
    for (k, before) in &fx.locks {
        let to = format!("{k}:copy");
        let n: i64 = redis::cmd("COPY").arg(*k).arg(&to).query(&mut c).unwrap();
        assert_eq!(n, 1, "COPY {k} {to}");
        assert_same_lock(
            &format!("COPY {k} {to}"),
            before,
            &lock_info(&mut c, &to),
            true,
        );
        let n: i64 = redis::cmd("COPY")
            .arg(*k)
            .arg(*k)
            .arg("DB")
            .arg(1)
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 1, "COPY {k} {k} DB 1");
        assert_same_lock(
            &format!("COPY {k} {k} DB 1"),
            before,
            &lock_info(&mut c1, k),
            true,
        );
        // The original is untouched.
        assert_same_lock(
            &format!("{k} after COPY"),
            before,
            &lock_info(&mut c, k),
            true,
        );
    }
    let n: i64 = redis::cmd("COPY")
        .arg("el")
        .arg("el")
        .arg("DB")
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    assert_same_leader("COPY el el DB 1", &fx.leaders[0].1, &leader(&mut c1, "el"));
    // Copies are independent: releasing in the copy leaves the original alone.
    assert_eq!(unlock(&mut c1, "lk:writer", "w2"), 1);
    assert_same_lock(
        "original after UNLOCK in the copy",
        &fx.locks[2].1,
        &lock_info(&mut c, "lk:writer"),
        true,
    );

    // Lapse and hand-off on copies, in db 0 and db 1.
    let (old, deadline) = short_writer(&mut c, "lk:cs", 1500);
    let n: i64 = redis::cmd("COPY")
        .arg("lk:cs")
        .arg("lk:cs2")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let n: i64 = redis::cmd("COPY")
        .arg("lk:cs")
        .arg("lk:cs")
        .arg("DB")
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let n: i64 = redis::cmd("COPY")
        .arg("lk:cs")
        .arg("lk:cs-alone")
        .arg("DB")
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    let h0 = spawn_wait_db(
        &s,
        0,
        &["RWLOCK.WLOCK", "lk:cs2", "waiter", "10000", "WAIT", "10000"],
    );
    await_lease_waiters(&mut c, 1);
    waiter_gets_it_at_lapse(&s, 1, "lk:cs", old, deadline);
    let t0 = h0
        .join()
        .unwrap()
        .unwrap()
        .expect("WAIT-er on the db 0 copy");
    assert!(t0 > old);
    let gone = eventually(Duration::from_secs(5), || {
        exists(&mut c1, "lk:cs-alone") == 0 && exists(&mut c, "lk:cs") == 0
    });
    assert!(gone, "copies with a lapsed lease still exist");
}

#[test]
fn migrate_to_a_second_server_keeps_holders_and_tokens() {
    let a = debug_server();
    let b = debug_server();
    let mut ca = conn(&a);
    let mut cb = conn(&b);
    let fx = populate(&mut ca);
    let migrate = |c: &mut Connection, key: &str, copy: bool| {
        let mut cmd = redis::cmd("MIGRATE");
        cmd.arg("127.0.0.1").arg(b.port).arg(key).arg(0).arg(5000);
        if copy {
            cmd.arg("COPY");
        }
        let r: String = cmd
            .query(c)
            .unwrap_or_else(|e| panic!("MIGRATE {key}: {e}"));
        assert_eq!(r, "OK", "MIGRATE {key}");
    };
    for (i, (k, before)) in fx.locks.iter().enumerate() {
        let copy = i % 2 == 0;
        migrate(&mut ca, k, copy);
        assert_same_lock(
            &format!("MIGRATE {k}"),
            before,
            &lock_info(&mut cb, k),
            true,
        );
        assert_eq!(
            exists(&mut ca, k) == 1,
            copy,
            "MIGRATE {k} (COPY: {copy}) on the source"
        );
    }
    migrate(&mut ca, "el", false);
    assert_same_leader("MIGRATE el", &fx.leaders[0].1, &leader(&mut cb, "el"));
    assert_eq!(campaign(&mut cb, "el", "other", LONG_TTL), None);
    // Tokens on the target go on above the migrated ones.
    let t = rlock(&mut cb, "lk:shared", "r3", LONG_TTL).unwrap();
    assert!(t > fx.locks[0].1.max_token(), "token {t} on the target");
    let old_term = fx.leaders[0].1.as_ref().unwrap().term;
    assert_eq!(resign(&mut cb, "el", "c2"), 1);
    let term = campaign(&mut cb, "el", "c9", LONG_TTL).unwrap();
    assert!(term > old_term, "term {term} on the target");

    // Lapse and hand-off on the target.
    let (old, deadline) = short_writer(&mut ca, "lk:ms", 1500);
    migrate(&mut ca, "lk:ms", false);
    assert_eq!(
        lock_info(&mut cb, "lk:ms").holder("s", "write").map(|h| (
            h.token,
            (h.deadline - deadline).abs() <= DEADLINE_TOLERANCE_MS
        )),
        Some((old, true))
    );
    waiter_gets_it_at_lapse(&b, 0, "lk:ms", old, deadline);
}

/// Waiters are connections: a restart keeps the holders of a key that had waiters (which had
/// no Redis expiry then), drops the waiters, and prunes a lapsed lease of such a key by itself.
fn waiters_are_not_persisted(aof: bool) {
    let o = if aof {
        aof_opts("always")
    } else {
        debug_opts()
    };
    let mut s = Server::with(o);
    let mut c = conn(&s);
    let tl = wlock(&mut c, "lk:waited", "holder", LONG_TTL).unwrap();
    let ts = wlock(&mut c, "lk:waited-short", "holder", 1500).unwrap();
    let deadline = lock_info(&mut c, "lk:waited-short").holders[0].deadline;
    let term = campaign(&mut c, "el:waited", "c1", LONG_TTL).unwrap();
    let before = lock_info(&mut c, "lk:waited");
    let waiters = [
        spawn_wait(
            &s,
            &["RWLOCK.WLOCK", "lk:waited", "w1", "60000", "WAIT", "0"],
        ),
        spawn_wait(
            &s,
            &[
                "RWLOCK.RLOCK",
                "lk:waited-short",
                "w2",
                "60000",
                "WAIT",
                "0",
            ],
        ),
        spawn_wait(
            &s,
            &["LEADER.CAMPAIGN", "el:waited", "c2", "60000", "WAIT", "0"],
        ),
    ];
    await_lease_waiters(&mut c, 3);
    assert_eq!(lock_info(&mut c, "lk:waited").waiters, 1);
    if !aof {
        save(&mut c);
    }
    s.kill9();
    for w in waiters {
        assert!(w.join().unwrap().is_err(), "a WAIT-er was answered");
    }
    sleep_until(deadline, 300);
    s.restart(None);
    let mut c = conn(&s);
    let what = if aof { "AOF" } else { "RDB" };
    let after = lock_info(&mut c, "lk:waited");
    assert_same_lock(&format!("{what}: lk:waited"), &before, &after, true);
    assert_eq!(after.waiters, 0, "{what}: waiters came back");
    assert_eq!(info_int(&mut c, "lease", "lease_waiters"), 0);
    assert_eq!(after.holders[0].token, tl);
    assert_eq!(
        leader(&mut c, "el:waited").map(|l| (l.candidate, l.term)),
        Some(("c1".to_string(), term))
    );
    let short = lock_info(&mut c, "lk:waited-short");
    assert!(
        short.holders.is_empty(),
        "{what}: lapsed lease revived: {short:?}"
    );
    let gone = eventually(Duration::from_secs(5), || {
        exists(&mut c, "lk:waited-short") == 0
    });
    assert!(
        gone,
        "{what}: lk:waited-short left behind; log:\n{}",
        s.log()
    );
    // With no waiter left, releasing the last hold removes the key.
    assert_eq!(unlock(&mut c, "lk:waited", "holder"), 1);
    assert!(
        exists(&mut c, "lk:waited") == 0,
        "{what}: key left after the last UNLOCK"
    );
    assert_eq!(resign(&mut c, "el:waited", "c1"), 1);
    assert!(exists(&mut c, "el:waited") == 0);
    let t = wlock(&mut c, "lk:waited-short", "new", 1000).unwrap();
    assert!(t > ts);
}

#[test]
fn rdb_restart_keeps_holders_of_keys_with_waiters_but_not_the_waiters() {
    waiters_are_not_persisted(false);
}

#[test]
fn aof_restart_keeps_holders_of_keys_with_waiters_but_not_the_waiters() {
    waiters_are_not_persisted(true);
}

/// RENAME and MOVE carry a lock key's holders and tokens to the new name or database.
#[test]
fn rename_and_move_keep_holders_and_tokens() {
    let s = debug_server();
    let mut c = conn(&s);
    let mut c1 = conn_db(&s, 1);
    let fx = populate(&mut c);
    let (k, before) = &fx.locks[0];
    let _: String = redis::cmd("RENAME")
        .arg(*k)
        .arg("renamed")
        .query(&mut c)
        .unwrap();
    assert_same_lock("RENAME", before, &lock_info(&mut c, "renamed"), true);
    let n: i64 = redis::cmd("MOVE")
        .arg("renamed")
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 1);
    assert_same_lock("MOVE", before, &lock_info(&mut c1, "renamed"), true);
    let _: String = redis::cmd("RENAME")
        .arg("el")
        .arg("el2")
        .query(&mut c)
        .unwrap();
    assert_same_leader("RENAME el", &fx.leaders[0].1, &leader(&mut c, "el2"));
}

/// After RENAME or MOVE, the lease of the moved key still lapses by itself and hands the lock
/// to a WAIT-er on the new name.
fn lapse_after(cmd: &[&str], db: i64, key: &str) {
    let s = debug_server();
    let mut c = conn(&s);
    let (old, deadline) = short_writer(&mut c, "k", 1500);
    let mut r = redis::cmd(cmd[0]);
    for a in &cmd[1..] {
        r.arg(*a);
    }
    let _: redis::Value = r.query(&mut c).unwrap();
    waiter_gets_it_at_lapse(&s, db, key, old, deadline);
}

#[test]
fn lapse_and_hand_off_after_rename() {
    lapse_after(&["RENAME", "k", "k2"], 0, "k2");
}

#[test]
fn lapse_and_hand_off_after_move() {
    lapse_after(&["MOVE", "k", "1"], 1, "k");
}

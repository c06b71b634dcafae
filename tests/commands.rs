//! The module on one server: every rule of docs/COMMANDS.md except waiting (see waiting.rs),
//! against a real redis-server with the module loaded. Each test starts its own server.

use std::thread::sleep;
use std::time::{Duration, Instant};

use rand::Rng;
use redis_lease_testkit::prelude::*;

/// A lease long enough never to lapse during a test.
const LONG: i64 = 60_000;

fn start() -> (Server, Connection) {
    let s = Server::start();
    let c = conn(&s);
    (s, c)
}

// ---------------------------------------------------------------------------------------------
// Granting rules

#[test]
fn readers_share_and_a_writer_excludes() {
    let (_s, mut c) = start();
    let t1 = token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG));
    let t2 = token(&r!(c, "RWLOCK.RLOCK", "k", "b", LONG));
    assert!(
        t2 > t1,
        "each new grant gets a larger token: {t1} then {t2}"
    );
    assert!(is_nil(&r!(c, "RWLOCK.WLOCK", "k", "w", LONG)));
    let i = lock_info(&mut c, "k");
    assert_eq!(i.mode, "read");
    assert_eq!(i.owners(), ["a", "b"]);
    assert_eq!(i.holder("a", "read").unwrap().token, t1);
    assert_eq!(i.holder("b", "read").unwrap().token, t2);
    assert_eq!(i.token, t2);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    assert!(
        is_nil(&r!(c, "RWLOCK.WLOCK", "k", "w", LONG)),
        "one reader left still excludes the writer"
    );
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "b")), 1);
    let t3 = token(&r!(c, "RWLOCK.WLOCK", "k", "w", LONG));
    assert!(t3 > t2);
    assert!(is_nil(&r!(c, "RWLOCK.RLOCK", "k", "r", LONG)));
    assert!(is_nil(&r!(c, "RWLOCK.WLOCK", "k", "w2", LONG)));
    let i = lock_info(&mut c, "k");
    assert_eq!(i.mode, "write");
    assert_eq!(i.owners(), ["w"]);
    assert_eq!(i.holder("w", "write").unwrap().count, 1);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "r")), 0, "r holds nothing");
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "w")), 1);
    assert_eq!(exists(&mut c, "k"), 0);
}

#[test]
fn reentrant_grants_need_one_unlock_each() {
    let (_s, mut c) = start();
    let t = token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG));
    assert_eq!(token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG)), t);
    assert_eq!(token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG)), t);
    let i = lock_info(&mut c, "k");
    assert_eq!(i.holders.len(), 1);
    assert_eq!(i.holder("a", "read").unwrap().count, 3);
    assert_eq!(i.token, t, "a reentrant grant hands out no new token");
    for left in [2, 1] {
        assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
        assert_eq!(
            lock_info(&mut c, "k").holder("a", "read").unwrap().count,
            left
        );
        assert_eq!(exists(&mut c, "k"), 1);
    }
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    assert_eq!(exists(&mut c, "k"), 0);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 0);

    let w = token(&r!(c, "RWLOCK.WLOCK", "k", "a", LONG));
    assert!(w > t);
    assert_eq!(token(&r!(c, "RWLOCK.WLOCK", "k", "a", LONG)), w);
    let i = lock_info(&mut c, "k");
    assert_eq!(i.mode, "write");
    assert_eq!(i.holder("a", "write").unwrap().count, 2);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    assert_eq!(lock_info(&mut c, "k").mode, "write");
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    assert_eq!(exists(&mut c, "k"), 0);
}

#[test]
fn a_writer_downgrades_and_unlock_releases_the_write_hold_first() {
    let (_s, mut c) = start();
    let t = token(&r!(c, "RWLOCK.WLOCK", "k", "a", LONG));
    assert_eq!(
        token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG)),
        t,
        "the writer's read hold keeps its token"
    );
    let i = lock_info(&mut c, "k");
    assert_eq!(i.mode, "write");
    assert_eq!(i.holder("a", "write").unwrap().count, 1);
    assert_eq!(i.holder("a", "read").unwrap().count, 1);
    assert!(is_nil(&r!(c, "RWLOCK.RLOCK", "k", "b", LONG)));
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    let i = lock_info(&mut c, "k");
    assert_eq!(i.mode, "read", "the write hold went first: {i:?}");
    assert!(i.holder("a", "write").is_none());
    assert_eq!(i.holder("a", "read").unwrap().count, 1);
    assert_eq!(i.holder("a", "read").unwrap().token, t);
    let tb = token(&r!(c, "RWLOCK.RLOCK", "k", "b", LONG));
    assert!(tb > t);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "b")), 1);
    assert_eq!(exists(&mut c, "k"), 0);
}

#[test]
fn a_sole_reader_upgrades_at_once_with_a_new_token() {
    let (_s, mut c) = start();
    let t1 = token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG));
    let t2 = token(&r!(c, "RWLOCK.WLOCK", "k", "a", LONG));
    assert!(t2 > t1, "an upgrade is a new grant: {t1} then {t2}");
    let i = lock_info(&mut c, "k");
    assert_eq!(i.mode, "write");
    assert_eq!(i.holder("a", "write").unwrap().count, 1);
    assert_eq!(i.holder("a", "write").unwrap().token, t2);
    assert_eq!(i.holder("a", "read").unwrap().count, 1);
    assert_eq!(i.token, t2);
    assert!(is_nil(&r!(c, "RWLOCK.RLOCK", "k", "b", LONG)));
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    let i = lock_info(&mut c, "k");
    assert_eq!(i.mode, "read");
    assert_eq!(i.holder("a", "read").unwrap().count, 1);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    assert_eq!(exists(&mut c, "k"), 0);
}

#[test]
fn an_upgrade_with_other_readers_is_refused() {
    let (_s, mut c) = start();
    token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG));
    token(&r!(c, "RWLOCK.RLOCK", "k", "b", LONG));
    let before = lock_info(&mut c, "k");
    assert!(is_nil(&r!(c, "RWLOCK.WLOCK", "k", "a", LONG)));
    assert!(is_nil(&r!(c, "RWLOCK.WLOCK", "k", "b", LONG)));
    assert_eq!(lock_info(&mut c, "k").shape(), before.shape());
    // Once the other reader is gone, the upgrade goes through.
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "b")), 1);
    let t = token(&r!(c, "RWLOCK.WLOCK", "k", "a", LONG));
    assert!(t > before.token);
}

#[test]
fn tokens_strictly_increase_across_releases_lapses_del_and_flushall() {
    let (_s, mut c) = start();
    let mut last = 0;
    let mut check = |c: &mut Connection, what: &str, v: Value| {
        let t = token(&v);
        assert!(t > last, "{what}: token {t} is not above {last}");
        last = t;
        assert_eq!(
            lock_info(c, "k").token,
            t,
            "{what}: INFO token is the last one"
        );
    };
    let v = r!(c, "RWLOCK.WLOCK", "k", "a", LONG);
    check(&mut c, "first", v);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    let v = r!(c, "RWLOCK.WLOCK", "k", "a", LONG);
    check(&mut c, "after release", v);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    let v = r!(c, "RWLOCK.RLOCK", "k", "b", 100);
    check(&mut c, "read", v);
    sleep(Duration::from_millis(300));
    let v = r!(c, "RWLOCK.RLOCK", "k", "b", LONG);
    check(&mut c, "after lapse", v);
    assert_eq!(int(&r!(c, "DEL", "k")), 1);
    let v = r!(c, "RWLOCK.WLOCK", "k", "b", LONG);
    check(&mut c, "after DEL", v);
    assert_eq!(text(&r!(c, "FLUSHALL")), "OK");
    let v = r!(c, "RWLOCK.RLOCK", "k", "c", LONG);
    check(&mut c, "after FLUSHALL", v);
    assert_eq!(text(&r!(c, "FLUSHALL", "SYNC")), "OK");
    let v = r!(c, "RWLOCK.WLOCK", "k", "c", LONG);
    check(&mut c, "after FLUSHALL SYNC", v);
    // Elections share the rule.
    let e1 = token(&r!(c, "LEADER.CAMPAIGN", "e", "x", LONG));
    assert!(e1 > last);
    assert_eq!(int(&r!(c, "DEL", "e")), 1);
    let e2 = token(&r!(c, "LEADER.CAMPAIGN", "e", "x", LONG));
    assert!(e2 > e1);
}

#[test]
fn renew_answers_the_token_and_sets_the_ttl() {
    let (_s, mut c) = start();
    let t = token(&r!(c, "RWLOCK.RLOCK", "k", "a", 10_000));
    assert_eq!(token(&r!(c, "RWLOCK.RENEW", "k", "a", 50_000)), t);
    let i = lock_info(&mut c, "k");
    let ttl = i.holder("a", "read").unwrap().ttl;
    assert!((45_000..=50_000).contains(&ttl), "INFO ttl {ttl}");
    assert_eq!(int(&r!(c, "PTTL", "k")), -1, "lock keys carry no Redis TTL");
    assert_eq!(i.token, t, "a renewal hands out no new token");
    // A renewal may also shorten the lease.
    assert_eq!(token(&r!(c, "RWLOCK.RENEW", "k", "a", 5_000)), t);
    let ttl = lock_info(&mut c, "k").holder("a", "read").unwrap().ttl;
    assert!((1..=5_000).contains(&ttl), "INFO ttl {ttl}");
    assert_eq!(int(&r!(c, "PTTL", "k")), -1, "lock keys carry no Redis TTL");
    // Non-holders and missing keys.
    assert!(is_nil(&r!(c, "RWLOCK.RENEW", "k", "b", 1_000)));
    assert!(is_nil(&r!(c, "RWLOCK.RENEW", "nokey", "a", 1_000)));
    assert_eq!(exists(&mut c, "nokey"), 0);
    // A writer's renewal (with a reentrant read hold) covers all its holds.
    let w = token(&r!(c, "RWLOCK.WLOCK", "kw", "a", 2_000));
    token(&r!(c, "RWLOCK.RLOCK", "kw", "a", 2_000));
    assert_eq!(token(&r!(c, "RWLOCK.RENEW", "kw", "a", 40_000)), w);
    let i = lock_info(&mut c, "kw");
    for m in ["read", "write"] {
        let ttl = i.holder("a", m).unwrap().ttl;
        assert!((35_000..=40_000).contains(&ttl), "{m} ttl {ttl}");
    }
    // A renewed lease outlives its first ttl.
    let t = token(&r!(c, "RWLOCK.WLOCK", "short", "a", 300));
    assert_eq!(token(&r!(c, "RWLOCK.RENEW", "short", "a", 5_000)), t);
    sleep(Duration::from_millis(500));
    let i = lock_info(&mut c, "short");
    assert_eq!(i.mode, "write", "renewed lease lapsed at its old deadline");
    assert_eq!(i.holder("a", "write").unwrap().token, t);
}

#[test]
fn each_holder_has_its_own_lease() {
    let (_s, mut c) = start();
    let ta = token(&r!(c, "RWLOCK.RLOCK", "k", "a", 400));
    let tb = token(&r!(c, "RWLOCK.RLOCK", "k", "b", 20_000));
    assert_eq!(int(&r!(c, "PTTL", "k")), -1, "lock keys carry no Redis TTL");
    // Renewing b does not prolong a.
    assert_eq!(token(&r!(c, "RWLOCK.RENEW", "k", "b", 30_000)), tb);
    let ta_ttl = lock_info(&mut c, "k").holder("a", "read").unwrap().ttl;
    assert!(ta_ttl <= 400, "a's lease moved with b's renewal: {ta_ttl}");
    sleep(Duration::from_millis(700));
    // a lapsed; b did not (its ttl and token are untouched).
    let i = lock_info(&mut c, "k");
    assert_eq!(i.owners(), ["b"], "{i:?}");
    let hb = i.holder("b", "read").unwrap();
    assert_eq!(hb.token, tb);
    assert!((25_000..=30_000).contains(&hb.ttl), "b's ttl {}", hb.ttl);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 0);
    // Renewing a (now) fails; a new RLOCK of a is a new grant.
    assert!(is_nil(&r!(c, "RWLOCK.RENEW", "k", "a", 1_000)));
    let ta2 = token(&r!(c, "RWLOCK.RLOCK", "k", "a", 300));
    assert!(ta2 > ta && ta2 > tb);
    // Renewing a (for long) does not touch b.
    assert_eq!(token(&r!(c, "RWLOCK.RENEW", "k", "a", 50_000)), ta2);
    let i = lock_info(&mut c, "k");
    let hb = i.holder("b", "read").unwrap();
    assert!(
        hb.ttl <= 30_000,
        "b's ttl moved with a's renewal: {}",
        hb.ttl
    );
    assert_eq!(int(&r!(c, "PTTL", "k")), -1, "lock keys carry no Redis TTL");
}

#[test]
fn the_key_disappears_with_its_last_hold() {
    let (_s, mut c) = start();
    token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG));
    token(&r!(c, "RWLOCK.RLOCK", "k", "b", LONG));
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    assert_eq!(exists(&mut c, "k"), 1);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "b")), 1);
    assert_eq!(exists(&mut c, "k"), 0);
    assert_eq!(int(&r!(c, "DBSIZE")), 0);

    // By itself when every holder lapsed: the module's timer ends every lease (no Redis TTL).
    token(&r!(c, "RWLOCK.RLOCK", "k", "a", 300));
    token(&r!(c, "RWLOCK.RLOCK", "k", "b", 900));
    assert_eq!(int(&r!(c, "PTTL", "k")), -1, "lock keys carry no Redis TTL");
    sleep(Duration::from_millis(500));
    assert_eq!(int(&r!(c, "DBSIZE")), 1, "b still holds");
    assert_eq!(int(&r!(c, "PTTL", "k")), -1, "lock keys carry no Redis TTL");
    // No command touches the key: the module's own wake-up removes it.
    let gone = eventually(Duration::from_secs(5), || {
        int(&r!(c, "DBSIZE")) == 0 && lease_info(&mut c)["lease_keys"] == "0"
    });
    assert!(gone, "lapsed key left behind: {:?}", lease_info(&mut c));
    assert_eq!(exists(&mut c, "k"), 0);
    assert_eq!(lease_info(&mut c)["lease_holders"], "0");

    // Same for an election.
    token(&r!(c, "LEADER.CAMPAIGN", "e", "x", 200));
    let gone = eventually(Duration::from_secs(5), || int(&r!(c, "DBSIZE")) == 0);
    assert!(gone);
    token(&r!(c, "LEADER.CAMPAIGN", "e", "x", LONG));
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "x")), 1);
    assert_eq!(exists(&mut c, "e"), 0);
}

// ---------------------------------------------------------------------------------------------
// RWLOCK.INFO

#[test]
fn info_reports_every_field_in_resp2_and_resp3() {
    let (_s, mut c) = start();
    let ta = token(&r!(c, "RWLOCK.RLOCK", "k", "a", 30_000));
    token(&r!(c, "RWLOCK.RLOCK", "k", "a", 30_000));
    let tb = token(&r!(c, "RWLOCK.RLOCK", "k", "b", 10_000));
    let raw = r!(c, "RWLOCK.INFO", "k");
    assert!(
        matches!(raw, Value::Array(_)),
        "RESP2: a flat array: {raw:?}"
    );
    let i = parse_lock_info(&raw);
    assert_eq!(i.mode, "read");
    assert_eq!(i.waiters, 0);
    assert_eq!(i.token, tb);
    assert_eq!(i.holders.len(), 2);
    let a = i.holder("a", "read").unwrap();
    assert_eq!((a.count, a.token), (2, ta));
    assert!((25_000..=30_000).contains(&a.ttl), "{a:?}");
    let b = i.holder("b", "read").unwrap();
    assert_eq!((b.count, b.token), (1, tb));
    assert!((5_000..=10_000).contains(&b.ttl), "{b:?}");

    let tw = token(&r!(c, "RWLOCK.WLOCK", "w", "c", 30_000));
    let iw = lock_info(&mut c, "w");
    assert_eq!(iw.mode, "write");
    assert_eq!(iw.holders.len(), 1);
    assert_eq!(iw.holder("c", "write").unwrap().token, tw);

    // RESP3: a real map, holders as maps.
    let hello = r!(c, "HELLO", "3");
    assert!(!is_err(&hello), "HELLO 3: {hello:?}");
    let raw = r!(c, "RWLOCK.INFO", "k");
    let Value::Map(m) = &raw else {
        panic!("RESP3 INFO is not a map: {raw:?}")
    };
    assert_eq!(m.len(), 5, "{raw:?}");
    let i3 = parse_lock_info(&raw);
    assert_eq!(i3.shape(), i.shape(), "RESP3 says what RESP2 said");
    let holders = &m.iter().find(|(k, _)| text(k) == "holders").unwrap().1;
    assert!(matches!(holders, Value::Array(_)), "holders: {holders:?}");
    for h in array(holders) {
        assert!(
            matches!(h, Value::Map(_)),
            "RESP3 holder is not a map: {h:?}"
        );
    }
    assert_eq!(lock_info(&mut c, "w").shape(), iw.shape());
    assert_eq!(lock_info(&mut c, "missing").mode, "none");
}

#[test]
fn info_of_a_missing_key_is_mode_none() {
    let (_s, mut c) = start();
    let i = lock_info(&mut c, "missing");
    assert_eq!(i.mode, "none");
    assert!(i.holders.is_empty());
    assert_eq!(i.waiters, 0);
    assert_eq!(exists(&mut c, "missing"), 0, "INFO creates nothing");
    // After everything lapsed (pruned or not), INFO says the same.
    token(&r!(c, "RWLOCK.WLOCK", "k", "a", 100));
    sleep(Duration::from_millis(250));
    let i = lock_info(&mut c, "k");
    assert_eq!(i.mode, "none", "{i:?}");
    assert!(i.holders.is_empty());
}

// ---------------------------------------------------------------------------------------------
// LEADER

#[test]
fn leader_campaign_renew_resign_current() {
    let (_s, mut c) = start();
    assert!(is_nil(&r!(c, "LEADER.CURRENT", "e")));
    assert!(is_nil(&r!(c, "LEADER.RENEW", "e", "a", 1_000)));
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "a")), 0);
    assert_eq!(exists(&mut c, "e"), 0);

    let t1 = token(&r!(c, "LEADER.CAMPAIGN", "e", "a", 10_000));
    assert!(is_nil(&r!(c, "LEADER.CAMPAIGN", "e", "b", 10_000)));
    let cur = r!(c, "LEADER.CURRENT", "e");
    let cur = array(&cur);
    assert_eq!(cur.len(), 3);
    assert_eq!(text(&cur[0]), "a");
    assert_eq!(int(&cur[1]), t1);
    assert!((5_000..=10_000).contains(&int(&cur[2])), "{cur:?}");

    // The leader campaigning again keeps its term and sets its lease.
    assert_eq!(token(&r!(c, "LEADER.CAMPAIGN", "e", "a", 40_000)), t1);
    let cur = r!(c, "LEADER.CURRENT", "e");
    let ttl = int(&array(&cur)[2]);
    assert!((35_000..=40_000).contains(&ttl), "ttl {ttl}");
    assert_eq!(token(&r!(c, "LEADER.RENEW", "e", "a", 3_000)), t1);
    let cur = r!(c, "LEADER.CURRENT", "e");
    let ttl = int(&array(&cur)[2]);
    assert!((1..=3_000).contains(&ttl), "renew may shorten: ttl {ttl}");
    assert_eq!(int(&r!(c, "PTTL", "e")), -1, "lock keys carry no Redis TTL");
    assert!(is_nil(&r!(c, "LEADER.RENEW", "e", "b", 1_000)));
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "b")), 0);
    assert_eq!(int(&array(&r!(c, "LEADER.CURRENT", "e"))[1]), t1);

    // Resign: nobody leads, the key is gone, the next term is larger.
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "a")), 1);
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "a")), 0);
    assert!(is_nil(&r!(c, "LEADER.CURRENT", "e")));
    assert_eq!(exists(&mut c, "e"), 0);
    let t2 = token(&r!(c, "LEADER.CAMPAIGN", "e", "b", 200));
    assert!(t2 > t1);
    // A lapse ends the term; the same candidate elected again gets a new term.
    sleep(Duration::from_millis(400));
    assert!(is_nil(&r!(c, "LEADER.CURRENT", "e")));
    assert!(is_nil(&r!(c, "LEADER.RENEW", "e", "b", 1_000)));
    let t3 = token(&r!(c, "LEADER.CAMPAIGN", "e", "b", LONG));
    assert!(t3 > t2);
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "b")), 1);
    let t4 = token(&r!(c, "LEADER.CAMPAIGN", "e", "b", LONG));
    assert!(t4 > t3, "re-election after resigning is a change of term");
    let cur = r!(c, "LEADER.CURRENT", "e");
    assert_eq!(text(&array(&cur)[0]), "b");
    assert_eq!(int(&array(&cur)[1]), t4);
}

// ---------------------------------------------------------------------------------------------
// Types

#[test]
fn type_names_and_wrongtype() {
    let (_s, mut c) = start();
    token(&r!(c, "RWLOCK.RLOCK", "lock", "a", LONG));
    token(&r!(c, "LEADER.CAMPAIGN", "elect", "a", LONG));
    assert_eq!(text(&r!(c, "SET", "str", "v")), "OK");
    assert_eq!(text(&r!(c, "TYPE", "lock")), "lease-rwl");
    assert_eq!(text(&r!(c, "TYPE", "elect")), "lease-ldr");
    for key in ["lock", "elect"] {
        let e = err(&r!(c, "GET", key));
        assert!(e.starts_with("WRONGTYPE"), "GET {key}: {e}");
    }
    let lock_before = lock_info(&mut c, "lock");
    let leader_on_lock = [
        vec!["LEADER.CAMPAIGN", "lock", "a", "1000"],
        vec!["LEADER.RENEW", "lock", "a", "1000"],
        vec!["LEADER.RESIGN", "lock", "a"],
        vec!["LEADER.CURRENT", "lock"],
    ];
    let rwlock_on = |key: &'static str| {
        vec![
            vec!["RWLOCK.RLOCK", key, "a", "1000"],
            vec!["RWLOCK.WLOCK", key, "a", "1000"],
            vec!["RWLOCK.UNLOCK", key, "a"],
            vec!["RWLOCK.RENEW", key, "a", "1000"],
            vec!["RWLOCK.INFO", key],
        ]
    };
    for args in leader_on_lock
        .into_iter()
        .chain(rwlock_on("elect"))
        .chain(rwlock_on("str"))
    {
        let v = exec_args(
            &mut c,
            &args
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
        .expect("io");
        let e = err(&v);
        assert!(e.starts_with("WRONGTYPE"), "{args:?}: {e}");
    }
    assert_eq!(lock_info(&mut c, "lock").shape(), lock_before.shape());
    assert_eq!(text(&array(&r!(c, "LEADER.CURRENT", "elect"))[0]), "a");
    assert_eq!(text(&r!(c, "GET", "str")), "v");
    assert_eq!(int(&r!(c, "PTTL", "str")), -1);
}

// ---------------------------------------------------------------------------------------------
// Bad input

fn argv(parts: &[&[u8]]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.to_vec()).collect()
}

#[test]
fn bad_input_is_an_error_that_changes_nothing() {
    let (s, mut c) = start();
    let ta = token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG));
    token(&r!(c, "RWLOCK.WLOCK", "w", "a", LONG));
    let te = token(&r!(c, "LEADER.CAMPAIGN", "e", "a", LONG));
    let long = vec![b'o'; 257];
    let max = vec![b'o'; 256];
    let huge = vec![b'o'; 1_048_577];
    let cases: Vec<(Vec<Vec<u8>>, &str)> = {
        let mut v: Vec<(Vec<Vec<u8>>, &str)> = Vec::new();
        for cmd in [&b"RWLOCK.RLOCK"[..], b"RWLOCK.WLOCK", b"LEADER.CAMPAIGN"] {
            for key in [&b"k"[..], b"w", b"e", b"fresh"] {
                v.push((argv(&[cmd]), "wrong number of arguments"));
                v.push((argv(&[cmd, key]), "wrong number of arguments"));
                v.push((argv(&[cmd, key, b"b"]), "wrong number of arguments"));
                for ttl in [
                    &b"0"[..],
                    b"-1",
                    b"1.5",
                    b"abc",
                    b"",
                    b"86400001",
                    b" 5",
                    b"+5",
                    b"99999999999999999999999",
                ] {
                    v.push((argv(&[cmd, key, b"b", ttl]), "ttl"));
                }
                v.push((argv(&[cmd, key, b"", b"1000"]), "must not be empty"));
                v.push((argv(&[cmd, key, &long, b"1000"]), "257 bytes"));
                v.push((argv(&[cmd, key, b"b", b"1000", b"NX"]), "unknown option"));
                v.push((argv(&[cmd, key, b"b", b"1000", b"WAIT"]), "needs a value"));
                v.push((
                    argv(&[cmd, key, b"b", b"1000", b"WAIT", b"-1"]),
                    "WAIT must be",
                ));
                v.push((
                    argv(&[cmd, key, b"b", b"1000", b"WAIT", b"x"]),
                    "WAIT must be",
                ));
                v.push((
                    argv(&[cmd, key, b"b", b"1000", b"WAIT", b"1.5"]),
                    "WAIT must be",
                ));
                v.push((
                    argv(&[cmd, key, b"b", b"1000", b"WAIT", b"10", b"WAIT", b"10"]),
                    "more than once",
                ));
                v.push((
                    argv(&[cmd, key, b"b", b"1000", b"WAIT", b"10", b"x"]),
                    "unknown option",
                ));
                v.push((argv(&[cmd, key, b"b", b"0", b"WAIT", b"10"]), "ttl"));
            }
        }
        for (cmd, n) in [
            (&b"RWLOCK.UNLOCK"[..], 3),
            (b"RWLOCK.RENEW", 4),
            (b"RWLOCK.INFO", 2),
            (b"LEADER.RENEW", 4),
            (b"LEADER.RESIGN", 3),
            (b"LEADER.CURRENT", 2),
        ] {
            let key: &[u8] = if cmd.starts_with(b"LEADER") {
                b"e"
            } else {
                b"k"
            };
            let full: Vec<&[u8]> = [cmd, key, b"a", b"1000", b"extra"][..n + 1].to_vec();
            v.push((argv(&full), "wrong number of arguments"));
            v.push((argv(&full[..n - 1]), "wrong number of arguments"));
            if n >= 3 {
                let mut empty = full[..n].to_vec();
                empty[2] = b"";
                v.push((argv(&empty), "must not be empty"));
                // An id longer than lease.max-id-length holds nothing (a holder whose id
                // outgrew a lowered limit may still renew and release): checked below.
                let mut over = full[..n].to_vec();
                over[2] = &huge;
                v.push((argv(&over), "1048577 bytes"));
            }
            if n == 4 {
                for ttl in [&b"0"[..], b"-1", b"1.5", b"abc", b"86400001"] {
                    let mut bad = full[..n].to_vec();
                    bad[2] = b"a";
                    bad[3] = ttl;
                    v.push((argv(&bad), "ttl"));
                }
            }
        }
        v
    };
    let snapshot = |c: &mut Connection| {
        (
            lock_info(c, "k").shape(),
            lock_info(c, "w").shape(),
            r!(c, "LEADER.CURRENT", "e"),
            int(&r!(c, "DBSIZE")),
        )
    };
    let before = snapshot(&mut c);
    for (args, want) in &cases {
        let v = exec_args(&mut c, args).expect("io");
        let printable = String::from_utf8_lossy(&args.concat())
            .chars()
            .take(80)
            .collect::<String>();
        let e = err(&v);
        assert!(
            e.contains(want),
            "{:?}: error text {e:?} does not say {want:?}",
            printable
        );
        let mut now = snapshot(&mut c);
        // LEADER.CURRENT's ttl runs down by itself.
        let (bt, nt) = (array(&before.2), array(&now.2));
        assert_eq!(text(&bt[0]), text(&nt[0]));
        assert_eq!(int(&bt[1]), int(&nt[1]));
        assert!(int(&nt[2]) <= int(&bt[2]), "the leader's lease grew");
        now.2 = before.2.clone();
        assert_eq!(now, before, "{printable:?} changed something");
    }
    println!("{} bad argument vectors answered with errors", cases.len());
    // Holds are untouched: their tokens and ttls did not move.
    assert_eq!(
        lock_info(&mut c, "k").holder("a", "read").unwrap().token,
        ta
    );
    assert!(lock_info(&mut c, "k").holder("a", "read").unwrap().ttl <= LONG);
    assert_eq!(int(&array(&r!(c, "LEADER.CURRENT", "e"))[1]), te);
    assert_eq!(exists(&mut c, "fresh"), 0);
    // The longest id is fine; a ttl of exactly the maximum is fine.
    token(&r!(c, "RWLOCK.RLOCK", "k", max.as_slice(), 86_400_000));
    assert_eq!(text(&r!(c, "PING")), "PONG");
    assert!(process_alive(s.pid().unwrap()));
}

// ---------------------------------------------------------------------------------------------
// Configuration and operator names

#[test]
fn config_max_ttl_applies_from_then_on() {
    let (_s, mut c) = start();
    assert_eq!(
        text(&array(&r!(c, "CONFIG", "GET", "lease.max-ttl"))[1]),
        "86400000"
    );
    assert_eq!(text(&r!(c, "CONFIG", "SET", "lease.max-ttl", "1000")), "OK");
    assert_eq!(
        text(&array(&r!(c, "CONFIG", "GET", "lease.max-ttl"))[1]),
        "1000"
    );
    token(&r!(c, "RWLOCK.RLOCK", "k", "a", 1000));
    for args in [
        vec!["RWLOCK.RLOCK", "k2", "a", "1001"],
        vec!["RWLOCK.WLOCK", "k2", "a", "1001"],
        vec!["RWLOCK.RENEW", "k", "a", "1001"],
        vec!["LEADER.CAMPAIGN", "e", "a", "1001"],
    ] {
        let v = exec_args(
            &mut c,
            &args
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
        .expect("io");
        assert!(err(&v).contains("1000"), "{args:?}: {}", err(&v));
    }
    assert_eq!(exists(&mut c, "k2"), 0);
    assert_eq!(exists(&mut c, "e"), 0);
    token(&r!(c, "LEADER.CAMPAIGN", "e", "a", 1000));
    // Out-of-range settings are refused.
    assert!(is_err(&r!(c, "CONFIG", "SET", "lease.max-ttl", "0")));
    assert!(is_err(&r!(c, "CONFIG", "SET", "lease.max-ttl", "abc")));
    assert_eq!(
        text(&array(&r!(c, "CONFIG", "GET", "lease.max-ttl"))[1]),
        "1000"
    );
}

#[test]
fn loadmodule_arguments_set_the_configs() {
    let s = Server::with(
        Options::default()
            .module_arg("max-ttl", "5000")
            .module_arg("max-id-length", "8"),
    );
    let mut c = conn(&s);
    assert_eq!(
        text(&array(&r!(c, "CONFIG", "GET", "lease.max-ttl"))[1]),
        "5000"
    );
    assert_eq!(
        text(&array(&r!(c, "CONFIG", "GET", "lease.max-id-length"))[1]),
        "8"
    );
    token(&r!(c, "RWLOCK.RLOCK", "k", "a", 5000));
    assert!(err(&r!(c, "RWLOCK.RLOCK", "k", "b", 5001)).contains("5000"));
    token(&r!(c, "RWLOCK.RLOCK", "k", "12345678", 5000));
    assert!(err(&r!(c, "RWLOCK.RLOCK", "k", "123456789", 5000)).contains("limit is 8"));
}

#[test]
fn config_max_id_length() {
    let (_s, mut c) = start();
    assert_eq!(
        text(&array(&r!(c, "CONFIG", "GET", "lease.max-id-length"))[1]),
        "256"
    );
    assert_eq!(
        text(&r!(c, "CONFIG", "SET", "lease.max-id-length", "4")),
        "OK"
    );
    token(&r!(c, "RWLOCK.RLOCK", "k", "abcd", LONG));
    let before = lock_info(&mut c, "k");
    for args in [
        vec!["RWLOCK.RLOCK", "k", "abcde", "1000"],
        vec!["RWLOCK.WLOCK", "k", "abcde", "1000"],
        vec!["LEADER.CAMPAIGN", "e", "abcde", "1000"],
        vec!["SEMAPHORE.ACQUIRE", "s", "abcde", "2", "1000"],
    ] {
        let v = exec_args(
            &mut c,
            &args
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
        .expect("io");
        let e = err(&v);
        assert!(
            e.contains("limit is 4") && e.contains("lease.max-id-length"),
            "{args:?}: {e}"
        );
    }
    assert_eq!(lock_info(&mut c, "k").shape(), before.shape());
    token(&r!(c, "LEADER.CAMPAIGN", "e", "abcd", LONG));
    // The limit is for new holds: an id the limit no longer allows holds nothing, and a
    // holder whose id outgrew a lowered limit still renews and releases.
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "abcde")), 0);
    assert!(is_nil(&r!(c, "RWLOCK.RENEW", "k", "abcde", 1000)));
    assert!(is_nil(&r!(c, "LEADER.RENEW", "e", "abcde", 1000)));
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "abcde")), 0);
    assert_eq!(lock_info(&mut c, "k").shape(), before.shape());
    r!(c, "CONFIG", "SET", "lease.max-id-length", "256");
    let t = token(&r!(c, "RWLOCK.WLOCK", "long", "owner-with-a-long-id", LONG));
    r!(c, "CONFIG", "SET", "lease.max-id-length", "4");
    assert_eq!(
        token(&r!(c, "RWLOCK.RENEW", "long", "owner-with-a-long-id", LONG)),
        t
    );
    assert_eq!(
        int(&r!(c, "RWLOCK.UNLOCK", "long", "owner-with-a-long-id")),
        1
    );
    assert_eq!(exists(&mut c, "long"), 0);
}

#[test]
fn module_list_and_command_getkeys() {
    let (_s, mut c) = start();
    let list = r!(c, "MODULE", "LIST");
    let names: Vec<String> = array(&list)
        .iter()
        .map(|m| text(&pairs(m).into_iter().find(|(k, _)| k == "name").unwrap().1))
        .collect();
    assert!(names.contains(&"lease".to_string()), "{names:?}");
    for (args, key) in [
        (vec!["RWLOCK.RLOCK", "k", "o", "10"], "k"),
        (vec!["RWLOCK.WLOCK", "k1", "o", "10", "WAIT", "5"], "k1"),
        (vec!["RWLOCK.UNLOCK", "k2", "o"], "k2"),
        (vec!["RWLOCK.RENEW", "k3", "o", "10"], "k3"),
        (vec!["RWLOCK.INFO", "k4"], "k4"),
        (vec!["LEADER.CAMPAIGN", "e1", "o", "10"], "e1"),
        (vec!["LEADER.RENEW", "e2", "o", "10"], "e2"),
        (vec!["LEADER.RESIGN", "e3", "o"], "e3"),
        (vec!["LEADER.CURRENT", "e4"], "e4"),
    ] {
        let mut full = vec!["COMMAND".as_bytes().to_vec(), b"GETKEYS".to_vec()];
        full.extend(args.iter().map(|a| a.as_bytes().to_vec()));
        let v = exec_args(&mut c, &full).expect("io");
        let keys: Vec<String> = array(&v).iter().map(text).collect();
        assert_eq!(keys, [key], "{args:?}");
    }
    // Flags: writes are `write`, reads are `readonly`.
    for (cmd, flag) in [
        ("rwlock.rlock", "write"),
        ("rwlock.wlock", "write"),
        ("rwlock.unlock", "write"),
        ("rwlock.renew", "write"),
        ("rwlock.info", "readonly"),
        ("leader.campaign", "write"),
        ("leader.renew", "write"),
        ("leader.resign", "write"),
        ("leader.current", "readonly"),
    ] {
        let v = r!(c, "COMMAND", "INFO", cmd);
        let entry = array(&array(&v)[0]);
        let flags: Vec<String> = array(&entry[2]).iter().map(text).collect();
        assert!(flags.iter().any(|f| f == flag), "{cmd}: {flags:?}");
        assert_eq!(int(&entry[3]), 1, "{cmd}: first key");
    }
}

#[test]
fn acl_key_patterns_apply() {
    let s = Server::start();
    let mut admin = conn(&s);
    let v = r!(
        admin,
        "ACL",
        "SETUSER",
        "limited",
        "on",
        ">secret",
        "~allowed*",
        "+@all"
    );
    assert_eq!(text(&v), "OK");
    let mut c = conn(&s);
    assert_eq!(text(&r!(c, "AUTH", "limited", "secret")), "OK");
    token(&r!(c, "RWLOCK.RLOCK", "allowed1", "a", LONG));
    token(&r!(c, "LEADER.CAMPAIGN", "allowed2", "a", LONG));
    for args in [
        vec!["RWLOCK.RLOCK", "other", "a", "1000"],
        vec!["RWLOCK.WLOCK", "other", "a", "1000"],
        vec!["RWLOCK.UNLOCK", "other", "a"],
        vec!["RWLOCK.RENEW", "other", "a", "1000"],
        vec!["RWLOCK.INFO", "other"],
        vec!["LEADER.CAMPAIGN", "other", "a", "1000"],
        vec!["LEADER.CURRENT", "other"],
        vec!["LEADER.RESIGN", "other", "a"],
    ] {
        let v = exec_args(
            &mut c,
            &args
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
        .expect("io");
        let e = err(&v);
        assert!(e.starts_with("NOPERM"), "{args:?}: {e}");
    }
    assert_eq!(exists(&mut admin, "other"), 0);
    assert_eq!(lock_info(&mut admin, "allowed1").owners(), ["a"]);
}

#[test]
fn lease_apply_is_refused_from_a_normal_client() {
    let (_s, mut c) = start();
    for args in [
        vec![
            "LEASE.APPLY",
            "k",
            "rwlock",
            "GRANT",
            "a",
            "write",
            "99999999999999",
            "5",
        ],
        vec!["LEASE.APPLY", "k", "rwlock", "LAST", "5"],
        vec![
            "LEASE.APPLY",
            "e",
            "leader",
            "GRANT",
            "a",
            "write",
            "99999999999999",
            "5",
        ],
        vec!["LEASE.APPLY", "k"],
        vec!["LEASE.APPLY", "k", "nonsense"],
    ] {
        let v = exec_args(
            &mut c,
            &args
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
        .expect("io");
        assert!(is_err(&v), "{args:?} was accepted: {v:?}");
    }
    assert_eq!(int(&r!(c, "DBSIZE")), 0);
    // Not inside MULTI or a script either.
    assert_eq!(text(&r!(c, "MULTI")), "OK");
    send!(c, "LEASE.APPLY", "k", "rwlock", "LAST", "5");
    let queued = recv(&mut c);
    let exec = r!(c, "EXEC");
    assert!(
        is_err(&queued) || array(&exec).iter().all(is_err),
        "LEASE.APPLY in MULTI: {queued:?} {exec:?}"
    );
    let v = r!(
        c,
        "EVAL",
        "return redis.pcall('LEASE.APPLY', KEYS[1], 'rwlock', 'LAST', '5')",
        1,
        "k"
    );
    assert!(is_err(&v), "LEASE.APPLY in a script: {v:?}");
    assert_eq!(int(&r!(c, "DBSIZE")), 0);
}

#[test]
fn info_lease_fields_start_with_lease() {
    let (_s, mut c) = start();
    token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG));
    token(&r!(c, "RWLOCK.WLOCK", "w", "a", LONG));
    token(&r!(c, "LEADER.CAMPAIGN", "e", "a", LONG));
    let raw = text(&r!(c, "INFO", "lease"));
    let fields: Vec<&str> = raw
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(!fields.is_empty(), "INFO lease is empty: {raw:?}");
    for f in &fields {
        assert!(
            f.starts_with("lease_"),
            "field {f:?} does not start with lease_"
        );
    }
    let i = lease_info(&mut c);
    assert_eq!(i["lease_keys"], "3");
    assert_eq!(i["lease_holders"], "3");
    assert_eq!(i["lease_waiters"], "0");
    // The section is part of INFO everything too.
    assert!(text(&r!(c, "INFO", "everything")).contains("lease_keys:3"));
}

// ---------------------------------------------------------------------------------------------
// Keyspace notifications

/// Collects module events on `key` until `n` arrived or 5 s passed.
fn events(sub: &mut redis::PubSub, n: usize) -> Vec<String> {
    events_within(sub, n, Duration::from_secs(5))
}

fn events_within(sub: &mut redis::PubSub, n: usize, limit: Duration) -> Vec<String> {
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < n && start.elapsed() < limit {
        match sub.get_message() {
            Ok(msg) => {
                let ev: String = msg.get_payload().unwrap_or_default();
                if ev.starts_with("rwlock.") || ev.starts_with("leader.") {
                    got.push(ev);
                }
            }
            Err(e) if e.is_timeout() => {}
            Err(e) => panic!("subscriber: {e}"),
        }
    }
    got
}

fn subscriber(s: &Server, c: &mut Connection) -> Connection {
    assert_eq!(
        text(&r!(c, "CONFIG", "SET", "notify-keyspace-events", "KEA")),
        "OK"
    );
    s.conn()
}

#[test]
fn keyspace_notifications_announce_every_change() {
    let s = Server::start();
    let mut c = conn(&s);
    let mut w = conn(&s);
    let mut sc = subscriber(&s, &mut c);
    let mut sub = sc.as_pubsub();
    sub.subscribe("__keyspace@0__:k").unwrap();
    sub.subscribe("__keyspace@0__:e").unwrap();
    sub.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();

    token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG));
    token(&r!(c, "RWLOCK.RLOCK", "k", "b", LONG));
    // No event for a renewal.
    token(&r!(c, "RWLOCK.RENEW", "k", "b", LONG));
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "b")), 1);
    // A lapse with a waiter behind it (the key has no Redis expiry then).
    token(&r!(c, "RWLOCK.WLOCK", "k", "w", 200));
    send!(w, "RWLOCK.WLOCK", "k", "x", LONG, "WAIT", 10_000);
    let tx = token(&recv(&mut w));
    assert!(tx > 0);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "x")), 1);
    let got = events(&mut sub, 8);
    assert_eq!(
        got,
        [
            "rwlock.read",
            "rwlock.read",
            "rwlock.release",
            "rwlock.release",
            "rwlock.write",
            "rwlock.lapse",
            "rwlock.write",
            "rwlock.release",
        ]
    );

    token(&r!(c, "LEADER.CAMPAIGN", "e", "a", LONG));
    // No event for the leader's re-campaign or renewal.
    token(&r!(c, "LEADER.CAMPAIGN", "e", "a", LONG));
    token(&r!(c, "LEADER.RENEW", "e", "a", LONG));
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "a")), 1);
    token(&r!(c, "LEADER.CAMPAIGN", "e", "b", 200));
    send!(w, "LEADER.CAMPAIGN", "e", "c", LONG, "WAIT", 10_000);
    token(&recv(&mut w));
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "c")), 1);
    let got = events(&mut sub, 6);
    assert_eq!(
        got,
        [
            "leader.elect",
            "leader.resign",
            "leader.elect",
            "leader.lapse",
            "leader.elect",
            "leader.resign"
        ]
    );
    // Nothing more arrives.
    let extra = events_within(&mut sub, 1, Duration::from_millis(500));
    assert!(extra.is_empty(), "unexpected events: {extra:?}");
}

#[test]
fn keyspace_notifications_announce_every_lapse() {
    let s = Server::start();
    let mut c = conn(&s);
    let mut sc = subscriber(&s, &mut c);
    let mut sub = sc.as_pubsub();
    sub.psubscribe("__keyspace@0__:*").unwrap();
    sub.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut missing = Vec::new();
    for i in 0..8 {
        let (key, want) = if i % 2 == 0 {
            let key = format!("lock{i}");
            token(&r!(c, "RWLOCK.WLOCK", &key, "w", 100));
            (key, ["rwlock.write", "rwlock.lapse"])
        } else {
            let key = format!("elect{i}");
            token(&r!(c, "LEADER.CAMPAIGN", &key, "w", 100));
            (key, ["leader.elect", "leader.lapse"])
        };
        let got = events_within(&mut sub, 2, Duration::from_millis(1500));
        if got != want {
            missing.push((key, got));
        }
    }
    assert!(
        missing.is_empty(),
        "lapses without their event (WLOCK/CAMPAIGN key w 100, wait): {missing:?}"
    );
}

#[test]
fn error_replies_are_valid_utf8() {
    let (_s, mut c) = start();
    // "é" in a ttl, an option and a WAIT value.
    for args in [
        vec!["RWLOCK.RLOCK", "k", "a", "1é"],
        vec!["RWLOCK.RLOCK", "k", "a", "10", "é"],
        vec!["RWLOCK.RLOCK", "k", "a", "10", "WAIT", "é"],
        vec!["LEADER.CAMPAIGN", "e", "a", "é"],
    ] {
        let argv: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        match exec_args(&mut c, &argv) {
            Ok(v) => assert!(is_err(&v), "{args:?}: {v:?}"),
            Err(e) => panic!("{args:?}: the error reply is unreadable: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Memory

#[test]
fn memory_usage_is_small() {
    let (_s, mut c) = start();
    let owner = "0b8f2c9e-1d4a-4c6b-9e2f-7a3d5b1c8e00";
    assert_eq!(owner.len(), 36);
    token(&r!(c, "RWLOCK.WLOCK", "lock:1", owner, LONG));
    let one = int(&r!(c, "MEMORY", "USAGE", "lock:1"));
    println!("MEMORY USAGE of a one-holder lock (36-byte owner): {one} bytes");
    token(&r!(c, "LEADER.CAMPAIGN", "lead:1", owner, LONG));
    let leader = int(&r!(c, "MEMORY", "USAGE", "lead:1"));
    println!("MEMORY USAGE of an election with a leader (36-byte id): {leader} bytes");

    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.cmd("RWLOCK.RLOCK")
            .arg("lock:many")
            .arg(format!("{owner:.30}-{i:05}"))
            .arg(LONG)
            .ignore();
    }
    let _: () = pipe.query(&mut c).expect("pipeline");
    assert_eq!(lock_info(&mut c, "lock:many").holders.len(), 1000);
    let many = int(&r!(c, "MEMORY", "USAGE", "lock:many", "SAMPLES", "0"));
    println!(
        "MEMORY USAGE of a 1,000-reader lock (36-byte owners): {many} bytes ({:.0} per reader)",
        many as f64 / 1000.0
    );
    let used = lease_info(&mut c);
    println!(
        "INFO lease after: keys={} holders={}",
        used["lease_keys"], used["lease_holders"]
    );
    assert!(one <= 160, "one-holder lock uses {one} bytes (> 160)");
    assert!(many > one * 100, "1,000 readers cannot cost {many} bytes");
    assert!(
        many < 1000 * 400,
        "1,000 readers use {many} bytes (> 400 each)"
    );
}

// ---------------------------------------------------------------------------------------------
// Robustness

const COMMANDS: [&str; 10] = [
    "RWLOCK.RLOCK",
    "RWLOCK.WLOCK",
    "RWLOCK.UNLOCK",
    "RWLOCK.RENEW",
    "RWLOCK.INFO",
    "LEADER.CAMPAIGN",
    "LEADER.RENEW",
    "LEADER.RESIGN",
    "LEADER.CURRENT",
    "LEASE.APPLY",
];

fn random_arg(rng: &mut impl Rng) -> Vec<u8> {
    match rng.random_range(0..20) {
        0 => Vec::new(),
        1 => b"WAIT".to_vec(),
        2 => b"wait".to_vec(),
        3 => rng.random_range(-1000i64..1000).to_string().into_bytes(),
        4 => rng.random::<i64>().to_string().into_bytes(),
        5 => rng.random::<u64>().to_string().into_bytes(),
        6 => format!("{}{}", u64::MAX, rng.random::<u32>()).into_bytes(),
        7 => [
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
            "18446744073709551615",
            "-0",
            "00",
            "1e3",
            "0x10",
            "1.5",
            "inf",
            "nan",
            " 1",
            "1 ",
        ][rng.random_range(0..13)]
        .as_bytes()
        .to_vec(),
        8 => {
            let n = rng.random_range(1..64);
            (0..n).map(|_| rng.random::<u8>()).collect()
        }
        9 => vec![b'x'; rng.random_range(250..300)],
        10 => vec![0u8; rng.random_range(1..8)],
        11 => [
            "GRANT", "RELEASE", "DROP", "RENEW", "HOLD", "LAST", "read", "write", "lapse",
            "resign", "rwlock", "leader",
        ][rng.random_range(0..12)]
        .as_bytes()
        .to_vec(),
        12 | 13 => ["k1", "k2", "e1", "s1"][rng.random_range(0..4)]
            .as_bytes()
            .to_vec(),
        14 | 15 => ["o1", "o2", "o3"][rng.random_range(0..3)]
            .as_bytes()
            .to_vec(),
        _ => rng.random_range(1..5000u32).to_string().into_bytes(),
    }
}

fn random_argv(rng: &mut impl Rng) -> Vec<Vec<u8>> {
    let name = COMMANDS[rng.random_range(0..COMMANDS.len())];
    let mut args = vec![name.as_bytes().to_vec()];
    let arity = match rng.random_range(0..10) {
        0..=2 => rng.random_range(0..9),
        3..=5 => 3,
        6 | 7 => 2,
        _ => 5,
    };
    for i in 0..arity {
        // Mostly plausible vectors (a key, an owner, a ttl) so that deeper paths run too.
        let plausible = rng.random_bool(0.85);
        let a = match (i, plausible) {
            (0, true) => ["k1", "k2", "e1", "s1"][rng.random_range(0..4)]
                .as_bytes()
                .to_vec(),
            (1, true) => ["o1", "o2", "o3", "rwlock", "leader"][rng.random_range(0..5)]
                .as_bytes()
                .to_vec(),
            (2, true) => rng.random_range(1..3000u32).to_string().into_bytes(),
            (3, true) => b"WAIT".to_vec(),
            (4, true) => rng.random_range(1..30u32).to_string().into_bytes(),
            _ => random_arg(rng),
        };
        args.push(a);
    }
    args
}

#[test]
fn random_argument_vectors_never_hurt_the_server() {
    let s = Server::start();
    let mut admin = conn(&s);
    assert_eq!(text(&r!(admin, "SET", "s1", "string")), "OK");
    let mut rng = rand::rng();
    let fresh = |s: &Server| {
        let c = s.conn();
        c.set_read_timeout(Some(Duration::from_millis(150)))
            .unwrap();
        c
    };
    let mut c = fresh(&s);
    let (mut ok, mut errors, mut stalls, mut not_utf8) = (0, 0, 0, 0);
    let mut internal = Vec::new();
    let start = Instant::now();
    let total = 6000;
    for _ in 0..total {
        if start.elapsed() > Duration::from_secs(40) {
            break;
        }
        let args = random_argv(&mut rng);
        match exec_args(&mut c, &args) {
            Ok(Value::ServerError(e)) => {
                errors += 1;
                let t = format!("{} {}", e.code(), e.details().unwrap_or(""));
                if t.contains("internal error") {
                    internal.push((args.clone(), t));
                }
            }
            Ok(_) => ok += 1,
            Err(e) if e.kind() == redis::ErrorKind::Parse => {
                // The reply was not UTF-8 (see error_replies_are_valid_utf8): reconnect.
                not_utf8 += 1;
                c = fresh(&s);
            }
            Err(e) if e.is_timeout() => {
                // A request parked by WAIT: leave it (a disconnect while waiting).
                stalls += 1;
                c = fresh(&s);
            }
            Err(e) => panic!(
                "connection failed after {:?}: {e}",
                String::from_utf8_lossy(&args.concat())
            ),
        }
    }
    println!(
        "random vectors: {} sent in {:?}: {ok} ok, {errors} errors, {stalls} parked and \
         abandoned, {not_utf8} replies not UTF-8",
        ok + errors + stalls + not_utf8,
        start.elapsed()
    );
    assert!(
        internal.is_empty(),
        "requests that hit a panic: {internal:?}"
    );
    drop(c);
    assert_eq!(text(&r!(admin, "PING")), "PONG");
    assert!(process_alive(s.pid().unwrap()), "redis-server died");
    // The keys still answer consistently.
    for k in ["k1", "k2"] {
        let v = r!(admin, "RWLOCK.INFO", k);
        if !is_err(&v) {
            parse_lock_info(&v);
        }
    }
    let v = r!(admin, "LEADER.CURRENT", "e1");
    assert!(is_nil(&v) || is_err(&v) || array(&v).len() == 3, "{v:?}");
    assert_eq!(text(&r!(admin, "GET", "s1")), "string");
    // Every waiter left with its connection.
    let ok = eventually(Duration::from_secs(5), || {
        lease_info(&mut admin)["lease_waiters"] == "0"
    });
    assert!(ok, "waiters left behind: {:?}", lease_info(&mut admin));
    assert_eq!(text(&r!(admin, "PING")), "PONG");
}

/// CPU seconds (user + system) a process has used, from /proc/PID/stat.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which is in parentheses): utime is the 12th, stime 13th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

#[test]
fn a_lease_of_millions_of_years_does_not_make_the_server_spin() {
    let s = Server::start();
    let mut c = s.conn();
    // A spinning server never answers: fail instead of hanging.
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let huge = i64::MAX / 4;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("lease.max-ttl")
        .arg(huge)
        .query(&mut c)
        .unwrap();
    let t: Option<i64> = redis::cmd("RWLOCK.WLOCK")
        .arg("far")
        .arg("a")
        .arg(huge)
        .query(&mut c)
        .unwrap();
    assert!(t.is_some());
    // A waiter too, so the key has a wake-up in the far future and a queue.
    let w: Option<i64> = redis::cmd("RWLOCK.RLOCK")
        .arg("far")
        .arg("b")
        .arg(10)
        .arg("WAIT")
        .arg(50)
        .query(&mut c)
        .unwrap();
    assert_eq!(w, None);
    let pid = s.pid().unwrap();
    let before = cpu_seconds(pid);
    sleep(Duration::from_secs(1));
    let used = cpu_seconds(pid) - before;
    assert!(used < 0.3, "an idle server used {used} s of CPU in 1 s");
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}

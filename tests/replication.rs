//! Replication: a replica sees exactly what its master decided (grants, tokens, absolute
//! deadlines, releases, renewals, elections, hand-offs, lapses) through the full sync and the
//! live stream, never changes state on its own, refuses writes, and once promoted keeps the
//! holders, takes over the lapse timers and hands out tokens above any the old master gave.

mod fixture;

use std::time::Duration;

use fixture::*;
use redis_lease_testkit::prelude::*;

/// Every key `populate` touches.
const LOCK_KEYS: &[&str] = &[
    "lk:shared",
    "lk:down",
    "lk:writer",
    "lk:renewed",
    "lk:mixed",
    "lk:short",
    "lk:short-r",
    "lk:gone",
];
const LEADER_KEYS: &[&str] = &["el", "el:short"];

/// Waits until the replica shows the same state as the master for the given keys (polling
/// both, bounded), and the same holder count and key count.
fn eventually_same(
    master: &Server,
    replica: &Server,
    locks: &[&str],
    leaders: &[&str],
    what: &str,
) {
    let mut m = conn(master);
    let mut r = conn(replica);
    let mut last = String::new();
    let same = eventually(Duration::from_secs(10), || {
        let a = state(&mut m, locks, leaders);
        let b = state(&mut r, locks, leaders);
        if let Some(d) = state_diff(&a, &b) {
            last = d;
            return false;
        }
        let (mh, rh) = (
            info_int(&mut m, "lease", "lease_holders"),
            info_int(&mut r, "lease", "lease_holders"),
        );
        let (mk, rk) = (dbsize(&mut m), dbsize(&mut r));
        if (mh, mk) != (rh, rk) {
            last = format!("holders {mh} vs {rh}, keys {mk} vs {rk} (master vs replica)");
            return false;
        }
        true
    });
    assert!(
        same,
        "{what}: replica differs from the master: {last}\nreplica log:\n{}",
        replica.log()
    );
}

fn pair() -> (Server, Server) {
    let master = debug_server();
    let replica = start_replica(&master);
    sync(&master, &replica);
    (master, replica)
}

/// The replica's own lease counters: it decides nothing, so it counts nothing.
fn assert_replica_decided_nothing(r: &mut Connection, what: &str) {
    for f in [
        "lease_grants_read",
        "lease_grants_write",
        "lease_grants_leader",
        "lease_lapses",
        "lease_releases",
        "lease_renewals",
        "lease_resignations",
    ] {
        assert_eq!(info_int(r, "lease", f), 0, "{what}: replica's {f}");
    }
}

#[test]
fn full_sync_brings_existing_holds_to_a_new_replica() {
    let master = debug_server();
    let mut m = conn(&master);
    // Short leases long enough to outlive the replica's first connection (made by the
    // replication cron, up to a second after start) and the full sync.
    let fx = populate_with(&mut m, 5000);
    let replica = start_replica_by_config(&master);
    sync(&master, &replica);
    let mut r = conn(&replica);
    assert!(now_ms() < fx.short_deadline - 300, "sync took too long");
    let a = state(&mut m, LOCK_KEYS, LEADER_KEYS);
    let b = state(&mut r, LOCK_KEYS, LEADER_KEYS);
    if let Some(d) = state_diff(&a, &b) {
        panic!("full sync: {d}\nreplica log:\n{}", replica.log());
    }
    assert_eq!(
        info_int(&mut r, "lease", "lease_holders"),
        info_int(&mut m, "lease", "lease_holders")
    );
    assert_eq!(
        info_int(&mut r, "lease", "lease_token_high_water"),
        info_int(&mut m, "lease", "lease_token_high_water"),
        "the replica knows the master's high-water mark (lk:gone's token included)"
    );
    // The short leases lapse on the master; the replica follows.
    sleep_until(fx.short_deadline, 200);
    eventually_same(&master, &replica, LOCK_KEYS, LEADER_KEYS, "after lapses");
    assert_eq!(info_int(&mut r, "lease", "lease_holders"), fx.live_holders);
    assert_eq!(dbsize(&mut r), fx.live_keys);
    assert_replica_decided_nothing(&mut r, "full sync");
}

#[test]
fn live_stream_replicates_every_effect() {
    let (master, replica) = pair();
    let mut m = conn(&master);
    let mut r = conn(&replica);
    let same = |locks: &[&str], leaders: &[&str], what: &str| {
        eventually_same(&master, &replica, locks, leaders, what)
    };

    // Grants, reentrant grants, a downgrade.
    rlock(&mut m, "k1", "a", LONG_TTL).unwrap();
    rlock(&mut m, "k1", "b", LONG_TTL).unwrap();
    rlock(&mut m, "k1", "b", LONG_TTL).unwrap();
    let t = wlock(&mut m, "k2", "w", LONG_TTL).unwrap();
    assert_eq!(wlock(&mut m, "k2", "w", LONG_TTL), Some(t));
    assert_eq!(rlock(&mut m, "k2", "w", LONG_TTL), Some(t));
    same(&["k1", "k2"], &[], "grants");
    let k1 = lock_info(&mut r, "k1");
    assert_eq!(k1.holder("b", "read").unwrap().count, 2);

    // Releases.
    assert_eq!(unlock(&mut m, "k1", "b"), 1);
    same(&["k1"], &[], "release of one reentrant hold");
    assert_eq!(
        lock_info(&mut r, "k1").holder("b", "read").unwrap().count,
        1
    );
    assert_eq!(unlock(&mut m, "k1", "a"), 1);
    assert_eq!(unlock(&mut m, "k2", "w"), 1);
    same(&["k1", "k2"], &[], "releases");
    assert_eq!(
        lock_info(&mut r, "k2").holder("w", "write").unwrap().count,
        1
    );
    assert_eq!(unlock(&mut m, "k2", "w"), 1);
    same(&["k2"], &[], "release of the write hold");
    let k2 = lock_info(&mut r, "k2");
    assert_eq!(k2.holders.len(), 1, "w's read hold is left: {k2:?}");
    assert_eq!(k2.mode, "read");

    // Renewal: a new absolute deadline.
    let before = lock_info(&mut r, "k2");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(renew(&mut m, "k2", "w", LONG_TTL + 60_000), Some(t));
    same(&["k2"], &[], "renewal");
    let after = lock_info(&mut r, "k2");
    assert!(
        after.holders[0].deadline > before.holders[0].deadline + 50_000,
        "the replica has the renewed deadline"
    );

    // Elections: elect, renew by campaigning again and with RENEW, resign, elect another.
    let term1 = campaign(&mut m, "e", "c1", LONG_TTL).unwrap();
    same(&[], &["e"], "election");
    assert_eq!(campaign(&mut m, "e", "c1", LONG_TTL + 1000), Some(term1));
    let renewed: Option<i64> = redis::cmd("LEADER.RENEW")
        .arg("e")
        .arg("c1")
        .arg(LONG_TTL + 2000)
        .query(&mut m)
        .unwrap();
    assert_eq!(renewed, Some(term1));
    same(&[], &["e"], "leader renewals");
    assert_eq!(resign(&mut m, "e", "c1"), 1);
    same(&[], &["e"], "resignation");
    assert!(leader(&mut r, "e").is_none());
    let term2 = campaign(&mut m, "e", "c2", LONG_TTL).unwrap();
    assert!(term2 > term1);
    same(&[], &["e"], "new leader");

    // Hand-off to WAIT-ers, made by the master's queue: a writer releases, two readers get it.
    let th = wlock(&mut m, "k3", "h", LONG_TTL).unwrap();
    let w1 = spawn_wait(
        &master,
        &["RWLOCK.RLOCK", "k3", "x1", "60000", "WAIT", "10000"],
    );
    await_lease_waiters(&mut m, 1);
    let w2 = spawn_wait(
        &master,
        &["RWLOCK.RLOCK", "k3", "x2", "60000", "WAIT", "10000"],
    );
    await_lease_waiters(&mut m, 2);
    same(&["k3"], &[], "writer with two waiters");
    assert_eq!(unlock(&mut m, "k3", "h"), 1);
    let t1 = w1.join().unwrap().unwrap().expect("x1 granted");
    let t2 = w2.join().unwrap().unwrap().expect("x2 granted");
    assert!(t1 > th && t2 > th);
    same(&["k3"], &[], "hand-off to two readers");
    let k3 = lock_info(&mut r, "k3");
    assert_eq!(k3.holder("x1", "read").map(|h| h.token), Some(t1));
    assert_eq!(k3.holder("x2", "read").map(|h| h.token), Some(t2));

    // Leadership handed to a waiting candidate.
    let w = spawn_wait(
        &master,
        &["LEADER.CAMPAIGN", "e", "c3", "60000", "WAIT", "10000"],
    );
    await_lease_waiters(&mut m, 1);
    assert_eq!(resign(&mut m, "e", "c2"), 1);
    let term3 = w.join().unwrap().unwrap().expect("c3 elected");
    assert!(term3 > term2);
    same(&[], &["e"], "leadership hand-off");
    assert_eq!(
        leader(&mut r, "e").map(|l| (l.candidate, l.term)),
        Some(("c3".to_string(), term3))
    );

    // Lapses noticed by the master's timer, with no command sent: one reader of two, a lone
    // writer (its key goes), and a writer whose lapse hands the lock to a WAIT-er.
    let lapses = info_int(&mut m, "lease", "lease_lapses");
    rlock(&mut m, "k4", "short", 600).unwrap();
    rlock(&mut m, "k4", "long", LONG_TTL).unwrap();
    wlock(&mut m, "k5", "short", 600).unwrap();
    let ts = wlock(&mut m, "k6", "short", 600).unwrap();
    let deadline = lock_info(&mut m, "k6").holders[0].deadline;
    let w = spawn_wait(
        &master,
        &["RWLOCK.WLOCK", "k6", "next", "60000", "WAIT", "10000"],
    );
    await_lease_waiters(&mut m, 1);
    same(&["k4", "k5", "k6"], &[], "short leases");
    let tn = w
        .join()
        .unwrap()
        .unwrap()
        .expect("next granted at the lapse");
    assert!(tn > ts);
    assert!(now_ms() >= deadline - 5, "granted before the lapse");
    sleep_until(deadline, 100);
    same(&["k4", "k5", "k6"], &[], "after lapses");
    assert_eq!(dbsize(&mut r), dbsize(&mut m));
    assert!(exists(&mut r, "k5") == 0);
    let k4 = lock_info(&mut r, "k4");
    assert_eq!(k4.holders.len(), 1);
    assert_eq!(k4.holders[0].owner, "long");
    assert_eq!(
        lock_info(&mut r, "k6")
            .holder("next", "write")
            .map(|h| h.token),
        Some(tn)
    );
    assert!(
        info_int(&mut m, "lease", "lease_lapses") >= lapses + 2,
        "the master's timer noticed the lapses"
    );
    sync(&master, &replica);
    assert_replica_decided_nothing(&mut r, "live stream");
}

fn assert_readonly(r: &mut Connection, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let e = cmd
        .query::<redis::Value>(r)
        .expect_err(&format!("{args:?} on a replica"));
    assert_eq!(e.code(), Some("READONLY"), "{args:?} on a replica: {e}");
}

#[test]
fn replica_refuses_writes_and_answers_reads() {
    let (master, replica) = pair();
    let mut m = conn(&master);
    let mut r = conn(&replica);
    let t = wlock(&mut m, "k", "w", LONG_TTL).unwrap();
    let term = campaign(&mut m, "e", "c", LONG_TTL).unwrap();
    sync(&master, &replica);
    for args in [
        &["RWLOCK.WLOCK", "k", "x", "1000"][..],
        &["RWLOCK.WLOCK", "fresh", "x", "1000"],
        &["RWLOCK.RLOCK", "fresh", "x", "1000", "WAIT", "100"],
        &["RWLOCK.UNLOCK", "k", "w"],
        &["RWLOCK.RENEW", "k", "w", "1000"],
        &["LEADER.CAMPAIGN", "e", "x", "1000"],
        &["LEADER.RENEW", "e", "c", "1000"],
        &["LEADER.RESIGN", "e", "c"],
    ] {
        assert_readonly(&mut r, args);
    }
    // LEASE.APPLY is internal: a client may not send it, to a replica or a master (Redis 8,
    // which knows the `internal` flag, answers that there is no such command).
    for c in [&mut r, &mut m] {
        let e = redis::cmd("LEASE.APPLY")
            .arg("k")
            .arg("rwlock")
            .arg("RELEASE")
            .arg("w")
            .query::<redis::Value>(c)
            .expect_err("LEASE.APPLY from a client");
        assert!(
            e.code() == Some("READONLY")
                || e.to_string().contains("internal")
                || e.to_string().contains("unknown command"),
            "LEASE.APPLY from a client: {e}"
        );
    }
    let info = lock_info(&mut r, "k");
    assert_eq!(info.mode, "write");
    assert_eq!(info.holders.len(), 1);
    assert_eq!(
        (info.holders[0].owner.as_str(), info.holders[0].token),
        ("w", t)
    );
    assert!(info.holders[0].ttl > LONG_TTL as i64 - 10_000);
    let l = leader(&mut r, "e").expect("a leader on the replica");
    assert_eq!((l.candidate.as_str(), l.term), ("c", term));
    assert_eq!(lock_info(&mut r, "none").mode, "none");
    assert!(leader(&mut r, "none").is_none());
    // Nothing changed anywhere.
    eventually_same(
        &master,
        &replica,
        &["k", "fresh"],
        &["e"],
        "after refused writes",
    );
    assert_eq!(lock_info(&mut m, "k").holders.len(), 1);
}

#[test]
fn replica_timers_never_change_state() {
    let (master, replica) = pair();
    let mut m = conn(&master);
    let mut r = conn(&replica);
    wlock(&mut m, "alone", "s", 600).unwrap();
    rlock(&mut m, "pair", "short", 600).unwrap();
    rlock(&mut m, "pair", "long", LONG_TTL).unwrap();
    campaign(&mut m, "e", "c", 600).unwrap();
    let deadline = lock_info(&mut m, "pair")
        .holder("short", "read")
        .unwrap()
        .deadline;
    sync(&master, &replica);
    assert_eq!(info_int(&mut r, "lease", "lease_holders"), 4);
    // Freeze the master: no effect can reach the replica while the leases end.
    signal(&master, "STOP");
    sleep_until(deadline, 800);
    let holders = info_int(&mut r, "lease", "lease_holders");
    let keys = dbsize(&mut r);
    let lapses = info_int(&mut r, "lease", "lease_lapses");
    // Reads on the replica do not show lapsed leases, but it keeps them until the master says.
    let pair = lock_info(&mut r, "pair");
    let alone = lock_info(&mut r, "alone");
    let e = leader(&mut r, "e");
    signal(&master, "CONT");
    assert_eq!(holders, 4, "the replica dropped holders by itself");
    assert_eq!(keys, 3, "the replica deleted keys by itself");
    assert_eq!(lapses, 0, "the replica counted lapses");
    assert_eq!(pair.holders.len(), 1, "{pair:?}");
    assert_eq!(pair.holders[0].owner, "long");
    assert!(alone.holders.is_empty(), "{alone:?}");
    assert!(e.is_none(), "{e:?}");
    // The master wakes up, notices the lapses, and the replica follows.
    eventually_same(
        &master,
        &replica,
        &["pair", "alone"],
        &["e"],
        "after the master woke",
    );
    let settled = eventually(Duration::from_secs(10), || {
        info_int(&mut r, "lease", "lease_holders") == 1 && dbsize(&mut r) == 1
    });
    assert!(settled, "the replica did not follow the master's lapses");
    assert_replica_decided_nothing(&mut r, "replica timers");
}

#[test]
fn promotion_keeps_holders_and_takes_over_lapses_and_tokens() {
    let (mut master, replica) = pair();
    let mut m = conn(&master);
    let mut r = conn(&replica);
    let fx = populate(&mut m);
    let ts = lock_info(&mut m, "lk:short")
        .holder("s", "write")
        .unwrap()
        .token;
    sync(&master, &replica);
    let before = state(&mut m, LOCK_KEYS, LEADER_KEYS);
    let high = info_int(&mut m, "lease", "lease_token_high_water");
    // Failover: the master dies, the replica becomes a master.
    master.kill9();
    let ok: String = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(
        info_field(&mut r, "replication", "role").as_deref(),
        Some("master")
    );
    assert!(
        now_ms() < fx.short_deadline - 500,
        "promotion took too long for the test"
    );
    let after = state(&mut r, LOCK_KEYS, LEADER_KEYS);
    if let Some(d) = state_diff(&before, &after) {
        panic!("promoted replica: {d}\nlog:\n{}", replica.log());
    }
    // A WAIT-er on the promoted server gets the short lock when its lease lapses, by the
    // promoted server's own timer.
    let w = spawn_wait(
        &replica,
        &["RWLOCK.WLOCK", "lk:short", "next", "60000", "WAIT", "10000"],
    );
    await_lease_waiters(&mut r, 1);
    let tn = w
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("WAIT-er: {e}; log:\n{}", replica.log()))
        .unwrap_or_else(|| panic!("WAIT-er timed out; log:\n{}", replica.log()));
    assert!(
        now_ms() >= fx.short_deadline - 50,
        "granted before the lapse"
    );
    assert!(
        tn > ts && tn > high,
        "hand-off token {tn} <= old master's {high}"
    );
    // The other short holds lapse by themselves.
    let pruned = eventually(Duration::from_secs(5), || {
        exists(&mut r, "lk:short-r") == 0
            && exists(&mut r, "el:short") == 0
            && lock_info(&mut r, "lk:mixed").holders.len() == 1
            && info_int(&mut r, "lease", "lease_holders") == fx.live_holders + 1
            && dbsize(&mut r) == fx.live_keys + 1
    });
    assert!(
        pruned,
        "the promoted server did not prune lapsed holders; holders {} keys {}; log:\n{}",
        info_int(&mut r, "lease", "lease_holders"),
        dbsize(&mut r),
        replica.log()
    );
    // At least lk:short's (handed to the WAIT-er) and lk:mixed's short reader (its key lives
    // on); the keys whose every lease ended may go by Redis's own expiry instead.
    let lapses = info_int(&mut r, "lease", "lease_lapses");
    assert!(lapses >= 2, "lease_lapses {lapses} on the promoted server");
    assert_same_lock(
        "lk:mixed after promotion",
        &fx.mixed_after,
        &lock_info(&mut r, "lk:mixed"),
        true,
    );
    // The long holds are exactly as the old master left them.
    for (k, e) in &fx.locks {
        assert_same_lock(&format!("promoted: {k}"), e, &lock_info(&mut r, k), true);
    }
    assert_same_leader("promoted: el", &fx.leaders[0].1, &leader(&mut r, "el"));
    // New tokens and terms exceed every one the old master handed out.
    for t in [
        rlock(&mut r, "lk:shared", "r3", LONG_TTL).unwrap(),
        wlock(&mut r, "lk:gone", "g2", LONG_TTL).unwrap(),
        wlock(&mut r, "brand-new", "n", LONG_TTL).unwrap(),
        campaign(&mut r, "el:short", "cs2", LONG_TTL).unwrap(),
    ] {
        assert!(t > high, "token {t} after promotion <= {high}");
    }
    assert_eq!(resign(&mut r, "el", "c2"), 1);
    let term = campaign(&mut r, "el", "c3", LONG_TTL).unwrap();
    assert!(term > high);
}

#[test]
fn promotion_after_missed_grants_still_hands_out_higher_tokens() {
    let (mut master, replica) = pair();
    let mut m = conn(&master);
    let mut r = conn(&replica);
    let t0 = wlock(&mut m, "k", "first", 60_000).unwrap();
    assert_eq!(unlock(&mut m, "k", "first"), 1);
    let term0 = campaign(&mut m, "e", "first", 60_000).unwrap();
    assert_eq!(resign(&mut m, "e", "first"), 1);
    sync(&master, &replica);
    // Cut the replica off: freeze it, drop its link on the master, grant, kill the master.
    signal(&replica, "STOP");
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut m)
        .unwrap();
    assert_eq!(killed, 1, "the replica's link on the master");
    let tm = wlock(&mut m, "k", "missed", 60_000).unwrap();
    let tm2 = wlock(&mut m, "k-only-on-master", "missed", 60_000).unwrap();
    let term_m = campaign(&mut m, "e", "missed", 60_000).unwrap();
    assert!(tm > t0 && term_m > term0);
    let missed_high = info_int(&mut m, "lease", "lease_token_high_water");
    master.kill9();
    signal(&replica, "CONT");
    let down = eventually(Duration::from_secs(10), || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("down")
    });
    assert!(down, "the replica still sees its master");
    // The replica really missed them.
    assert!(
        lock_info(&mut r, "k").holders.is_empty(),
        "the replica saw the missed grant"
    );
    assert!(exists(&mut r, "k-only-on-master") == 0);
    assert!(
        leader(&mut r, "e").is_none(),
        "the replica saw the missed election"
    );
    assert!(info_int(&mut r, "lease", "lease_token_high_water") < tm);
    let ok: String = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    assert_eq!(ok, "OK");
    for t in [
        wlock(&mut r, "k", "after", 60_000).unwrap(),
        wlock(&mut r, "k-only-on-master", "after", 60_000).unwrap(),
        campaign(&mut r, "e", "after", 60_000).unwrap(),
    ] {
        assert!(
            t > missed_high && t > tm && t > tm2 && t > term_m,
            "token {t} after promotion <= missed {missed_high}"
        );
    }
}

#[test]
fn promotion_prunes_leases_that_lapsed_while_a_replica() {
    let (mut master, replica) = pair();
    let mut m = conn(&master);
    let mut r = conn(&replica);
    rlock(&mut m, "pair", "short", 500).unwrap();
    let tl = rlock(&mut m, "pair", "long", LONG_TTL).unwrap();
    wlock(&mut m, "alone", "s", 500).unwrap();
    campaign(&mut m, "e", "c", 500).unwrap();
    let deadline = lock_info(&mut m, "pair")
        .holder("short", "read")
        .unwrap()
        .deadline;
    sync(&master, &replica);
    let high = info_int(&mut m, "lease", "lease_token_high_water");
    master.kill9();
    // The leases end while the server is still a replica: it keeps them.
    sleep_until(deadline, 500);
    assert_eq!(info_int(&mut r, "lease", "lease_holders"), 4);
    assert_eq!(dbsize(&mut r), 3);
    let ok: String = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    assert_eq!(ok, "OK");
    // Promoted, it looks at every key again and prunes what lapsed.
    let pruned = eventually(Duration::from_secs(5), || {
        info_int(&mut r, "lease", "lease_holders") == 1 && dbsize(&mut r) == 1
    });
    assert!(
        pruned,
        "lapsed leases not pruned after promotion: holders {} keys {}; log:\n{}",
        info_int(&mut r, "lease", "lease_holders"),
        dbsize(&mut r),
        replica.log()
    );
    assert!(info_int(&mut r, "lease", "lease_lapses") >= 1);
    let pair = lock_info(&mut r, "pair");
    assert_eq!(pair.holders.len(), 1);
    assert_eq!(
        (pair.holders[0].owner.as_str(), pair.holders[0].token),
        ("long", tl)
    );
    let t = wlock(&mut r, "alone", "new", LONG_TTL).unwrap();
    assert!(t > high, "token {t} after promotion <= {high}");
    let term = campaign(&mut r, "e", "new", LONG_TTL).unwrap();
    assert!(term > high, "term {term} after promotion <= {high}");
}

/// A replica writes what it applies to its own AOF exactly once, and passes the master's
/// stream on to its own replica: a restart of the replica from its AOF, and the sub-replica,
/// both match the master.
#[test]
fn replica_aof_and_sub_replica_match_the_master() {
    let master = debug_server();
    let mut replica = Server::with(
        debug_opts()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always"),
    );
    replicate_from(&replica, &master);
    sync(&master, &replica);
    let sub = start_replica(&replica);
    let mut m = conn(&master);
    // Some state before the chain is complete, some after.
    let t = rlock(&mut m, "k", "a", LONG_TTL).unwrap();
    assert_eq!(rlock(&mut m, "k", "a", LONG_TTL), Some(t));
    let up = eventually(Duration::from_secs(20), || {
        info_field(&mut conn(&sub), "replication", "master_link_status").as_deref() == Some("up")
    });
    assert!(up, "sub-replica never linked; log:\n{}", sub.log());
    rlock(&mut m, "k", "a", LONG_TTL).unwrap();
    rlock(&mut m, "k", "b", LONG_TTL).unwrap();
    let tw = wlock(&mut m, "w", "x", LONG_TTL).unwrap();
    assert_eq!(wlock(&mut m, "w", "x", LONG_TTL), Some(tw));
    assert_eq!(rlock(&mut m, "w", "x", LONG_TTL), Some(tw));
    assert_eq!(unlock(&mut m, "w", "x"), 1);
    campaign(&mut m, "e", "c1", LONG_TTL).unwrap();
    resign(&mut m, "e", "c1");
    campaign(&mut m, "e", "c2", LONG_TTL).unwrap();
    renew(&mut m, "k", "b", LONG_TTL + 5000).unwrap();
    wlock(&mut m, "gone", "g", LONG_TTL).unwrap();
    unlock(&mut m, "gone", "g");
    sync(&master, &replica);
    let locks = &["k", "w", "gone"];
    eventually_same(&master, &replica, locks, &["e"], "replica");
    eventually_same(&master, &sub, locks, &["e"], "sub-replica");
    let k = lock_info(&mut conn(&sub), "k");
    assert_eq!(k.holder("a", "read").map(|h| h.count), Some(3), "{k:?}");

    // The replica's AOF: effects only, each once.
    let incr = std::fs::read(aof_incr_path(&replica)).unwrap();
    let cmds = parse_aof(&incr);
    // (A give-back that was all its command did is logged as it came: it names no time.)
    let own = |c: &str| ["RWLOCK.UNLOCK", "LEADER.RESIGN", "SEMAPHORE.RELEASE"].contains(&c);
    assert!(
        cmds.iter().all(|c| {
            let name = c[0].to_ascii_uppercase();
            own(&name) || !(name.starts_with("RWLOCK.") || name.starts_with("LEADER."))
        }),
        "relative commands in the replica's AOF: {cmds:?}"
    );
    let expected = state(&mut m, locks, &["e"]);
    replica.kill9();
    // Restart it alone (REPLICAOF was a command, not a config): from its AOF only.
    replica.restart(None);
    let mut r = conn(&replica);
    assert_eq!(
        info_field(&mut r, "replication", "role").as_deref(),
        Some("master")
    );
    let after = state(&mut r, locks, &["e"]);
    if let Some(d) = state_diff(&expected, &after) {
        panic!(
            "replica restarted from its AOF differs from the master: {d}\nAOF: {cmds:?}\nlog:\n{}",
            replica.log()
        );
    }
    let high = info_int(&mut m, "lease", "lease_token_high_water");
    let t = wlock(&mut r, "gone", "new", LONG_TTL).unwrap();
    assert!(t > high);
}

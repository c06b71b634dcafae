//! Redis Cluster while a slot moves: the fence holds. Over raw sockets to single nodes (a
//! cluster client would follow the redirections and hide them).
//!
//! - A fenced write declares the keys of the command it runs (the getkeys-api), so a slot
//!   whose lock key and data key sit on different nodes mid-migration answers TRYAGAIN on
//!   both sides instead of writing the data key on the wrong node (which splits the data key
//!   and makes the migration fail with BUSYKEY), whichever key moves first.
//! - Tokens of one key rise over its whole life: after its slot moves, the target's first
//!   grant on a released key is above every token the source issued for it, even when the
//!   source's clock (or a restored payload) is far ahead of the target's.

use std::thread::sleep;
use std::time::{Duration, Instant};

use redis_lease_testkit::cluster::{Cluster, NodeLine};
use redis_lease_testkit::dump::push_tokens_ahead;
use redis_lease_testkit::socket::{Resp, Sock};

fn token(r: &Resp) -> i64 {
    match r {
        Resp::Int(t) => *t,
        other => panic!("expected a token, got {other:?}"),
    }
}

fn error_code(r: &Resp) -> &str {
    match r {
        Resp::Error(e) => e.split(' ').next().unwrap_or(""),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// A lock key and its data key in one slot (a hash tag), the data key at `v0`, the lock held:
/// the slot's owner, another master, and the token.
fn held_pair(cluster: &Cluster, tag: &str) -> (NodeLine, NodeLine, i64) {
    let lock = format!("{{{tag}}}");
    let data = format!("{{{tag}}}:data");
    let src = cluster.owner_of(&lock);
    let dst = cluster.other_master(&src);
    let mut s = Sock::connect(src.port);
    let t = token(&s.cmd(&["RWLOCK.WLOCK", &lock, "w", "60000"]));
    assert_eq!(s.cmd(&["SET", &data, "v0"]), Resp::Simple("OK".into()));
    (src, dst, t)
}

/// The fenced write, asked of `port` (after ASKING when `asking`).
fn fenced_set(port: u16, lock: &str, t: i64, data: &str, v: &str, asking: bool) -> Resp {
    let mut s = Sock::connect(port);
    if asking {
        assert_eq!(s.cmd(&["ASKING"]), Resp::Simple("OK".into()));
    }
    s.cmd(&["LEASE.EXEC", lock, &t.to_string(), "SET", data, v])
}

fn get(port: u16, key: &str, asking: bool) -> Resp {
    let mut s = Sock::connect(port);
    if asking {
        s.cmd(&["ASKING"]);
    }
    s.cmd(&["GET", key])
}

#[test]
fn a_fenced_write_is_refused_while_its_keys_are_split_by_a_migration() {
    let cluster = Cluster::start();

    // The lock key moves first (reshard moves keys in batches, so a slot with many keys passes
    // through this state).
    let (src, dst, t) = held_pair(&cluster, "lockfirst");
    let (lock, data) = ("{lockfirst}", "{lockfirst}:data");
    let slot = cluster.slot_of(lock);
    cluster.begin_migration(slot, &src, &dst);
    cluster.migrate_keys(&src, &dst, &[lock]).unwrap();
    let on_src = fenced_set(src.port, lock, t, data, "v1", false);
    assert_eq!(error_code(&on_src), "TRYAGAIN", "the source: {on_src:?}");
    let on_dst = fenced_set(dst.port, lock, t, data, "v1", true);
    assert_eq!(
        error_code(&on_dst),
        "TRYAGAIN",
        "the target after ASKING: {on_dst:?}"
    );
    assert_eq!(
        get(dst.port, data, true),
        Resp::Nil,
        "nothing was written on the target"
    );
    assert_eq!(get(src.port, data, false), Resp::Bulk(b"v0".to_vec()));
    // The data key follows without BUSYKEY, and the write runs once the slot is whole.
    cluster.migrate_keys(&src, &dst, &[data]).unwrap();
    assert_eq!(
        fenced_set(dst.port, lock, t, data, "v1", true),
        Resp::Simple("OK".into())
    );
    cluster.finish_migration(slot, &dst);
    assert_eq!(get(dst.port, data, false), Resp::Bulk(b"v1".to_vec()));

    // The data key moves first.
    let (src, dst, t) = held_pair(&cluster, "datafirst");
    let (lock, data) = ("{datafirst}", "{datafirst}:data");
    let slot = cluster.slot_of(lock);
    cluster.begin_migration(slot, &src, &dst);
    cluster.migrate_keys(&src, &dst, &[data]).unwrap();
    let on_src = fenced_set(src.port, lock, t, data, "v1", false);
    assert_eq!(error_code(&on_src), "TRYAGAIN", "the source: {on_src:?}");
    let on_dst = fenced_set(dst.port, lock, t, data, "v1", true);
    assert_eq!(
        error_code(&on_dst),
        "TRYAGAIN",
        "the target after ASKING: {on_dst:?}"
    );
    assert_eq!(
        get(src.port, data, false).clone(),
        Resp::Error(format!("ASK {slot} 127.0.0.1:{}", dst.port)),
        "no data key was made again on the source"
    );
    assert_eq!(get(dst.port, data, true), Resp::Bulk(b"v0".to_vec()));
    cluster.migrate_keys(&src, &dst, &[lock]).unwrap();
    cluster.finish_migration(slot, &dst);
    assert_eq!(
        fenced_set(dst.port, lock, t, data, "v1", false),
        Resp::Simple("OK".into())
    );
    assert_eq!(get(dst.port, data, false), Resp::Bulk(b"v1".to_vec()));

    // LEASE.EXEC declares the inner command's keys as its own.
    let mut any = Sock::connect(cluster.nodes[0].port);
    let keys = any.cmd(&[
        "COMMAND",
        "GETKEYS",
        "LEASE.EXEC",
        "{a}",
        "1",
        "MSET",
        "{a}:x",
        "1",
        "{a}:y",
        "2",
    ]);
    assert_eq!(
        keys,
        Resp::Array(vec![
            Resp::Bulk(b"{a}".to_vec()),
            Resp::Bulk(b"{a}:x".to_vec()),
            Resp::Bulk(b"{a}:y".to_vec())
        ])
    );
}

/// A WLOCK on `port` answered with a token, retried while grants are held (nil) for up to
/// `limit`.
fn wlock_eventually(port: u16, key: &str, owner: &str, limit: Duration) -> i64 {
    let start = Instant::now();
    loop {
        let r = Sock::connect(port).cmd(&["RWLOCK.WLOCK", key, owner, "60000"]);
        match r {
            Resp::Int(t) => return t,
            Resp::Nil if start.elapsed() < limit => sleep(Duration::from_millis(50)),
            other => panic!(
                "WLOCK {key} on {port}: {other:?} after {:?}",
                start.elapsed()
            ),
        }
    }
}

#[test]
fn a_released_keys_tokens_rise_after_its_slot_moves() {
    let cluster = Cluster::start();
    let ahead = 1_000_000_000_000; // about 1000 s of tokens
    for (tag, during) in [("after", false), ("during", true)] {
        let key = format!("{{{tag}}}");
        let src = cluster.owner_of(&key);
        let dst = cluster.other_master(&src);
        let mut s = Sock::connect(src.port);
        let t = token(&s.cmd(&["RWLOCK.WLOCK", &key, "a", "60000"]));
        let last = push_tokens_ahead(src.port, &key, t, ahead);
        let slot = cluster.slot_of(&key);
        if during {
            // Released on the source while its slot migrates: nothing of it is left to move.
            cluster.begin_migration(slot, &src, &dst);
            assert_eq!(s.cmd(&["RWLOCK.UNLOCK", &key, "a"]), Resp::Int(1));
            // The source sends new grants on it to the target, which holds them while the
            // source may still issue tokens on the slot.
            let asked = s.cmd(&["RWLOCK.WLOCK", &key, "b", "60000"]);
            assert_eq!(error_code(&asked), "ASK", "{asked:?}");
            let mut d = Sock::connect(dst.port);
            d.cmd(&["ASKING"]);
            let held = d.cmd(&["RWLOCK.WLOCK", &key, "b", "60000"]);
            assert!(
                held.is_nil() || matches!(held, Resp::Int(t) if t as u64 > last),
                "a grant on the importing slot below the source's last token {last}: {held:?}"
            );
        } else {
            assert_eq!(s.cmd(&["RWLOCK.UNLOCK", &key, "a"]), Resp::Int(1));
            cluster.begin_migration(slot, &src, &dst);
        }
        cluster.finish_migration(slot, &dst);
        let next = wlock_eventually(dst.port, &key, "c", Duration::from_secs(15));
        assert!(
            next as u64 > last,
            "{tag}: the target's first token {next} is not above the source's last {last}"
        );
    }
}

/// One integer field of `INFO lease` on `port`.
fn lease_field(port: u16, field: &str) -> i64 {
    Sock::connect(port).lease_int(field)
}

/// A source that never gives the slot up (it died, or its SETSLOT NODE never comes): the
/// target holds grants on the importing slot for `floor::WAIT_MS` (10 s) at most, then opens
/// them, logged and counted (`lease_floor_holds_expired`); a request parked meanwhile is
/// served then, not at its own deadline and not before.
#[test]
fn an_importing_slot_whose_source_never_gives_it_up_opens_after_the_bound() {
    let cluster = Cluster::start();
    let key = "{silent}";
    let src = cluster.owner_of(key);
    let dst = cluster.other_master(&src);
    let slot = cluster.slot_of(key);
    // Only the target is told (as a reshard's first step); the source never answers for it.
    let mut d = Sock::connect(dst.port);
    let r = d.cmd(&[
        "CLUSTER",
        "SETSLOT",
        &slot.to_string(),
        "IMPORTING",
        &src.id,
    ]);
    assert_eq!(r, Resp::Simple("OK".into()));
    let start = Instant::now();
    assert_eq!(lease_field(dst.port, "lease_floor_held_slots"), 1);
    assert_eq!(d.cmd(&["ASKING"]), Resp::Simple("OK".into()));
    let held = d.cmd(&["RWLOCK.WLOCK", key, "a", "60000"]);
    assert!(held.is_nil(), "a grant on a held importing slot: {held:?}");
    let mut w = Sock::connect(dst.port);
    w.send_pipeline(&[
        &["ASKING"],
        &["RWLOCK.WLOCK", key, "w", "60000", "WAIT", "30000"],
    ]);
    assert_eq!(w.reply("ASKING"), Resp::Simple("OK".into()));
    let got = w.reply_within(Duration::from_secs(20), "WLOCK ... WAIT 30000");
    let waited = start.elapsed();
    assert!(
        matches!(got, Resp::Int(t) if t > 0),
        "the parked request: {got:?}"
    );
    assert!(
        waited >= Duration::from_millis(9_500) && waited < Duration::from_secs(16),
        "served {waited:?} after the import began (the bound is 10 s)"
    );
    assert_eq!(lease_field(dst.port, "lease_floor_held_slots"), 0);
    assert_eq!(lease_field(dst.port, "lease_floor_holds_expired"), 1);
}

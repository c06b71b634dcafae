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

use redis_lease_testkit::cluster::{Cluster, NodeLine};
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
    let dst = cluster
        .masters()
        .into_iter()
        .find(|n| n.id != src.id)
        .unwrap();
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

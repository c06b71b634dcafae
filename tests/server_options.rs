//! The module options set at load: Valkey 8.1+'s skip-command-validation (RM_Replicate and
//! RM_EmitAOF skip the command lookup) is set there and only there, and what the module
//! replicates still reaches a replica and the AOF with it.

use std::time::Duration;

use redis_lease_testkit::prelude::*;

/// (major, minor) of `valkey_version`, if the server is Valkey.
fn valkey(c: &mut Connection) -> Option<(u32, u32)> {
    let v = info_field(c, "server", "valkey_version")?;
    let mut p = v.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
    Some((p.next().unwrap_or(0), p.next().unwrap_or(0)))
}

#[test]
fn skip_command_validation_is_set_on_valkey_8_1_and_later_only() {
    let master = Server::start();
    let mut m = conn(&master);
    let want = i64::from(valkey(&mut m).is_some_and(|v| v >= (8, 1)));
    assert_eq!(
        info_int(&mut m, "lease", "lease_skip_command_validation"),
        want,
        "server: {:?}",
        info_field(&mut m, "server", "redis_version")
    );
    // The effects the master replicates (LEASE.APPLY, a verbatim UNLOCK) still arrive.
    let replica = start_replica(&master);
    sync(&master, &replica);
    let mut r = conn(&replica);
    let token: i64 = redis::cmd("RWLOCK.WLOCK")
        .arg("opt:k")
        .arg("owner-1")
        .arg(30_000)
        .query(&mut m)
        .unwrap();
    let arrived = eventually(Duration::from_secs(10), || {
        lock_info(&mut r, "opt:k").token == token
    });
    assert!(
        arrived,
        "the grant never reached the replica:\n{}",
        replica.log()
    );
    let _: i64 = redis::cmd("RWLOCK.UNLOCK")
        .arg("opt:k")
        .arg("owner-1")
        .query(&mut m)
        .unwrap();
    let gone = eventually(Duration::from_secs(10), || {
        lock_info(&mut r, "opt:k").holders.is_empty()
    });
    assert!(
        gone,
        "the release never reached the replica:\n{}",
        replica.log()
    );
}

//! ACL categories over the wire: users granted by category (`+@write +@read`, `+@read`,
//! `+@lease`, `-@lease`) get what docs/COMMANDS.md ("ACL categories and COMMAND DOCS") says,
//! on the server under test, whose support is read from its version (not from the module):
//! Redis 7.0 has no category API (the commands must be granted by name: the README's line),
//! 7.2 has the built-in categories, 7.4+ and Valkey 9 the module's own `@lease` too.

use std::collections::BTreeSet;

use redis_lease_testkit::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Support {
    /// Redis 7.0: no `RedisModule_SetCommandACLCategories`.
    Unavailable,
    /// Redis 7.2: the built-in categories only.
    Builtin,
    /// Redis 7.4+, Valkey 9: `@lease` too.
    Module,
}

fn version(info: &str, field: &str) -> Option<(u32, u32)> {
    let v = info
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{field}:")))?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    Some((parts.next()?, parts.next().unwrap_or(0)))
}

/// What the server under test supports, by its version.
fn support(admin: &mut Sock) -> Support {
    let info = String::from_utf8_lossy(admin.cmd(&["INFO", "server"]).bytes()).into_owned();
    if let Some(v) = version(&info, "valkey_version") {
        assert!(
            v >= (9, 0),
            "Valkey {v:?}: which ACL APIs has it? (add it here)"
        );
        return Support::Module;
    }
    match version(&info, "redis_version").expect("redis_version") {
        v if v < (7, 2) => Support::Unavailable,
        v if v < (7, 4) => Support::Builtin,
        _ => Support::Module,
    }
}

/// Whether `ACL CAT <category>` lists module commands (Redis 8+, Valkey; 7.2 and 7.4 skip
/// them in the listing only).
fn acl_cat_lists_modules(admin: &mut Sock) -> bool {
    let info = String::from_utf8_lossy(admin.cmd(&["INFO", "server"]).bytes()).into_owned();
    version(&info, "valkey_version").is_some()
        || version(&info, "redis_version").is_some_and(|v| v >= (8, 0))
}

/// Whether the server knows the `internal` command flag (Redis 8+), which hides LEASE.APPLY.
fn hides_internal(admin: &mut Sock) -> bool {
    let info = String::from_utf8_lossy(admin.cmd(&["INFO", "server"]).bytes()).into_owned();
    version(&info, "valkey_version").is_none()
        && version(&info, "redis_version").is_some_and(|v| v >= (8, 0))
}

fn start() -> (Server, Sock, Support) {
    let s = Server::start();
    let mut admin = Sock::connect(s.port);
    let sup = support(&mut admin);
    (s, admin, sup)
}

/// A connection authenticated as a new user with these rules (`~*` and a password added).
fn user(s: &Server, admin: &mut Sock, name: &str, rules: &[&str]) -> Sock {
    let mut args = vec!["ACL", "SETUSER", name, "reset", "on", ">pw", "~*"];
    args.extend_from_slice(rules);
    let r = admin.cmd(&args);
    assert_eq!(r, Resp::Simple("OK".into()), "{args:?}");
    login(s, name)
}

fn login(s: &Server, name: &str) -> Sock {
    let mut c = Sock::connect(s.port);
    assert_eq!(
        c.cmd(&["AUTH", name, "pw"]),
        Resp::Simple("OK".into()),
        "AUTH {name}"
    );
    c
}

fn denied(r: &Resp) -> bool {
    matches!(r, Resp::Error(e) if e.starts_with("NOPERM"))
}

/// The module's public commands, as the server lists them (LEASE.APPLY and the test build's
/// LEASE.FAULT left out).
fn public_commands(admin: &mut Sock) -> BTreeSet<String> {
    admin
        .cmd(&["COMMAND", "LIST", "FILTERBY", "MODULE", "lease"])
        .array()
        .iter()
        .map(|n| String::from_utf8_lossy(n.bytes()).to_lowercase())
        .filter(|n| n != "lease.apply" && n != "lease.fault")
        .collect()
}

/// Every public command once, as a client would use them (each reply by command name);
/// LEASE.EXEC runs `SET` under the write lock.
fn exercise(c: &mut Sock, tag: &str) -> Vec<(String, Resp)> {
    let (l, e, sem, data) = (
        format!("acl:{tag}:l"),
        format!("acl:{tag}:e"),
        format!("acl:{tag}:s"),
        format!("acl:{tag}:data"),
    );
    let mut out: Vec<(String, Resp)> = Vec::new();
    let mut run = |c: &mut Sock, args: &[&str]| {
        let r = c.cmd(args);
        out.push((args[0].to_lowercase(), r.clone()));
        r
    };
    let t = run(c, &["RWLOCK.WLOCK", &l, "o", "10000"]);
    let t = match t {
        Resp::Int(t) => t.to_string(),
        _ => "1".to_string(),
    };
    run(c, &["RWLOCK.RENEW", &l, "o", "10000"]);
    run(c, &["RWLOCK.INFO", &l]);
    run(c, &["LEASE.EXEC", &l, &t, "SET", &data, "1"]);
    run(c, &["RWLOCK.UNLOCK", &l, "o"]);
    run(c, &["RWLOCK.RLOCK", &l, "o", "10000", "WAIT", "10"]);
    run(c, &["RWLOCK.UNLOCK", &l, "o"]);
    run(c, &["RWLOCK.MLOCK", "1", &l, "o", "10000", "WAIT", "10"]);
    run(c, &["RWLOCK.MRENEW", "1", &l, "o", "10000"]);
    run(c, &["RWLOCK.MUNLOCK", "1", &l, "o"]);
    run(c, &["LEADER.CAMPAIGN", &e, "c", "10000", "WAIT", "10"]);
    run(c, &["LEADER.RENEW", &e, "c", "10000"]);
    run(c, &["LEADER.CURRENT", &e]);
    run(c, &["LEADER.INFO", &e]);
    run(c, &["LEADER.RESIGN", &e, "c"]);
    run(
        c,
        &["SEMAPHORE.ACQUIRE", &sem, "o", "2", "10000", "PERMITS", "1"],
    );
    run(c, &["SEMAPHORE.RENEW", &sem, "o", "10000"]);
    run(c, &["SEMAPHORE.INFO", &sem]);
    run(c, &["SEMAPHORE.RELEASE", &sem, "o"]);
    out
}

/// Asserts that `exercise` covered every public command and that each reply is an error
/// exactly when `refused(command)`; with `inner_set` false, LEASE.EXEC's SET must be refused
/// by its own ACL check (the user lacks `+set`).
fn check(
    admin: &mut Sock,
    got: &[(String, Resp)],
    refused: impl Fn(&str) -> bool,
    inner_set: bool,
    who: &str,
) {
    let covered: BTreeSet<String> = got.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(
        covered,
        public_commands(admin),
        "{who}: every public command"
    );
    for (name, r) in got {
        if refused(name) {
            assert!(denied(r), "{who}: {name} should be refused: {r:?}");
        } else if name == "lease.exec" && !inner_set {
            assert!(
                // Redis 7.0's RM_Call says only "acl verification failed".
                matches!(r, Resp::Error(e) if (e.contains("NOPERM") && e.to_lowercase().contains("set"))
                    || e.contains("acl verification failed")),
                "{who}: LEASE.EXEC's SET is checked as the user's own: {r:?}"
            );
        } else {
            assert!(!matches!(r, Resp::Error(_)), "{who}: {name}: {r:?}");
        }
    }
}

fn reads(name: &str) -> bool {
    name.ends_with(".info") || name == "leader.current"
}

#[test]
fn the_categories_are_what_the_server_allows() {
    let (s, mut admin, sup) = start();
    let info = String::from_utf8_lossy(admin.cmd(&["INFO", "lease"]).bytes()).into_owned();
    let field = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("lease_acl_categories:"))
        .unwrap_or_else(|| panic!("no lease_acl_categories in {info}"));
    let expected = match sup {
        Support::Unavailable => "unavailable",
        Support::Builtin => "builtin",
        Support::Module => "builtin,lease",
    };
    assert_eq!(field, expected, "{sup:?}");
    let public = public_commands(&mut admin);
    assert!(public.len() >= 14, "{public:?}");
    let cat = |admin: &mut Sock, c: &str| -> BTreeSet<String> {
        match admin.cmd(&["ACL", "CAT", c]) {
            Resp::Array(a) => a
                .iter()
                .map(|n| String::from_utf8_lossy(n.bytes()).to_lowercase())
                .filter(|n| n.contains('.'))
                .collect(),
            other => panic!("ACL CAT {c}: {other:?}"),
        }
    };
    let write: BTreeSet<String> = public.iter().filter(|n| !reads(n)).cloned().collect();
    let read: BTreeSet<String> = public.iter().filter(|n| reads(n)).cloned().collect();
    match sup {
        Support::Unavailable => {
            assert!(cat(&mut admin, "write").is_empty());
            assert!(cat(&mut admin, "read").is_empty());
            let log = s.log();
            assert!(
                log.contains("cannot give module commands ACL categories"),
                "the load log says categories are unavailable:\n{log}"
            );
        }
        _ if !acl_cat_lists_modules(&mut admin) => {
            // Redis 7.2 and 7.4's ACL CAT leave module commands out of the listing (acl.c,
            // aclCatWithFlags: `if (cmd->flags & CMD_MODULE) continue;`), though users granted
            // by category get them (the tests above): COMMAND INFO below shows them.
            assert!(cat(&mut admin, "write").is_empty());
            assert!(cat(&mut admin, "read").is_empty());
        }
        _ => {
            assert_eq!(cat(&mut admin, "write"), write);
            assert_eq!(cat(&mut admin, "read"), read);
        }
    }
    let lease = admin.cmd(&["ACL", "CAT", "lease"]);
    match sup {
        Support::Module if acl_cat_lists_modules(&mut admin) => {
            assert_eq!(cat(&mut admin, "lease"), public);
        }
        // The category exists; 7.4's listing leaves module commands out, as above.
        Support::Module => assert!(matches!(lease, Resp::Array(_)), "{lease:?}"),
        _ => assert!(matches!(lease, Resp::Error(_)), "no @lease here: {lease:?}"),
    }
    // Each command's categories as COMMAND INFO shows them are the contract's.
    let contract = include_str!("../docs/COMMANDS.md");
    for name in public.iter().map(String::as_str).chain(["lease.apply"]) {
        let v = admin.cmd(&["COMMAND", "INFO", name]);
        if name == "lease.apply" && hides_internal(&mut admin) {
            assert!(v.array()[0].is_nil(), "hidden from clients: {v:?}");
            continue;
        }
        let entry = v.array()[0].array();
        let cats: Vec<String> = entry[6]
            .array()
            .iter()
            .map(|c| String::from_utf8_lossy(c.bytes()).into_owned())
            .collect();
        let row = contract
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` | `@", name.to_uppercase())))
            .unwrap_or_else(|| panic!("docs/COMMANDS.md has no ACL row for {name}"));
        let mut documented: Vec<&str> = row.split('`').nth(3).unwrap().split(' ').collect();
        match sup {
            Support::Unavailable => documented.clear(),
            Support::Builtin => documented.retain(|c| *c != "@lease"),
            Support::Module => {}
        }
        let mut a = cats.clone();
        a.sort();
        let mut b: Vec<String> = documented.iter().map(|c| c.to_string()).collect();
        b.sort();
        assert_eq!(
            a, b,
            "{name}: COMMAND INFO {cats:?} vs the contract's {row}"
        );
    }
}

#[test]
fn a_read_write_user_can_use_the_module() {
    let (s, mut admin, sup) = start();
    let mut c = user(&s, &mut admin, "rw", &["+@write", "+@read"]);
    let got = exercise(&mut c, "rw");
    let none = sup == Support::Unavailable;
    // Redis 7.0: the commands are in no category, so the user gets none of them.
    check(&mut admin, &got, |_| none, true, "+@write +@read");
}

#[test]
fn a_read_only_user_can_read_but_take_nothing() {
    let (s, mut admin, sup) = start();
    let mut c = user(&s, &mut admin, "ro", &["+@read"]);
    let got = exercise(&mut c, "ro");
    let none = sup == Support::Unavailable;
    check(&mut admin, &got, |n| none || !reads(n), true, "+@read");
    let mut a = Sock::connect(s.port);
    assert_eq!(
        a.cmd(&["DBSIZE"]),
        Resp::Int(0),
        "the +@read user made nothing"
    );
}

#[test]
fn the_lease_category_grants_the_module_and_nothing_else() {
    let (s, mut admin, sup) = start();
    if sup != Support::Module {
        // No @lease on this server: granting it is an error, not a silent no-op.
        let r = admin.cmd(&["ACL", "SETUSER", "l", "on", ">pw", "~*", "+@lease"]);
        assert!(matches!(&r, Resp::Error(e) if e.contains("lease")), "{r:?}");
        return;
    }
    let mut c = user(&s, &mut admin, "l", &["+@lease"]);
    let got = exercise(&mut c, "l");
    check(&mut admin, &got, |_| false, false, "+@lease");
    for args in [
        &["GET", "acl:l:data"][..],
        &["SET", "acl:x", "1"],
        &["DEL", "acl:l:l"],
        &["PING"],
    ] {
        let r = c.cmd(args);
        assert!(denied(&r), "+@lease: {args:?}: {r:?}");
    }
    // Taken away: -@lease.
    let mut d = user(&s, &mut admin, "d", &["+@all", "-@lease"]);
    let got = exercise(&mut d, "d");
    check(&mut admin, &got, |_| true, true, "+@all -@lease");
    assert_eq!(d.cmd(&["SET", "acl:y", "1"]), Resp::Simple("OK".into()));
    assert_eq!(d.cmd(&["GET", "acl:y"]), Resp::Bulk(b"1".to_vec()));
}

#[test]
fn lease_apply_is_refused_to_users() {
    let (s, mut admin, sup) = start();
    let mut rules: Vec<(&str, Vec<&str>)> =
        vec![("rw", vec!["+@write", "+@read"]), ("all", vec!["+@all"])];
    if sup == Support::Module {
        rules.push(("l", vec!["+@lease"]));
    }
    let apply = [
        "LEASE.APPLY",
        "k",
        "rwlock",
        "GRANT",
        "a",
        "write",
        "99999999999999",
        "5",
    ];
    for (name, r) in rules {
        let mut c = user(&s, &mut admin, name, &r);
        let v = c.cmd(&apply);
        let e = match &v {
            Resp::Error(e) => e.clone(),
            other => panic!("{name}: LEASE.APPLY was accepted: {other:?}"),
        };
        let refused = e.starts_with("NOPERM")
            || e.contains("unknown command")
            || (name == "all" && e.contains("LEASE.APPLY is internal"));
        assert!(refused, "{name} ({r:?}): {e}");
        if name != "all" && sup != Support::Unavailable {
            assert!(
                !e.contains("is internal"),
                "{name}: refused by ACL, not later: {e}"
            );
        }
        if hides_internal(&mut admin) {
            assert!(e.contains("unknown command"), "{name}: hidden: {e}");
        }
    }
    assert_eq!(admin.cmd(&["DBSIZE"]), Resp::Int(0));
}

/// The README's `ACL SETUSER` lines, run as they are where the server has what they use.
#[test]
fn the_readme_recipes_work() {
    let (s, mut admin, sup) = start();
    let readme = include_str!("../README.md");
    let lines: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("ACL SETUSER "))
        .collect();
    assert_eq!(lines.len(), 3, "the README's ACL section: {lines:?}");
    let mut by_name_seen = false;
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        let name = words[2];
        // The recipe's own password, for AUTH.
        let password = words.iter().find_map(|w| w.strip_prefix('>')).unwrap();
        let _ = admin.cmd(&["ACL", "DELUSER", name]);
        let r = admin.cmd(&words);
        let by_name = line.contains("+rwlock.rlock");
        let lease = line.contains("+@lease");
        if lease && sup != Support::Module {
            assert!(matches!(r, Resp::Error(_)), "{line}: {r:?}");
            continue;
        }
        assert_eq!(r, Resp::Simple("OK".into()), "{line}");
        let mut c = Sock::connect(s.port);
        assert_eq!(c.cmd(&["AUTH", name, password]), Resp::Simple("OK".into()));
        let got = exercise(&mut c, name);
        let builtin = !by_name && !lease;
        let none = builtin && sup == Support::Unavailable;
        // The by-name and @lease recipes grant the module only: LEASE.EXEC's SET needs +set.
        check(&mut admin, &got, |_| none, builtin, line);
        if by_name {
            by_name_seen = true;
            assert_eq!(
                admin.cmd(&["ACL", "SETUSER", name, "+set"]),
                Resp::Simple("OK".into())
            );
            let got = exercise(&mut c, &format!("{name}2"));
            check(
                &mut admin,
                &got,
                |_| false,
                true,
                "the by-name recipe with +set",
            );
        }
    }
    assert!(
        by_name_seen,
        "the README has the by-name recipe (Redis 7.0)"
    );
}

/// The key specs: the commands that change a lock need write access to its key (and read:
/// their replies show its state), INFO / CURRENT read access, and LEASE.EXEC only read
/// access to the lock key (its command's keys are checked when it runs).
#[test]
fn key_permissions_follow_the_key_specs() {
    let (s, mut admin, _) = start();
    let mut c = user(&s, &mut admin, "rk", &["+@all", "resetkeys", "%R~acl:*"]);
    let got = exercise(&mut c, "rk");
    for (name, r) in &got {
        if reads(name) {
            assert!(!matches!(r, Resp::Error(_)), "%R~: {name}: {r:?}");
        } else if name == "lease.exec" {
            // The lock key may be read, but LEASE.EXEC declares its inner command's keys too
            // (the getkeys-api), so Redis refuses the SET's key, only readable here, before
            // anything runs.
            assert!(
                matches!(r, Resp::Error(e) if e.starts_with("NOPERM") && e.contains("key")),
                "{r:?}"
            );
        } else {
            assert!(denied(r), "%R~: {name} needs write access: {r:?}");
        }
    }
    // A lock the admin holds fences a write of a user who may only read the lock key.
    let t = admin
        .cmd(&["RWLOCK.WLOCK", "acl:fence", "admin", "10000"])
        .int();
    let mut w = user(
        &s,
        &mut admin,
        "fenced",
        &["+@all", "resetkeys", "%R~acl:fence", "~acl:data"],
    );
    let r = w.cmd(&[
        "LEASE.EXEC",
        "acl:fence",
        &t.to_string(),
        "SET",
        "acl:data",
        "1",
    ]);
    assert_eq!(r, Resp::Simple("OK".into()));
    let r = w.cmd(&[
        "LEASE.EXEC",
        "acl:fence",
        &t.to_string(),
        "SET",
        "acl:other",
        "1",
    ]);
    assert!(
        matches!(r, Resp::Error(_)),
        "the command's own key is checked: {r:?}"
    );
    let r = w.cmd(&["RWLOCK.UNLOCK", "acl:fence", "admin"]);
    assert!(denied(&r), "{r:?}");
    assert_eq!(admin.cmd(&["GET", "acl:data"]), Resp::Bulk(b"1".to_vec()));
    assert_eq!(admin.cmd(&["EXISTS", "acl:other"]), Resp::Int(0));
}

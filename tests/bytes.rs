//! Owners and keys are binary-safe bytes (issue 10): NUL, 0xff, CR LF, invalid UTF-8 and all
//! 256 byte values go through grant, reentrant grant, hand-off, lapse (at `loglevel
//! verbose`, where the lapse is logged: the old module panicked there on a NUL), keyspace
//! events, the read commands, error texts, RDB, AOF rewrite (with and without RDB preamble),
//! DUMP/RESTORE and replication, and come back exact; every log line stays printable ASCII.
//! Raw sockets (`testkit::socket`), so every byte is seen as the server sent it.

use std::collections::BTreeMap;
use std::time::Duration;

use redis_lease_testkit::prelude::*;

/// The ids under test, by name.
fn ids() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("nul", b"\0".to_vec()),
        ("nul inside", b"a\0b".to_vec()),
        ("0xff", b"\xff".to_vec()),
        ("crlf", b"x\r\ny".to_vec()),
        ("invalid utf-8", b"\xc3\x28\xa0\xa1\xed\xa0\x80".to_vec()),
        ("quotes", b"'\"\\".to_vec()),
        ("all 256 bytes", (0..=255u8).collect()),
        // The module keeps a canonical UUID text as 16 bytes; the others stay bytes.
        ("uuid", UUID.as_bytes().to_vec()),
        ("uuid in capitals", UUID.to_uppercase().into_bytes()),
        (
            "uuid without its last digit",
            UUID.as_bytes()[..35].to_vec(),
        ),
    ]
}

/// A UUID in the text both clients send (lowercase, hyphenated).
const UUID: &str = "0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2b";

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// How the module writes bytes into a log line: escaped, at most 128 bytes of them.
fn escaped(b: &[u8]) -> String {
    let cut = b.len().min(128);
    let mut s = b[..cut].escape_ascii().to_string();
    if cut < b.len() {
        s.push_str("...");
    }
    s
}

fn ping(s: &Server, what: &str) {
    let pong = Sock::connect(s.port).cmd(&["PING"]);
    assert_eq!(pong, Resp::Simple("PONG".into()), "{what}: PING");
}

/// The server answers, and its log shows no crash or panic and is printable ASCII.
fn healthy(s: &Server, what: &str) {
    ping(s, what);
    assert_log_clean(s, what);
    assert_log_printable(s, what);
}

/// Lapses logged; ids of up to 1 KiB (an id with a suffix exceeds the default 256).
fn verbose() -> Options {
    debug_opts()
        .arg("loglevel", "verbose")
        .module_arg("max-id-length", "1024")
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    RwLock,
    Leader,
    Semaphore,
}

const KINDS: [Kind; 3] = [Kind::RwLock, Kind::Leader, Kind::Semaphore];

impl Kind {
    /// Requests `owner`'s exclusive hold of `key` (a write lock, the leadership, the only
    /// permit of a semaphore of limit 1).
    fn acquire(self, key: &[u8], owner: &[u8], ttl: u64, wait: Option<u64>) -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = match self {
            Kind::RwLock => vec![b"RWLOCK.WLOCK".to_vec(), key.into(), owner.into()],
            Kind::Leader => vec![b"LEADER.CAMPAIGN".to_vec(), key.into(), owner.into()],
            Kind::Semaphore => vec![
                b"SEMAPHORE.ACQUIRE".to_vec(),
                key.into(),
                owner.into(),
                b"1".to_vec(),
            ],
        };
        v.push(ttl.to_string().into_bytes());
        if let Some(w) = wait {
            v.extend([b"WAIT".to_vec(), w.to_string().into_bytes()]);
        }
        v
    }

    fn release(self, key: &[u8], owner: &[u8]) -> Vec<Vec<u8>> {
        let name: &[u8] = match self {
            Kind::RwLock => b"RWLOCK.UNLOCK",
            Kind::Leader => b"LEADER.RESIGN",
            Kind::Semaphore => b"SEMAPHORE.RELEASE",
        };
        vec![name.to_vec(), key.into(), owner.into()]
    }

    fn key(self, id: &[u8]) -> Vec<u8> {
        let prefix: &[u8] = match self {
            Kind::RwLock => b"rw\0",
            Kind::Leader => b"ld\xff",
            Kind::Semaphore => b"sm\r\n",
        };
        cat(&[prefix, id])
    }

    /// The keyspace events of a grant, a release and a lapse.
    fn events(self) -> [&'static str; 3] {
        match self {
            Kind::RwLock => ["rwlock.write", "rwlock.release", "rwlock.lapse"],
            Kind::Leader => ["leader.elect", "leader.resign", "leader.lapse"],
            Kind::Semaphore => ["semaphore.acquire", "semaphore.release", "semaphore.lapse"],
        }
    }
}

fn call(s: &mut Sock, args: &[Vec<u8>]) -> Resp {
    let a: Vec<&[u8]> = args.iter().map(|x| x.as_slice()).collect();
    s.call(&a)
}

fn send(s: &mut Sock, args: &[Vec<u8>]) {
    let a: Vec<&[u8]> = args.iter().map(|x| x.as_slice()).collect();
    s.send(&a);
}

fn token(r: &Resp, what: &str) -> i64 {
    match r {
        Resp::Int(t) if *t >= 1 => *t,
        other => panic!("{what}: expected a token, got {other:?}"),
    }
}

/// One holder as a read command reports it (no ttl: it runs down).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Held {
    owner: Vec<u8>,
    /// "read"/"write" for a lock, "leader", or the permits of a semaphore.
    what: String,
    count: i64,
    token: i64,
}

/// A key's state: its holders (sorted) and its last token (0 for an election, whose reply
/// has none), waiters.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Snapshot {
    holders: Vec<Held>,
    token: i64,
    waiters: i64,
}

fn snapshot(s: &mut Sock, kind: Kind, key: &[u8]) -> Snapshot {
    let mut holders = Vec::new();
    let (mut token, mut waiters) = (0, 0);
    match kind {
        Kind::Leader => {
            let r = s.call(&[b"LEADER.CURRENT", key]);
            if !r.is_nil() {
                let a = r.array();
                holders.push(Held {
                    owner: a[0].bytes().to_vec(),
                    what: "leader".into(),
                    count: 1,
                    token: a[1].int(),
                });
            }
        }
        Kind::RwLock => {
            let r = s.call(&[b"RWLOCK.INFO", key]);
            for h in r.get("holders").expect("holders").array() {
                holders.push(Held {
                    owner: h.get("owner").unwrap().bytes().to_vec(),
                    what: String::from_utf8_lossy(h.get("mode").unwrap().bytes()).into(),
                    count: h.get("count").unwrap().int(),
                    token: h.get("token").unwrap().int(),
                });
            }
            token = r.get("token").unwrap().int();
            waiters = r.get("waiters").unwrap().int();
        }
        Kind::Semaphore => {
            let r = s.call(&[b"SEMAPHORE.INFO", key]);
            for h in r.get("holders").expect("holders").array() {
                holders.push(Held {
                    owner: h.get("owner").unwrap().bytes().to_vec(),
                    what: h.get("permits").unwrap().int().to_string(),
                    count: 1,
                    token: h.get("token").unwrap().int(),
                });
            }
            token = r.get("token").unwrap().int();
            waiters = r.get("waiters").unwrap().int();
        }
    }
    holders.sort();
    Snapshot {
        holders,
        token,
        waiters,
    }
}

/// How many requests wait on the server.
fn waiting(s: &Server) -> i64 {
    info_int(&mut conn(s), "lease", "lease_waiters")
}

fn exists(s: &mut Sock, key: &[u8]) -> bool {
    s.call(&[b"EXISTS", key]).int() == 1
}

/// Grant, reentrant grant, WAIT hand-off and lapse of binary owners on binary keys of `kind`;
/// each owner comes back exact from the read command and each lapse is logged, escaped.
fn grant_hand_off_lapse(s: &Server, kind: Kind) {
    let mut c = Sock::connect(s.port);
    let mut w = Sock::connect(s.port);
    for (name, id) in ids() {
        let key = kind.key(&id);
        let holder = id.clone();
        let waiter = cat(&[&id, b"\0w"]);
        let what = format!("{kind:?} {name}");
        let t1 = token(
            &call(&mut c, &kind.acquire(&key, &holder, 60_000, None)),
            &what,
        );
        let again = token(
            &call(&mut c, &kind.acquire(&key, &holder, 60_000, None)),
            &what,
        );
        assert_eq!(again, t1, "{what}: the reentrant grant's token");
        let snap = snapshot(&mut c, kind, &key);
        assert_eq!(snap.holders.len(), 1, "{what}: {snap:?}");
        assert_eq!(snap.holders[0].owner, holder, "{what}: the owner's bytes");
        assert_eq!(snap.holders[0].token, t1, "{what}");
        if let Kind::RwLock = kind {
            assert_eq!(snap.holders[0].count, 2, "{what}: two write holds");
        }
        // A waiter, handed the key when the holder lets go (a lock needs both UNLOCKs).
        send(&mut w, &kind.acquire(&key, &waiter, 300, Some(20_000)));
        let queued = eventually(Duration::from_secs(5), || waiting(s) == 1);
        assert!(queued, "{what}: the waiter never queued");
        let releases = if let Kind::RwLock = kind { 2 } else { 1 };
        for _ in 0..releases {
            let r = call(&mut c, &kind.release(&key, &holder));
            assert_eq!(r, Resp::Int(1), "{what}: the holder's release");
        }
        let t2 = token(&w.reply(&format!("{what}: the waiter")), &what);
        assert!(t2 > t1, "{what}: hand-off token {t2} after {t1}");
        let snap = snapshot(&mut c, kind, &key);
        let owners: Vec<&[u8]> = snap.holders.iter().map(|h| h.owner.as_slice()).collect();
        assert_eq!(
            owners,
            vec![waiter.as_slice()],
            "{what}: after the hand-off"
        );
        // Its 300 ms lease lapses; the timer deletes the key (EXISTS does not prune).
        let gone = eventually(Duration::from_secs(5), || !exists(&mut c, &key));
        assert!(gone, "{what}: the lapsed key is still there");
        let line = format!(
            "lease: lapse key='{}' owner='{}' held_ms=",
            escaped(&key),
            escaped(&waiter)
        );
        let logged = eventually(Duration::from_secs(2), || s.log().contains(&line));
        assert!(logged, "{what}: no log line {line:?}; log:\n{}", s.log());
        healthy(s, &what);
    }
}

#[test]
fn binary_owners_and_keys_through_grant_reentry_hand_off_and_lapse() {
    let s = Server::with(verbose());
    for kind in KINDS {
        grant_hand_off_lapse(&s, kind);
    }
    let info = lease_info(&mut conn(&s));
    let n = (ids().len() * KINDS.len()).to_string();
    assert_eq!(info["lease_lapses"], n, "every lapse counted: {info:?}");
    assert_eq!(
        info["lease_handoffs"], n,
        "every hand-off counted: {info:?}"
    );
    assert_eq!(info["lease_keys"], "0");
    healthy(&s, "the end");
}

/// One message of a pattern subscription: (channel, payload).
fn pmessage(r: &Resp) -> (Vec<u8>, Vec<u8>) {
    let a = r.array();
    assert_eq!(a[0].bytes(), b"pmessage", "{r:?}");
    (a[2].bytes().to_vec(), a[3].bytes().to_vec())
}

#[test]
fn keyspace_events_name_binary_keys_exactly() {
    let s = Server::with(verbose());
    let mut c = Sock::connect(s.port);
    c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]);
    let mut sub = Sock::connect(s.port);
    let r = sub.cmd(&["PSUBSCRIBE", "__key*@0__:*"]);
    assert_eq!(r.array()[0].bytes(), b"psubscribe", "{r:?}");

    let mut expected = 0;
    let mut keys = Vec::new();
    for kind in KINDS {
        for (_, id) in ids() {
            let key = kind.key(&id);
            // A grant, a release, then a grant whose 100 ms lease lapses.
            token(
                &call(&mut c, &kind.acquire(&key, &id, 60_000, None)),
                "grant",
            );
            assert_eq!(call(&mut c, &kind.release(&key, &id)), Resp::Int(1));
            token(&call(&mut c, &kind.acquire(&key, &id, 100, None)), "grant");
            keys.push((kind, key));
            expected += 4;
        }
    }
    // (key -> events) as the keyspace channels and as the keyevent channels name them.
    let mut by_space: BTreeMap<Vec<u8>, Vec<String>> = BTreeMap::new();
    let mut by_event: BTreeMap<Vec<u8>, Vec<String>> = BTreeMap::new();
    let mut seen = 0;
    let space = b"__keyspace@0__:";
    let event = b"__keyevent@0__:";
    while seen < 2 * expected {
        let (channel, payload) = pmessage(&sub.reply("a keyspace event"));
        let (key, name) = if let Some(k) = channel.strip_prefix(space) {
            (k.to_vec(), String::from_utf8_lossy(&payload).into_owned())
        } else if let Some(e) = channel.strip_prefix(event) {
            (payload, String::from_utf8_lossy(e).into_owned())
        } else {
            panic!("unexpected channel {}", channel.escape_ascii());
        };
        let ours = ["rwlock.", "leader.", "semaphore."]
            .iter()
            .any(|p| name.starts_with(p));
        if !ours {
            continue;
        }
        seen += 1;
        let into = if channel.starts_with(space) {
            &mut by_space
        } else {
            &mut by_event
        };
        into.entry(key).or_default().push(name);
    }
    for (kind, key) in &keys {
        let [grant, release, lapse] = kind.events();
        let want = vec![grant, release, grant, lapse];
        for (how, got) in [("keyspace", &by_space), ("keyevent", &by_event)] {
            assert_eq!(
                got.get(key)
                    .map(|v| v.iter().map(String::as_str).collect::<Vec<_>>()),
                Some(want.clone()),
                "{how} events of {kind:?} key {}",
                key.escape_ascii()
            );
        }
    }
    assert_eq!(by_space.len(), keys.len(), "no event names another key");
    assert_eq!(by_event.len(), keys.len(), "no event names another key");
    healthy(&s, "keyspace events");
}

/// Every byte of an error reply is printable ASCII, and `quoted` comes back escaped.
fn assert_ascii_error(r: &Resp, quoted: &[u8], what: &str) {
    let e = r.err();
    assert!(
        e.bytes().all(|b| (0x20..0x7f).contains(&b)),
        "{what}: {}",
        e.escape_default()
    );
    let want = quoted.escape_ascii().to_string();
    assert!(e.contains(&want), "{what}: {e:?} does not quote {want:?}");
}

#[test]
fn error_replies_quote_binary_arguments_as_ascii() {
    let s = Server::with(verbose());
    let mut c = Sock::connect(s.port);
    let bad: &[u8] = b"\x001\xff\r\n\xc3(";
    let k: &[u8] = b"k\0\xff";
    let o: &[u8] = b"o\0\r\n";
    let cases: Vec<(&str, Vec<&[u8]>)> = vec![
        ("ttl", vec![b"RWLOCK.WLOCK", k, o, bad]),
        ("renew ttl", vec![b"RWLOCK.RENEW", k, o, bad]),
        ("WAIT", vec![b"RWLOCK.RLOCK", k, o, b"1000", b"WAIT", bad]),
        ("option", vec![b"LEADER.CAMPAIGN", k, o, b"1000", bad, b"1"]),
        ("limit", vec![b"SEMAPHORE.ACQUIRE", k, o, bad, b"1000"]),
        (
            "PERMITS",
            vec![b"SEMAPHORE.ACQUIRE", k, o, b"2", b"1000", b"PERMITS", bad],
        ),
    ];
    for (what, args) in cases {
        assert_ascii_error(&c.call(&args), bad, what);
    }
    // An owner over the length limit: the error says so in ASCII.
    let long: Vec<u8> = (0..=255u8).cycle().take(2000).collect();
    let r = c.call(&[b"RWLOCK.WLOCK", k, &long, b"1000"]);
    assert!(r.err().is_ascii() && r.err().contains("2000"), "{r:?}");
    assert_eq!(
        c.call(&[b"EXISTS", k]),
        Resp::Int(0),
        "errors change nothing"
    );
    healthy(&s, "errors");
}

/// Holds of binary owners on binary keys of every kind: two readers of a lock, a leader, two
/// holders of a semaphore of limit 3. Answers the keys with their kinds.
fn populate(c: &mut Sock, ttl: u64) -> Vec<(Kind, Vec<u8>)> {
    let ttl = ttl.to_string();
    let ttl = ttl.as_bytes();
    let mut keys = Vec::new();
    for (_, id) in ids() {
        let other = cat(&[b"\xff\0", &id]);
        let k = Kind::RwLock.key(&id);
        for o in [&id, &other] {
            token(&c.call(&[b"RWLOCK.RLOCK", &k, o, ttl]), "rlock");
        }
        keys.push((Kind::RwLock, k));
        let k = Kind::Leader.key(&id);
        token(&c.call(&[b"LEADER.CAMPAIGN", &k, &id, ttl]), "campaign");
        keys.push((Kind::Leader, k));
        let k = Kind::Semaphore.key(&id);
        let acquire = |c: &mut Sock, o: &[u8], permits: &[u8]| {
            let r = c.call(&[b"SEMAPHORE.ACQUIRE", &k, o, b"3", ttl, b"PERMITS", permits]);
            token(&r, "acquire");
        };
        acquire(c, &id, b"2");
        acquire(c, &other, b"1");
        keys.push((Kind::Semaphore, k));
    }
    keys
}

fn snapshots(c: &mut Sock, keys: &[(Kind, Vec<u8>)]) -> Vec<Snapshot> {
    keys.iter().map(|(k, key)| snapshot(c, *k, key)).collect()
}

fn assert_same(what: &str, keys: &[(Kind, Vec<u8>)], want: &[Snapshot], got: &[Snapshot]) {
    for ((kind, key), (w, g)) in keys.iter().zip(want.iter().zip(got)) {
        assert_eq!(w, g, "{what}: {kind:?} key {}", key.escape_ascii());
        assert!(!w.holders.is_empty(), "{what}: nothing held on {kind:?}");
    }
}

fn high_water(s: &Server) -> i64 {
    lease_info(&mut conn(s))["lease_token_high_water"]
        .parse()
        .unwrap()
}

/// Populates, persists with `persist`, restarts with the same options, and checks every
/// key's state came back exact (tokens too), and the high-water mark did not go back.
fn survives_restart(opts: Options, what: &str, persist: fn(&Server, &mut Sock)) {
    let mut s = Server::with(opts);
    let mut c = Sock::connect(s.port);
    let keys = populate(&mut c, 600_000);
    let before = snapshots(&mut c, &keys);
    let high = high_water(&s);
    persist(&s, &mut c);
    healthy(&s, what);
    s.restart(None);
    let mut c = Sock::connect(s.port);
    let after = snapshots(&mut c, &keys);
    assert_same(what, &keys, &before, &after);
    assert!(
        high_water(&s) >= high,
        "{what}: the high-water mark went back"
    );
    // The reloaded holders hold: a release of each answers 1.
    for (kind, key) in &keys {
        let owner = snapshot(&mut c, *kind, key).holders[0].owner.clone();
        let r = call(&mut c, &kind.release(key, &owner));
        assert_eq!(r, Resp::Int(1), "{what}: release on {}", key.escape_ascii());
    }
    healthy(&s, what);
}

#[test]
fn binary_state_survives_rdb_save_and_restart() {
    survives_restart(verbose(), "RDB", |_, c| {
        assert_eq!(c.cmd(&["SAVE"]), Resp::Simple("OK".into()));
    });
}

fn rewrite_aof(s: &Server, c: &mut Sock) {
    let r = c.cmd(&["BGREWRITEAOF"]);
    assert!(matches!(r, Resp::Simple(_)), "BGREWRITEAOF: {r:?}");
    wait_persistence_idle(&mut conn(s));
    let status = info_field(&mut conn(s), "persistence", "aof_last_bgrewrite_status");
    assert_eq!(
        status.as_deref(),
        Some("ok"),
        "the rewrite failed:\n{}",
        s.log()
    );
}

#[test]
fn binary_state_survives_aof_rewrite_with_rdb_preamble_and_restart() {
    let opts = verbose()
        .arg("appendonly", "yes")
        .arg("aof-use-rdb-preamble", "yes");
    survives_restart(opts, "AOF rewrite with preamble", rewrite_aof);
}

#[test]
fn binary_state_survives_aof_rewrite_without_rdb_preamble_and_restart() {
    let opts = verbose()
        .arg("appendonly", "yes")
        .arg("aof-use-rdb-preamble", "no");
    survives_restart(opts, "AOF rewrite without preamble", |s, c| {
        rewrite_aof(s, c);
        // The base file is commands (no preamble): one LEASE.APPLY per key.
        let base = aof_files(s)
            .into_iter()
            .find(|(n, _)| n.contains(".base."))
            .expect("a base file");
        assert!(!base.1.starts_with(b"REDIS"), "the base has a preamble");
        assert!(
            contains(&base.1, "LEASE.APPLY"),
            "no LEASE.APPLY in the base"
        );
    });
}

#[test]
fn binary_state_survives_dump_and_restore() {
    let s = Server::with(verbose());
    let mut c = Sock::connect(s.port);
    let keys = populate(&mut c, 600_000);
    let before = snapshots(&mut c, &keys);
    let copies: Vec<(Kind, Vec<u8>)> = keys
        .iter()
        .map(|(k, key)| (*k, cat(&[key, b"\0copy"])))
        .collect();
    for ((_, key), (_, copy)) in keys.iter().zip(&copies) {
        let payload = c.call(&[b"DUMP", key]);
        let r = c.call(&[b"RESTORE", copy, b"0", payload.bytes()]);
        assert_eq!(
            r,
            Resp::Simple("OK".into()),
            "RESTORE {}",
            copy.escape_ascii()
        );
    }
    assert_same("RESTORE", &copies, &before, &snapshots(&mut c, &copies));
    healthy(&s, "DUMP/RESTORE");
}

#[test]
fn a_replica_holds_the_same_binary_state_as_its_master() {
    let master = Server::with(verbose());
    let mut m = Sock::connect(master.port);
    // Some keys reach the replica in the full sync (RDB), the rest as replicated effects.
    let mut keys = populate(&mut m, 600_000);
    let replica = Server::with(verbose());
    replicate_from(&replica, &master);
    sync(&master, &replica);
    let mut r = Sock::connect(replica.port);
    let want = snapshots(&mut m, &keys);
    assert_same("full sync", &keys, &want, &snapshots(&mut r, &keys));

    // Effects on binary names while linked: grants, a hand-off and a lapse.
    for kind in KINDS {
        for (name, id) in ids() {
            let key = cat(&[&kind.key(&id), b"\0live"]);
            let waiter = cat(&[b"w\0", &id]);
            let t = token(&call(&mut m, &kind.acquire(&key, &id, 60_000, None)), name);
            let mut w = Sock::connect(master.port);
            send(&mut w, &kind.acquire(&key, &waiter, 600_000, Some(20_000)));
            let queued = eventually(Duration::from_secs(5), || waiting(&master) == 1);
            assert!(queued, "{kind:?} {name}: the waiter never queued");
            assert_eq!(call(&mut m, &kind.release(&key, &id)), Resp::Int(1));
            assert!(token(&w.reply(name), name) > t);
            keys.push((kind, key));
            let short = cat(&[&kind.key(&id), b"\0short"]);
            token(&call(&mut m, &kind.acquire(&short, &id, 100, None)), name);
        }
    }
    let lapsed = eventually(Duration::from_secs(5), || {
        info_int(&mut conn(&master), "lease", "lease_lapses") == (KINDS.len() * ids().len()) as i64
    });
    assert!(lapsed, "the short leases never lapsed on the master");
    sync(&master, &replica);
    let want = snapshots(&mut m, &keys);
    assert_same("replicated", &keys, &want, &snapshots(&mut r, &keys));
    // The lapsed keys are gone on both.
    let size = |c: &mut Sock| c.cmd(&["DBSIZE"]).int();
    assert_eq!(size(&mut m), keys.len() as i64, "master keys");
    assert_eq!(size(&mut r), keys.len() as i64, "replica keys");
    healthy(&master, "master");
    healthy(&replica, "replica");
}

/// UUID owners handed a key by the module itself (so the replicated grant names an owner that
/// is not the request's argument), then lapsing: the replica, the read commands and the log
/// line name them exactly, in canonical text and in capitals.
#[test]
fn uuid_waiters_handed_on_come_back_exact_on_master_and_replica() {
    let master = Server::with(verbose());
    let replica = Server::with(verbose());
    replicate_from(&replica, &master);
    sync(&master, &replica);
    let mut m = Sock::connect(master.port);
    let mut r = Sock::connect(replica.port);
    let holder = UUID.as_bytes().to_vec();
    let waiters = [
        b"9b2d7c4e-5f60-4a1b-8c3d-e2f1a0b9c8d7".to_vec(),
        b"9B2D7C4E-5F60-4A1B-8C3D-E2F1A0B9C8D7".to_vec(),
    ];
    for kind in KINDS {
        for waiter in &waiters {
            let key = cat(&[&kind.key(waiter), b"\0handed"]);
            let what = format!("{kind:?} {}", waiter.escape_ascii());
            let t = token(
                &call(&mut m, &kind.acquire(&key, &holder, 60_000, None)),
                &what,
            );
            let mut w = Sock::connect(master.port);
            send(&mut w, &kind.acquire(&key, waiter, 500, Some(20_000)));
            let queued = eventually(Duration::from_secs(5), || waiting(&master) == 1);
            assert!(queued, "{what}: the waiter never queued");
            assert_eq!(call(&mut m, &kind.release(&key, &holder)), Resp::Int(1));
            assert!(
                token(&w.reply(&what), &what) > t,
                "{what}: the hand-off token"
            );
            sync(&master, &replica);
            let on_master = snapshot(&mut m, kind, &key);
            let owners: Vec<&[u8]> = on_master.holders.iter().map(|h| &h.owner[..]).collect();
            assert_eq!(owners, vec![&waiter[..]], "{what}: the master's holder");
            assert_eq!(
                snapshot(&mut r, kind, &key),
                on_master,
                "{what}: the replica"
            );
            let gone = eventually(Duration::from_secs(5), || {
                !exists(&mut m, &key) && !exists(&mut r, &key)
            });
            assert!(gone, "{what}: the lapsed key is still there");
            let line = format!(
                "lease: lapse key='{}' owner='{}' held_ms=",
                escaped(&key),
                escaped(waiter)
            );
            let logged = eventually(Duration::from_secs(2), || master.log().contains(&line));
            assert!(
                logged,
                "{what}: no log line {line:?}; log:\n{}",
                master.log()
            );
        }
    }
    healthy(&master, "master");
    healthy(&replica, "replica");
}

//! The hold-back model test (issue 20): random operations on a few names — all three kinds,
//! with and without WAIT, give-backs, RESTORE/RENAME/COPY/MOVE/SWAPDB/DEL/FLUSHALL, waiters
//! that disconnect, waits that run out — across quarantines that start (a stall: DEBUG SLEEP
//! past the bound), end by themselves and are ended by `CONFIG SET lease.quarantine 0`, checked
//! over the wire against the rules: every parked request is answered exactly once and by its
//! deadline; a token is only ever granted to a request of the kind its key has, whose owner then
//! holds it with that token; never two writers, never more permits than the limit, one leader;
//! tokens are never repeated and always above every token seen before the request was sent.
//! Raw sockets, so no client retry can hide a lost or duplicated reply. Seeded: a failure
//! names its seed (REDIS_LEASE_MODEL_SEED replays one).

use std::time::{Duration, Instant};

use redis_lease_testkit::prelude::*;

const NAMES: [&str; 3] = ["n0", "n1", "n2"];
/// Long enough that a grant is still held when its reply is checked, within the quarantine
/// (a ttl above it is an error).
const TTL: u64 = 900;
/// How much later than its WAIT a parked request may be answered on a loaded machine.
const SLACK: Duration = Duration::from_millis(2500);

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Rw,
    Leader,
    Sem,
}

impl Kind {
    fn type_name(self) -> &'static str {
        match self {
            Kind::Rw => "lease-rwl",
            Kind::Leader => "lease-ldr",
            Kind::Sem => "lease-sem",
        }
    }
}

/// A request whose reply is still to come.
struct Pending {
    sock: Sock,
    what: String,
    kind: Kind,
    name: &'static str,
    db: i64,
    owner: String,
    answer_by: Instant,
    /// The highest token seen before it was sent.
    floor: i64,
}

struct Model {
    rng: Rng,
    seed: u64,
    port: u16,
    c: Connection,
    pending: Vec<Pending>,
    /// (name, db, kind, owner) believed to hold (granted, not given back by us).
    held: Vec<(&'static str, i64, Kind, String)>,
    tokens: std::collections::HashSet<i64>,
    max_token: i64,
    next_owner: u64,
    /// Keys were moved around since a grant was sent: its reply can only be checked loosely.
    churn: u64,
    log: Vec<String>,
}

impl Model {
    fn fail(&self, why: &str) -> ! {
        let tail: Vec<&String> = self.log.iter().rev().take(25).collect();
        panic!(
            "seed {}: {why}\nlast operations (newest first):\n{tail:#?}",
            self.seed
        );
    }

    fn owner(&mut self) -> String {
        self.next_owner += 1;
        format!("o{}", self.next_owner)
    }

    fn cmd(&mut self, args: &[&str]) -> redis::Value {
        self.log.push(args.join(" "));
        let argv: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        exec_args(&mut self.c, &argv).unwrap_or_else(|e| self.fail(&format!("{args:?}: {e}")))
    }

    fn note_token(&mut self, t: i64, floor: i64, what: &str) {
        if t <= floor {
            self.fail(&format!(
                "{what}: token {t} not above {floor}, seen before it was sent"
            ));
        }
        if !self.tokens.insert(t) {
            self.fail(&format!("{what}: token {t} handed out twice"));
        }
        self.max_token = self.max_token.max(t);
    }

    /// A grant's reply agrees with the state: the key has the request's kind and the owner
    /// holds it with that token (unless keys moved or leases may have lapsed meanwhile).
    fn check_grant(&mut self, p: &Pending, t: i64, checkable: bool) {
        if !checkable {
            return;
        }
        let ty = self.type_of(p.name, p.db);
        if ty != p.kind.type_name() {
            self.fail(&format!(
                "{}: granted token {t}, but the key is of type {ty}",
                p.what
            ));
        }
        let holds = self.holds(p.name, p.db, p.kind, &p.owner, t);
        if !holds {
            self.fail(&format!(
                "{}: granted token {t}, but the owner does not hold it",
                p.what
            ));
        }
    }

    fn type_of(&mut self, name: &str, db: i64) -> String {
        if db != 0 {
            self.cmd(&["SELECT", &db.to_string()]);
        }
        let v = self.cmd(&["TYPE", name]);
        if db != 0 {
            self.cmd(&["SELECT", "0"]);
        }
        text(&v)
    }

    fn holds(&mut self, name: &str, db: i64, kind: Kind, owner: &str, t: i64) -> bool {
        if db != 0 {
            self.cmd(&["SELECT", &db.to_string()]);
        }
        let out = match kind {
            Kind::Rw => {
                let v = self.cmd(&["RWLOCK.INFO", name]);
                parse_lock_info(&v)
                    .holders
                    .iter()
                    .any(|h| h.owner == owner && h.token == t)
            }
            Kind::Leader => {
                let v = self.cmd(&["LEADER.CURRENT", name]);
                !is_nil(&v) && format!("{v:?}").contains(owner)
            }
            Kind::Sem => {
                let v = self.cmd(&["SEMAPHORE.INFO", name]);
                format!("{v:?}").contains(owner)
            }
        };
        if db != 0 {
            self.cmd(&["SELECT", "0"]);
        }
        out
    }

    /// The rules on each name's state now.
    fn check_state(&mut self) {
        for name in NAMES {
            match self.type_of(name, 0).as_str() {
                "lease-rwl" => {
                    let v = self.cmd(&["RWLOCK.INFO", name]);
                    let i = parse_lock_info(&v);
                    let writers = i.holders.iter().filter(|h| h.mode == "write").count();
                    let owners: std::collections::HashSet<&String> =
                        i.holders.iter().map(|h| &h.owner).collect();
                    if writers > 1 || (writers == 1 && owners.len() > 1) {
                        self.fail(&format!("{name}: two holders beside a writer: {i:?}"));
                    }
                }
                "lease-sem" => {
                    let v = self.cmd(&["SEMAPHORE.INFO", name]);
                    let s = format!("{v:?}");
                    let (used, limit) = (field(&v, "used"), field(&v, "limit"));
                    if used > limit {
                        self.fail(&format!("{name}: {used} permits used of {limit}: {s}"));
                    }
                }
                _ => {}
            }
        }
    }

    /// Collects the replies that came, and fails on any that is late or doubled.
    fn collect(&mut self, checkable: bool) {
        let now = Instant::now();
        let mut still = Vec::new();
        for mut p in std::mem::take(&mut self.pending) {
            match p.sock.try_reply(Duration::from_millis(1)) {
                Ok(Some(r)) => {
                    self.log.push(format!("{} -> {r:?}", p.what));
                    if let Resp::Int(t) = r {
                        self.note_token(t, p.floor, &p.what);
                        self.check_grant(&p, t, checkable);
                        self.held.push((p.name, p.db, p.kind, p.owner.clone()));
                    }
                    // Exactly one answer.
                    if let Ok(Some(more)) = p.sock.try_reply(Duration::from_millis(1)) {
                        self.fail(&format!("{}: a second answer {more:?}", p.what));
                    }
                }
                Ok(None) if now > p.answer_by => self.fail(&format!(
                    "{}: no answer {:?} after its deadline",
                    p.what,
                    now - p.answer_by + SLACK
                )),
                Ok(None) => still.push(p),
                Err(e) => self.fail(&format!("{}: {e}", p.what)),
            }
        }
        self.pending = still;
    }

    fn acquire(&mut self) {
        let name = NAMES[self.rng.below(3) as usize];
        let kind = [Kind::Rw, Kind::Leader, Kind::Sem][self.rng.below(3) as usize];
        let owner = self.owner();
        let wait = [0u64, 300, 800, 1500][self.rng.below(4) as usize];
        let ttl = TTL.to_string();
        let mut args: Vec<String> = match kind {
            Kind::Rw if self.rng.below(2) == 0 => vec!["RWLOCK.RLOCK".into()],
            Kind::Rw => vec!["RWLOCK.WLOCK".into()],
            Kind::Leader => vec!["LEADER.CAMPAIGN".into()],
            Kind::Sem => vec!["SEMAPHORE.ACQUIRE".into()],
        };
        args.push(name.into());
        args.push(owner.clone());
        if kind == Kind::Sem {
            let limit = 2 + self.rng.below(2);
            args.push(limit.to_string());
            args.push(ttl);
            args.extend(["PERMITS".into(), (1 + self.rng.below(limit)).to_string()]);
        } else {
            args.push(ttl);
        }
        if wait > 0 {
            args.extend(["WAIT".into(), wait.to_string()]);
        }
        let what = args.join(" ");
        self.log.push(format!("send {what}"));
        let mut sock = Sock::connect(self.port);
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        sock.send(&a);
        let answer_by = Instant::now() + Duration::from_millis(wait) + SLACK;
        self.pending.push(Pending {
            sock,
            what,
            kind,
            name,
            db: 0,
            owner,
            answer_by,
            floor: self.max_token,
        });
    }

    fn give_back(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let i = self.rng.below(self.held.len() as u64) as usize;
        let (name, db, kind, owner) = self.held.swap_remove(i);
        if db != 0 {
            return;
        }
        let cmd = match kind {
            Kind::Rw => "RWLOCK.UNLOCK",
            Kind::Leader => "LEADER.RESIGN",
            Kind::Sem => "SEMAPHORE.RELEASE",
        };
        let v = self.cmd(&[cmd, name, &owner]);
        if is_err(&v) && !err(&v).starts_with("WRONGTYPE") {
            self.fail(&format!("{cmd} {name} {owner}: {v:?}"));
        }
    }

    fn keyspace(&mut self) {
        let a = NAMES[self.rng.below(3) as usize];
        let b = NAMES[self.rng.below(3) as usize];
        self.churn += 1;
        match self.rng.below(7) {
            0 => {
                self.cmd(&["DEL", a]);
            }
            1 if a != b => {
                self.cmd(&["RENAME", a, b]);
            }
            2 if a != b => {
                self.cmd(&["COPY", a, b, "REPLACE"]);
            }
            3 => {
                // Through db 1 and back: MOVE, or SWAPDB twice.
                self.cmd(&["MOVE", a, "1"]);
                self.cmd(&["SELECT", "1"]);
                self.cmd(&["MOVE", a, "0"]);
                self.cmd(&["DEL", a]);
                self.cmd(&["SELECT", "0"]);
            }
            4 => {
                self.cmd(&["SWAPDB", "0", "1"]);
                self.cmd(&["SWAPDB", "0", "1"]);
            }
            5 if a != b => {
                let dump = self.cmd(&["DUMP", a]);
                if let redis::Value::BulkString(p) = dump {
                    let argv = vec![
                        b"RESTORE".to_vec(),
                        b.as_bytes().to_vec(),
                        b"0".to_vec(),
                        p,
                        b"REPLACE".to_vec(),
                    ];
                    self.log.push(format!("RESTORE {b} <dump of {a}> REPLACE"));
                    let v = exec_args(&mut self.c, &argv).unwrap();
                    if is_err(&v) {
                        self.fail(&format!("RESTORE {b}: {v:?}"));
                    }
                }
            }
            6 if self.rng.below(4) == 0 => {
                self.cmd(&["FLUSHALL"]);
            }
            _ => {}
        }
        self.held
            .retain(|(n, db, _, _)| *db == 0 && *n != a && *n != b);
    }

    fn step(&mut self) {
        match self.rng.below(100) {
            0..=49 => self.acquire(),
            50..=69 => self.give_back(),
            70..=81 => self.keyspace(),
            82..=86 => {
                // A waiter leaves.
                if !self.pending.is_empty() {
                    let i = self.rng.below(self.pending.len() as u64) as usize;
                    let p = self.pending.swap_remove(i);
                    self.log.push(format!("disconnect {}", p.what));
                }
            }
            87..=89 => {
                // A stall: the server quarantines again as it resumes.
                self.collect(false);
                self.cmd(&["DEBUG", "SLEEP", "1.1"]);
                self.churn += 1;
            }
            90..=91 => {
                self.cmd(&["CONFIG", "SET", "lease.quarantine", "0"]);
                self.cmd(&["CONFIG", "SET", "lease.quarantine", "1000"]);
            }
            _ => std::thread::sleep(Duration::from_millis(20 + self.rng.below(200))),
        }
    }
}

fn field(v: &redis::Value, name: &str) -> i64 {
    let s = format!("{v:?}");
    // SEMAPHORE.INFO is a map: find the integer after the field name.
    let at = s.find(&format!("\"{name}\"")).or_else(|| s.find(name));
    at.and_then(|i| {
        s[i..]
            .split(|c: char| !c.is_ascii_digit())
            .find(|p| !p.is_empty())
            .and_then(|p| p.parse().ok())
    })
    .unwrap_or(0)
}

fn run(seed: u64, steps: usize) {
    let s = Server::with(
        debug_opts()
            .module_arg("quarantine", "1000")
            .arg("hz", "10"),
    );
    let mut m = Model {
        rng: Rng(seed.max(1)),
        seed,
        port: s.port,
        c: conn(&s),
        pending: Vec::new(),
        held: Vec::new(),
        tokens: Default::default(),
        max_token: 0,
        next_owner: 0,
        churn: 0,
        log: Vec::new(),
    };
    for _ in 0..steps {
        let churn = m.churn;
        m.step();
        m.collect(m.churn == churn);
        m.check_state();
    }
    // Every parked request is answered by its deadline.
    let end = Instant::now() + Duration::from_millis(1500) + SLACK;
    while !m.pending.is_empty() && Instant::now() < end + Duration::from_millis(100) {
        m.collect(false);
        std::thread::sleep(Duration::from_millis(20));
    }
    m.collect(false);
    if let Some(p) = m.pending.first() {
        m.fail(&format!("{}: never answered", p.what));
    }
    m.check_state();
}

#[test]
fn random_operations_across_quarantines_keep_the_rules() {
    let seeds: Vec<u64> = match std::env::var("REDIS_LEASE_MODEL_SEED") {
        Ok(s) => vec![s.parse().expect("a seed")],
        Err(_) => vec![1, 2, 3],
    };
    for seed in seeds {
        run(seed, 150);
    }
}

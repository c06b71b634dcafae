//! Every granting rule of docs/COMMANDS.md, on the pure core with a fake clock. The rules of
//! wait deadlines, held grants (quarantine) and semaphores have their own files under rules/.

#[path = "rules/ended.rs"]
mod ended;
mod harness;
#[path = "rules/held.rs"]
mod held;
#[path = "rules/scale.rs"]
mod scale;
#[path = "rules/semaphore.rs"]
mod semaphore;
#[path = "rules/waits.rs"]
mod waits;

use harness::{granted, id, request, World};
use redis_lease_core::{
    Acquire, Changes, DropReason, Effect, Election, Env, Id, Lock, LockError, Mode, Request,
    RwLock, Tokens, Wait, Woken,
};

/// One lock key in a world whose clock starts at 1000 ms. Waiter ids are handed out to every
/// request (1, 2, 3...), whether it waits or not.
struct Fixture {
    lock: RwLock,
    world: World,
    woken: Vec<Woken>,
    timed_out: Vec<u64>,
    effects: Vec<Effect>,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            lock: RwLock::default(),
            world: World::at(1_000),
            woken: vec![],
            timed_out: vec![],
            effects: vec![],
        }
    }

    fn with<T>(&mut self, f: impl FnOnce(&mut RwLock, &mut Env) -> (Changes, T)) -> T {
        let (changes, out) = f(&mut self.lock, &mut self.world.env());
        self.woken.extend(changes.woken);
        self.timed_out.extend(changes.timed_out);
        self.effects.extend(changes.effects);
        out
    }

    fn req(&mut self, owner: &str, mode: Mode, ttl: u64, wait: bool) -> Result<Acquire, LockError> {
        let id = self.world.next_id();
        let req = request(owner.as_bytes(), mode, ttl, wait.then_some(id), 100);
        self.with(|l, env| l.lock(&req, env))
    }

    /// A request that waits until `until` (absolute ms); answers its waiter id and the reply.
    fn req_until(
        &mut self,
        owner: &str,
        mode: Mode,
        ttl: u64,
        until: u64,
    ) -> (u64, Result<Acquire, LockError>) {
        let id = self.world.next_id();
        let req = Request {
            owner: &Id::from(owner),
            mode,
            ttl,
            wait: Some(Wait {
                id,
                until: Some(until),
            }),
            max_waiters: 100,
            max_hold: 0,
        };
        (id, self.with(|l, env| l.lock(&req, env)))
    }

    fn r(&mut self, owner: &str) -> Option<u64> {
        granted(self.req(owner, Mode::Read, 100, false))
    }

    fn w(&mut self, owner: &str) -> Option<u64> {
        granted(self.req(owner, Mode::Write, 100, false))
    }

    fn unlock(&mut self, owner: &str) -> bool {
        self.with(|l, env| l.unlock(owner.as_bytes(), env))
    }

    fn renew(&mut self, owner: &str, ttl: u64) -> Option<u64> {
        self.with(|l, env| l.renew(owner.as_bytes(), ttl, env))
    }

    fn tick(&mut self) {
        self.with(|l, env| (l.tick(env), ()))
    }

    fn cancel(&mut self, id: u64) -> bool {
        self.with(|l, env| l.cancel(id, env))
    }

    fn woken_ids(&mut self) -> Vec<u64> {
        self.woken.drain(..).map(|w| w.waiter).collect()
    }

    fn timed_out_ids(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.timed_out)
    }

    fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// The waiter ids in the order they will be served.
    fn queue(&self) -> Vec<u64> {
        self.lock.0.waiters().map(|w| w.id).collect()
    }

    fn token_of(&self, owner: &str) -> Option<u64> {
        self.lock
            .0
            .hold_of(owner.as_bytes(), self.world.now)
            .map(|h| h.token)
    }
}

#[test]
fn readers_share_and_a_writer_excludes() {
    let mut f = Fixture::new();
    let a = f.r("a").unwrap();
    let b = f.r("b").unwrap();
    assert!(b > a);
    assert_eq!(f.w("c"), None);
    assert!(f.unlock("a"));
    assert!(f.unlock("b"));
    assert!(f.lock.0.is_empty());
    let c = f.w("c").unwrap();
    assert!(c > b);
    assert_eq!(f.r("d"), None);
    assert_eq!(f.w("d"), None);
    assert_eq!(f.lock.0.mode(f.world.now), Some(Mode::Write));
}

#[test]
fn reentrant_grants_keep_the_token_and_each_needs_an_unlock() {
    let mut f = Fixture::new();
    let t = f.w("a").unwrap();
    assert_eq!(f.w("a"), Some(t));
    assert!(f.unlock("a"));
    assert_eq!(f.r("b"), None);
    assert!(f.unlock("a"));
    assert!(!f.unlock("a"));
    assert!(f.lock.0.is_empty());
    let r = f.r("b").unwrap();
    assert_eq!(f.r("b"), Some(r));
    assert!(f.unlock("b") && f.unlock("b") && !f.unlock("b"));
}

#[test]
fn downgrade_releases_the_write_hold_first() {
    let mut f = Fixture::new();
    let t = f.w("a").unwrap();
    assert_eq!(f.r("a"), Some(t));
    assert_eq!(f.r("b"), None);
    assert!(f.unlock("a"));
    // a is now a reader: b may read, c may not write.
    assert_eq!(f.lock.0.mode(f.world.now), Some(Mode::Read));
    assert!(f.r("b").is_some());
    assert_eq!(f.w("c"), None);
}

#[test]
fn a_sole_reader_upgrades_at_once_with_a_new_token() {
    let mut f = Fixture::new();
    let r = f.r("a").unwrap();
    let w = f.w("a").unwrap();
    assert!(w > r);
    assert_eq!(f.lock.0.mode(f.world.now), Some(Mode::Write));
    // Unlock gives back the write hold, then the read hold.
    assert!(f.unlock("a"));
    assert_eq!(f.lock.0.mode(f.world.now), Some(Mode::Read));
    assert!(f.unlock("a"));
    assert!(f.lock.0.is_empty());
}

#[test]
fn upgrade_with_other_readers_waits_and_a_second_upgrader_gets_deadlock() {
    let mut f = Fixture::new();
    f.r("a").unwrap();
    f.r("b").unwrap();
    assert_eq!(f.w("a"), None);
    assert_eq!(f.req("a", Mode::Write, 100, true), Ok(Acquire::Queued));
    assert_eq!(
        f.req("b", Mode::Write, 100, true),
        Err(LockError::UpgradeDeadlock)
    );
    // The refused upgrade changed nothing: b still reads.
    assert!(f.lock.0.hold_of(b"b", f.world.now).is_some());
    assert!(f.unlock("b"));
    assert_eq!(f.woken_ids(), vec![4]);
    assert_eq!(f.lock.0.mode(f.world.now), Some(Mode::Write));
}

#[test]
fn waiters_are_served_in_arrival_order_and_new_requests_do_not_overtake() {
    let mut f = Fixture::new();
    f.w("h").unwrap();
    assert_eq!(f.req("w1", Mode::Write, 100, true), Ok(Acquire::Queued)); // id 2
    assert_eq!(f.req("w2", Mode::Write, 100, true), Ok(Acquire::Queued)); // id 3
    f.unlock("h");
    assert_eq!(f.woken_ids(), vec![2]);
    // While w2 waits, a new reader is refused even after w1 leaves.
    f.unlock("w1");
    assert_eq!(f.woken_ids(), vec![3]);
    assert_eq!(f.r("x"), None);
}

#[test]
fn a_waiting_writer_is_not_starved_by_new_readers() {
    let mut f = Fixture::new();
    f.r("r1").unwrap();
    assert_eq!(f.req("w", Mode::Write, 100, true), Ok(Acquire::Queued)); // id 2
                                                                         // New readers queue behind the writer instead of joining r1.
    assert_eq!(f.r("r2"), None);
    assert_eq!(f.req("r3", Mode::Read, 100, true), Ok(Acquire::Queued)); // id 4
                                                                         // A current reader's reentrant request is still granted.
    assert!(f.r("r1").is_some());
    f.unlock("r1");
    assert!(f.woken_ids().is_empty());
    f.unlock("r1");
    assert_eq!(f.woken_ids(), vec![2]);
    f.unlock("w");
    assert_eq!(f.woken_ids(), vec![4]);
}

#[test]
fn a_run_of_readers_at_the_head_is_granted_together() {
    let mut f = Fixture::new();
    f.w("h").unwrap();
    for o in ["r1", "r2", "r3"] {
        assert_eq!(f.req(o, Mode::Read, 100, true), Ok(Acquire::Queued));
    }
    assert_eq!(f.req("w", Mode::Write, 100, true), Ok(Acquire::Queued));
    assert_eq!(f.req("r4", Mode::Read, 100, true), Ok(Acquire::Queued));
    f.unlock("h");
    assert_eq!(f.woken_ids(), vec![2, 3, 4]);
    assert_eq!(f.lock.0.live_holders(f.world.now).count(), 3);
    assert_eq!(f.lock.0.waiter_count(), 2);
}

#[test]
fn each_holder_has_its_own_lease() {
    let mut f = Fixture::new();
    assert!(granted(f.req("a", Mode::Read, 100, false)).is_some());
    assert!(granted(f.req("b", Mode::Read, 300, false)).is_some());
    f.world.now += 50;
    // Renewing b does not prolong a.
    assert!(f.renew("b", 1_000).is_some());
    f.world.now += 60;
    assert!(f.lock.0.hold_of(b"a", f.world.now).is_none());
    assert!(f.lock.0.hold_of(b"b", f.world.now).is_some());
    // a's lapse does not take b with it.
    f.tick();
    assert_eq!(f.lock.0.holder_count(), 1);
    assert!(!f.unlock("a"));
    assert!(f.renew("a", 100).is_none());
    f.world.now += 1_000;
    f.tick();
    assert!(f.lock.0.is_empty());
}

#[test]
fn a_lapse_hands_off_to_the_next_waiter_and_reports_the_drop() {
    let mut f = Fixture::new();
    f.w("h").unwrap();
    assert_eq!(f.req("w", Mode::Write, 100, true), Ok(Acquire::Queued));
    f.world.now += 99;
    f.tick();
    assert!(f.woken_ids().is_empty());
    f.world.now += 1;
    let changes = f.lock.tick(&mut f.world.env());
    assert!(matches!(
        &changes.effects[0],
        Effect::Drop { owner, reason: DropReason::Lapse } if *owner == b"h"
    ));
    assert!(
        matches!(&changes.effects[1], Effect::Grant { owner, deadline, .. } if *owner == b"w" && *deadline == f.world.now + 100)
    );
    assert_eq!(changes.woken.len(), 1);
}

#[test]
fn waiters_that_left_are_skipped() {
    let mut f = Fixture::new();
    f.w("h").unwrap();
    f.req("a", Mode::Write, 100, true).unwrap(); // 2
    f.req("b", Mode::Write, 100, true).unwrap(); // 3
    f.world.leave(2);
    f.unlock("h");
    assert_eq!(f.woken_ids(), vec![3]);
    // A cancelled head lets the readers behind it in.
    let mut f = Fixture::new();
    f.r("h").unwrap();
    f.req("w", Mode::Write, 100, true).unwrap(); // 2
    f.req("r", Mode::Read, 100, true).unwrap(); // 3
    assert!(f.cancel(2));
    assert_eq!(f.woken_ids(), vec![3]);
    // A gone head does not block new requests.
    let mut f = Fixture::new();
    f.r("h").unwrap();
    f.req("w", Mode::Write, 100, true).unwrap(); // 2
    f.world.leave(2);
    assert!(f.r("x").is_some());
}

#[test]
fn renew_sets_the_deadline_exactly_and_keeps_the_token() {
    let mut f = Fixture::new();
    let t = f.w("a").unwrap();
    assert_eq!(f.renew("a", 10), Some(t));
    assert_eq!(
        f.lock.0.hold_of(b"a", f.world.now).unwrap().deadline,
        f.world.now + 10
    );
    assert_eq!(f.renew("b", 10), None);
    // A reentrant grant never shortens the lease.
    assert_eq!(granted(f.req("a", Mode::Write, 5, false)), Some(t));
    assert_eq!(
        f.lock.0.hold_of(b"a", f.world.now).unwrap().deadline,
        f.world.now + 10
    );
}

#[test]
fn the_queue_has_a_limit() {
    let mut f = Fixture::new();
    f.w("h").unwrap();
    let id = 99;
    let req = |o: &'static str, wait| Request {
        owner: harness::id(o),
        mode: Mode::Write,
        ttl: 10,
        wait,
        max_waiters: 1,
        max_hold: 0,
    };
    assert_eq!(
        f.with(|l, env| l.lock(&req("a", Some(Wait::forever(id))), env)),
        Ok(Acquire::Queued)
    );
    assert_eq!(
        f.with(|l, env| l.lock(&req("b", Some(Wait::forever(id + 1))), env)),
        Err(LockError::TooManyWaiters(1))
    );
}

#[test]
fn replaying_the_effects_rebuilds_the_same_state() {
    let mut f = Fixture::new();
    let mut log = vec![];
    let mut record = |c: Changes| log.extend(c.effects);
    let mut world = World::at(1_000);
    let mut env = world.env();
    let rq = |o: &'static str, mode| Request {
        owner: id(o),
        mode,
        ttl: 50,
        wait: Some(Wait::forever(o.len() as u64)),
        max_waiters: 10,
        max_hold: 0,
    };
    record(f.lock.lock(&rq("a", Mode::Read), &mut env).0);
    record(f.lock.lock(&rq("bb", Mode::Read), &mut env).0);
    record(f.lock.lock(&rq("ccc", Mode::Write), &mut env).0);
    env.now = 1_040;
    record(f.lock.renew(b"bb", 100, &mut env).0);
    record(f.lock.unlock(b"a", &mut env).0);
    env.now = 1_200;
    record(f.lock.tick(&mut env));
    let mut replica = Lock::new();
    let mut rt = Tokens::new();
    for e in &log {
        replica.apply(e, &mut rt);
    }
    let view = |l: &Lock| {
        let mut v: Vec<_> = l.holders().map(|h| (h.owner.to_vec(), h.hold)).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    assert_eq!(view(&replica), view(&f.lock.0));
    assert_eq!(replica.last_token(), f.lock.0.last_token());
    assert_eq!(rt.high_water(), world.tokens.high_water());
    assert!(!view(&replica).is_empty());
}

#[test]
fn tokens_keep_increasing_after_the_key_empties() {
    let mut f = Fixture::new();
    let a = f.w("a").unwrap();
    f.unlock("a");
    assert!(f.lock.0.is_empty());
    // The key is deleted and created again: the server-wide token source goes on.
    f.lock = RwLock::default();
    let b = f.w("b").unwrap();
    assert!(b > a);
    f.world.now += 1_000;
    f.tick();
    f.lock = RwLock::default();
    assert!(f.w("c").unwrap() > b);
}

#[test]
fn an_election_has_one_leader_whose_term_grows_on_every_change() {
    let mut world = World::at(1_000);
    let mut env = world.env();
    let mut e = Election::default();
    let (_, r) = e.campaign(b"a", 100, None, 10, &mut env);
    let Ok(Acquire::Granted(t1)) = r else {
        panic!()
    };
    // Campaigning again renews and keeps the term.
    env.now = 1_050;
    let (c, r) = e.campaign(b"a", 100, None, 10, &mut env);
    assert_eq!(r, Ok(Acquire::Granted(t1)));
    assert!(matches!(
        c.effects[0],
        Effect::Renew {
            deadline: 1_150,
            ..
        }
    ));
    assert_eq!(e.current(1_100).unwrap().hold.writes, 1);
    assert_eq!(
        e.campaign(b"b", 100, None, 10, &mut env).1,
        Ok(Acquire::Busy)
    );
    assert_eq!(
        e.campaign(b"b", 100, Some(Wait::forever(7)), 10, &mut env)
            .1,
        Ok(Acquire::Queued)
    );
    assert_eq!(e.renew(b"b", 100, &mut env).1, None);
    // Resignation hands over at once.
    let (c, ok) = e.resign(b"a", &mut env);
    assert!(ok);
    assert_eq!(c.woken.len(), 1);
    let t2 = c.woken[0].token;
    assert!(t2 > t1);
    assert_eq!(e.current(env.now).unwrap().owner, b"b");
    assert!(!e.resign(b"a", &mut env).1);
    // A lapse ends leadership.
    env.now += 100;
    assert!(e.current(env.now).is_none());
    let c = e.tick(&mut env);
    assert!(matches!(
        c.effects[0],
        Effect::Drop {
            reason: DropReason::Lapse,
            ..
        }
    ));
    assert!(e.0.is_empty());
    let (_, r) = e.campaign(b"a", 100, None, 10, &mut env);
    let Ok(Acquire::Granted(t3)) = r else {
        panic!()
    };
    assert!(t3 > t2);
}

#[test]
fn the_lock_struct_stays_small() {
    // A one-holder lock is this struct alone: an owner of up to 22 bytes, or a UUID in
    // canonical text, is stored inline. 80 since each hold keeps its cap (MAXHOLD).
    assert!(
        std::mem::size_of::<Lock>() <= 80,
        "{}",
        std::mem::size_of::<Lock>()
    );
}

#[test]
fn a_second_upgrade_request_of_the_same_owner_is_not_lost() {
    let mut f = Fixture::new();
    f.r("a").unwrap();
    f.r("b").unwrap();
    assert_eq!(f.req("a", Mode::Write, 100, true), Ok(Acquire::Queued)); // id 3
    assert_eq!(f.req("a", Mode::Write, 100, true), Ok(Acquire::Queued)); // id 4
    assert_eq!(f.lock.0.waiter_count(), 2);
    f.unlock("b");
    // The upgrade, then the same owner's reentrant write.
    assert_eq!(f.woken_ids(), vec![3, 4]);
}

#[test]
fn deadlines_round_up_when_the_clock_is_past_a_whole_ms() {
    let mut world = World::at(1_000);
    world.round_up = true;
    let mut env = world.env();
    let mut l = RwLock::default();
    let req = Request {
        owner: &Id::from(b"a"),
        mode: Mode::Write,
        ttl: 100,
        wait: None,
        max_waiters: 10,
        max_hold: 0,
    };
    let (c, _) = l.lock(&req, &mut env);
    // Granted at 1000.x ms: the lease must last until at least 1100.x, so its deadline is 1101.
    assert!(matches!(
        c.effects[0],
        Effect::Grant {
            deadline: 1_101,
            ..
        }
    ));
    assert!(l.renew(b"a", 50, &mut env).1.is_some());
    assert_eq!(l.0.hold_of(b"a", 1_000).unwrap().deadline, 1_051);
    env.round_up = false;
    l.renew(b"a", 50, &mut env);
    assert_eq!(l.0.hold_of(b"a", 1_000).unwrap().deadline, 1_050);
}

/// Regression: a waiting upgrade whose read hold ended goes back in arrival order, and may
/// uncover a waiter that left at the head; that waiter was granted (the queue skipped only
/// the head's departed waiters, before the upgrade went back in line).
#[test]
fn a_waiter_that_left_is_not_granted_when_an_upgrade_goes_back_in_line() {
    let mut f = Fixture::new();
    f.req("a", Mode::Read, 10, false).unwrap(); // 1
    f.r("b").unwrap(); // 2
    assert_eq!(f.req("w", Mode::Write, 100, true), Ok(Acquire::Queued)); // 3
    assert_eq!(f.req("r", Mode::Read, 100, true), Ok(Acquire::Queued)); // 4
    assert_eq!(f.req("a", Mode::Write, 100, true), Ok(Acquire::Queued)); // 5, an upgrade
    f.world.leave(4);
    assert!(f.cancel(3));
    // a's read hold lapses: its upgrade is an ordinary write request again, behind r (gone).
    f.world.now += 10;
    f.tick();
    assert!(f.woken_ids().is_empty());
    assert!(f.lock.0.hold_of(b"r", f.world.now).is_none());
    assert_eq!(f.queue(), vec![5]);
}

/// Regression: `requeue` gave the upgrade slot to any write request of a current reader, so a
/// write request queued before its owner became a reader jumped ahead of an earlier writer
/// after the shell took the waiters out and put them back (DEBUG RELOAD).
#[test]
fn waiters_put_back_keep_their_order_when_a_reader_had_queued_a_write() {
    let mut f = Fixture::new();
    f.w("h").unwrap(); // 1
    assert_eq!(f.req("a", Mode::Read, 100, true), Ok(Acquire::Queued)); // 2
    assert_eq!(f.req("x", Mode::Write, 100, true), Ok(Acquire::Queued)); // 3
    assert_eq!(f.req("a", Mode::Write, 100, true), Ok(Acquire::Queued)); // 4
    f.unlock("h");
    assert_eq!(f.woken_ids(), vec![2]);
    assert_eq!(f.queue(), vec![3, 4]);
    for w in f.lock.0.take_waiters() {
        f.lock.0.requeue(w);
    }
    assert_eq!(f.queue(), vec![3, 4]);
    f.tick();
    assert!(f.woken_ids().is_empty(), "a's write overtook x");
    // a gives its read hold back: x, which arrived first, writes.
    f.unlock("a");
    assert_eq!(f.woken_ids(), vec![3]);
}

/// Regression (found by fuzz_ops): the shell never reuses a waiter id, but if it did, the
/// second waiter replaced the first in the queue while the first's wait deadline stayed
/// indexed; at that deadline the timer's step found it, could not take it out, and looped
/// forever. A reused id now replaces the earlier waiter with its indexes.
#[test]
fn a_waiter_id_used_twice_leaves_one_waiter_and_no_stale_wait_deadline() {
    let mut f = Fixture::new();
    f.w("h").unwrap(); // lease ends at 1100
    let wait = |until| Request {
        owner: id(b"w"),
        mode: Mode::Write,
        ttl: 100,
        wait: Some(Wait { id: 7, until }),
        max_waiters: 100,
        max_hold: 0,
    };
    assert_eq!(
        f.with(|l, env| l.lock(&wait(Some(1_050)), env)),
        Ok(Acquire::Queued)
    );
    assert_eq!(
        f.with(|l, env| l.lock(&wait(None), env)),
        Ok(Acquire::Queued)
    );
    assert_eq!(f.lock.0.waiter_count(), 1);
    assert_eq!(f.world.next_wakeup(&f.lock.0), Some(1_100));
    f.world.now = 1_060;
    f.tick();
    assert!(f.timed_out_ids().is_empty());
    f.world.now = 1_100;
    f.tick();
    assert_eq!(f.woken_ids(), vec![7]);
}

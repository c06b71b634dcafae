//! Held grants (`Grants::Held`, the quarantine after a failover or a restart, or a name whose
//! evicted leases may still run): no new holder and no new token; holds that exist keep
//! working; requests with a wait queue in arrival order and are served once grants open.

use super::Fixture;
use redis_lease_core::{
    Acquire, Effect, Election, Grants, Keyed, Lock, LockError, Mode, Permits, Request, RwLock,
    Semaphore, Wait,
};

use crate::harness::{id, World};

fn held() -> Fixture {
    let mut f = Fixture::new();
    f.world.grants = Grants::Held;
    f
}

fn is_renew(e: &Effect) -> bool {
    matches!(e, Effect::Renew { .. })
}

#[test]
fn held_grants_make_no_new_holder_and_no_new_token() {
    let mut f = held();
    assert_eq!(f.req("a", Mode::Read, 100, false), Ok(Acquire::Busy));
    assert_eq!(f.req("b", Mode::Write, 100, false), Ok(Acquire::Busy));
    assert_eq!(f.req("c", Mode::Read, 100, true), Ok(Acquire::Queued));
    assert!(f.take_effects().is_empty());
    assert_eq!(f.world.tokens.high_water(), 0);
    assert_eq!(f.lock.0.holder_count(), 0);
    f.tick();
    assert!(f.woken_ids().is_empty());
    assert_eq!(f.world.tokens.high_water(), 0);
    // Grants open: the waiter is served at the next tick.
    f.world.grants = Grants::Open;
    f.tick();
    assert_eq!(f.woken_ids(), vec![3]);
}

#[test]
fn held_grants_keep_existing_holds_working() {
    let mut f = Fixture::new();
    let t = f.w("a").unwrap();
    let high = f.world.tokens.high_water();
    f.world.grants = Grants::Held;
    // Reentrant write, downgrade to a read hold: the same token, no new one.
    assert_eq!(f.w("a"), Some(t));
    assert_eq!(f.r("a"), Some(t));
    assert_eq!(f.renew("a", 500), Some(t));
    assert_eq!(
        f.lock.0.hold_of(b"a", f.world.now).unwrap().deadline,
        f.world.now + 500
    );
    assert!(f.unlock("a") && f.unlock("a"));
    assert_eq!(f.lock.0.mode(f.world.now), Some(Mode::Read));
    assert!(f.unlock("a") && !f.unlock("a"));
    assert!(f.lock.0.is_empty());
    assert_eq!(f.world.tokens.high_water(), high);
}

#[test]
fn held_grants_make_no_upgrade() {
    let mut f = Fixture::new();
    let r = f.r("a").unwrap();
    f.world.grants = Grants::Held;
    // A sole reader's upgrade needs a new token: not now.
    assert_eq!(f.req("a", Mode::Write, 100, false), Ok(Acquire::Busy));
    assert_eq!(f.req("a", Mode::Write, 100, true), Ok(Acquire::Queued)); // 3
    assert_eq!(f.req("x", Mode::Write, 100, true), Ok(Acquire::Queued)); // 4
    assert_eq!(f.queue(), vec![3, 4]);
    assert!(f.lock.0.waiters().next().is_some_and(|w| w.owner == *b"a"));
    f.tick();
    assert!(f.woken_ids().is_empty());
    assert_eq!(f.lock.0.hold_of(b"a", f.world.now).unwrap().writes, 0);
    f.world.grants = Grants::Open;
    f.tick();
    assert_eq!(f.woken_ids(), vec![3]);
    let w = f.token_of("a").unwrap();
    assert!(w > r);
}

#[test]
fn a_second_upgrade_while_grants_are_held_still_gets_deadlock() {
    let mut f = Fixture::new();
    f.r("a").unwrap();
    f.r("b").unwrap();
    f.world.grants = Grants::Held;
    assert_eq!(f.req("a", Mode::Write, 100, true), Ok(Acquire::Queued));
    assert_eq!(
        f.req("b", Mode::Write, 100, true),
        Err(LockError::UpgradeDeadlock)
    );
    assert_eq!(f.req("b", Mode::Write, 100, false), Ok(Acquire::Busy));
}

#[test]
fn a_leader_campaigns_again_and_resigns_while_grants_are_held() {
    let mut world = World::at(1_000);
    let mut e = Election::default();
    let (_, r) = e.campaign(b"a", 100, None, 10, &mut world.env());
    let Ok(Acquire::Granted(term)) = r else {
        panic!("{r:?}")
    };
    world.grants = Grants::Held;
    world.now = 1_050;
    let (c, r) = e.campaign(b"a", 100, None, 10, &mut world.env());
    assert_eq!(r, Ok(Acquire::Granted(term)));
    assert!(c.effects.iter().all(is_renew) && c.effects.len() == 1);
    assert_eq!(e.renew(b"a", 200, &mut world.env()).1, Some(term));
    assert_eq!(
        e.campaign(b"b", 100, None, 10, &mut world.env()).1,
        Ok(Acquire::Busy)
    );
    let wait = Some(Wait::forever(1));
    assert_eq!(
        e.campaign(b"b", 100, wait, 10, &mut world.env()).1,
        Ok(Acquire::Queued)
    );
    // The leader resigns: nobody is elected while grants are held.
    let (c, done) = e.resign(b"a", &mut world.env());
    assert!(done && c.woken.is_empty());
    assert!(e.current(world.now).is_none());
    world.grants = Grants::Open;
    let c = e.tick(&mut world.env());
    assert_eq!(c.woken.len(), 1);
    assert!(c.woken[0].token > term);
    assert_eq!(e.current(world.now).unwrap().owner, b"b");
}

#[test]
fn a_semaphore_holder_retries_with_the_same_permits_while_grants_are_held() {
    let mut world = World::at(1_000);
    let mut s = Semaphore::default();
    let p = |owner: &'static [u8], permits, ttl, wait| Permits {
        owner: id(owner),
        limit: 3,
        permits,
        ttl,
        wait,
        max_waiters: 10,
        max_hold: 0,
    };
    let (_, r) = s.acquire(&p(b"a", 2, 100, None), &mut world.env());
    let Ok(Acquire::Granted(t)) = r else {
        panic!("{r:?}")
    };
    world.grants = Grants::Held;
    let (c, r) = s.acquire(&p(b"a", 2, 300, None), &mut world.env());
    assert_eq!(r, Ok(Acquire::Granted(t)));
    assert!(c.effects.len() == 1 && is_renew(&c.effects[0]));
    assert_eq!(
        s.acquire(&p(b"a", 1, 300, None), &mut world.env()).1,
        Err(LockError::PermitsMismatch { permits: 2 })
    );
    // One permit is free, but no new holder is made.
    assert_eq!(
        s.acquire(&p(b"b", 1, 100, None), &mut world.env()).1,
        Ok(Acquire::Busy)
    );
    assert_eq!(
        s.acquire(&p(b"b", 1, 100, Some(Wait::forever(1))), &mut world.env())
            .1,
        Ok(Acquire::Queued)
    );
    assert_eq!(s.renew(b"a", 50, &mut world.env()).1, Some(t));
    let (c, done) = s.release(b"a", &mut world.env());
    assert!(done && c.woken.is_empty());
    assert_eq!(s.0.permits_used(), 0);
    world.grants = Grants::Open;
    let c = s.tick(&mut world.env());
    assert_eq!(c.woken.len(), 1);
    assert!(c.woken[0].token > t);
}

#[test]
fn waiters_queued_while_grants_are_held_are_served_in_arrival_order_when_a_tick_runs_open() {
    let mut f = held();
    assert_eq!(f.req("r1", Mode::Read, 100, true), Ok(Acquire::Queued)); // 1
    assert_eq!(f.req("w", Mode::Write, 100, true), Ok(Acquire::Queued)); // 2
    assert_eq!(f.req("r2", Mode::Read, 100, true), Ok(Acquire::Queued)); // 3
    f.world.now += 50;
    f.tick();
    assert!(f.woken_ids().is_empty());
    f.world.grants = Grants::Open;
    // Grants are open: the first request after that serves the queue first (r1), and does
    // not overtake the writer still waiting.
    assert_eq!(f.req("x", Mode::Read, 100, false), Ok(Acquire::Busy));
    assert_eq!(f.woken_ids(), vec![1]);
    assert_eq!(f.queue(), vec![2, 3]);
    f.unlock("r1");
    assert_eq!(f.woken_ids(), vec![2]);
    f.unlock("w");
    assert_eq!(f.woken_ids(), vec![3]);
}

#[test]
fn a_lapse_while_grants_are_held_hands_nothing_on_until_grants_open() {
    let mut f = Fixture::new();
    f.w("h").unwrap();
    assert_eq!(f.req("w", Mode::Write, 100, true), Ok(Acquire::Queued)); // 2
    f.world.grants = Grants::Held;
    f.world.now += 100;
    f.tick();
    assert!(f.woken_ids().is_empty());
    assert_eq!(f.lock.0.holder_count(), 0);
    assert_eq!(f.queue(), vec![2]);
    f.world.now += 1_000;
    f.world.grants = Grants::Open;
    f.tick();
    assert_eq!(f.woken_ids(), vec![2]);
    // The lease counts from the grant, not from the lapse it waited for.
    assert_eq!(
        f.lock.0.hold_of(b"w", f.world.now).unwrap().deadline,
        f.world.now + 100
    );
}

#[test]
fn waits_end_while_grants_are_held() {
    let mut f = held();
    let (a, _) = f.req_until("a", Mode::Read, 100, 1_050);
    let (b, _) = f.req_until("b", Mode::Read, 100, 1_100);
    f.world.now = 1_060;
    f.tick();
    assert_eq!(f.timed_out_ids(), vec![a]);
    f.world.grants = Grants::Open;
    f.tick();
    assert_eq!(f.woken_ids(), vec![b]);
}

#[test]
fn take_waiters_and_requeue_keep_arrival_order_and_the_upgrade_slot() {
    let mut f = Fixture::new();
    f.r("a").unwrap(); // 1
    f.r("b").unwrap(); // 2
    assert_eq!(f.req("x", Mode::Write, 100, true), Ok(Acquire::Queued)); // 3
    assert_eq!(f.req("y", Mode::Read, 100, true), Ok(Acquire::Queued)); // 4
    assert_eq!(f.req("a", Mode::Write, 100, true), Ok(Acquire::Queued)); // 5: upgrade
    let (z, _) = f.req_until("z", Mode::Read, 100, 5_000); // 6
    assert_eq!(f.queue(), vec![5, 3, 4, z]);
    let taken = f.lock.0.take_waiters();
    assert_eq!(
        taken.iter().map(|w| w.id).collect::<Vec<_>>(),
        vec![5, 3, 4, z]
    );
    assert_eq!(taken[3].until, Some(5_000));
    assert_eq!(f.lock.0.waiter_count(), 0);
    // Put back in another order: arrival order is by id; the upgrade goes first only if it is
    // put back first (as take_waiters gives it).
    let mut back = taken.clone();
    back.reverse();
    let mut other = RwLock::default();
    for o in [&b"a"[..], b"b"] {
        other
            .0
            .restore(o, f.lock.0.hold_of(o, f.world.now).unwrap());
    }
    for w in taken {
        f.lock.0.requeue(w);
    }
    assert_eq!(f.queue(), vec![5, 3, 4, z]);
    // A requeued wait keeps its deadline.
    assert_eq!(f.lock.0.waiters().last().unwrap().until, Some(5_000));
    for w in back {
        other.0.requeue(w);
    }
    assert_eq!(
        other.0.waiters().map(|w| w.id).collect::<Vec<_>>(),
        vec![3, 4, 5, z]
    );
    // The upgrade is served first when b leaves, then x, in arrival order.
    f.unlock("b");
    assert_eq!(f.woken_ids(), vec![5]);
    f.unlock("a");
    f.unlock("a");
    assert_eq!(f.woken_ids(), vec![3]);
}

#[test]
fn waiters_parked_outside_the_key_are_served_in_arrival_order_when_grants_open() {
    // The shell's lobby: grants are held and nothing holds the key, so its waiters leave the
    // keyspace and come back into a new key later.
    let mut world = World::at(1_000);
    world.grants = Grants::Held;
    let mut s = Semaphore::default();
    let p = |owner: &'static [u8], permits, waiter| Permits {
        owner: id(owner),
        limit: 2,
        permits,
        ttl: 100,
        wait: Some(Wait::forever(waiter)),
        max_waiters: 10,
        max_hold: 0,
    };
    for (owner, permits, id) in [(b"a", 1, 1), (b"b", 2, 2), (b"c", 1, 3)] {
        let (_, r) = s.acquire(&p(owner, permits, id), &mut world.env());
        assert_eq!(r, Ok(Acquire::Queued));
    }
    let parked = s.0.take_waiters();
    assert!(s.0.is_empty());
    world.grants = Grants::Open;
    let mut back = Semaphore(Lock::new());
    back.0.restore_limit(2);
    for w in parked {
        back.0.requeue(w);
    }
    let c = back.tick(&mut world.env());
    // a takes one permit; b needs two and waits; c, behind b, does not overtake it.
    assert_eq!(
        c.woken.iter().map(|w| w.waiter).collect::<Vec<_>>(),
        vec![1]
    );
    assert!(matches!(c.effects[0], Effect::Limit { limit: 2 }));
    let c = back.release(b"a", &mut world.env()).0;
    assert_eq!(
        c.woken.iter().map(|w| w.waiter).collect::<Vec<_>>(),
        vec![2]
    );
}

#[test]
fn a_lobby_merges_into_an_arrived_key_by_its_rules() {
    // The shell's lobby (the name's state while grants are held and no key holds it) meets a
    // key that arrives at the name (RESTORE, RENAME, COPY, MOVE): its waiters join the key's
    // queue in arrival order; a semaphore of another limit cannot take them (their waits end);
    // a waiter whose client left is dropped, answered neither way.
    let mut world = World::at(1_000);
    world.grants = Grants::Held;
    let mut lobby = RwLock::default();
    for (owner, mode, waiter) in [
        (b"a", Mode::Write, 1),
        (b"b", Mode::Read, 2),
        (b"c", Mode::Read, 3),
    ] {
        let req = Request {
            owner: id(owner),
            mode,
            ttl: 100,
            wait: Some(Wait::forever(waiter)),
            max_waiters: 10,
            max_hold: 0,
        };
        assert_eq!(
            RwLock::lock(&mut lobby, &req, &mut world.env()).1,
            Ok(Acquire::Queued)
        );
    }
    world.leave(2);
    world.grants = Grants::Open;
    let mut arrived = RwLock::default();
    let req = Request {
        owner: id(b"h"),
        mode: Mode::Write,
        ttl: 500,
        wait: None,
        max_waiters: 10,
        max_hold: 0,
    };
    let t = RwLock::lock(&mut arrived, &req, &mut world.env())
        .1
        .unwrap();
    assert!(matches!(t, Acquire::Granted(_)));
    let c = arrived.merge(std::mem::take(&mut lobby.0), &mut world.env());
    assert!(c.woken.is_empty() && c.timed_out.is_empty(), "{c:?}");
    assert_eq!(arrived.0.waiter_count(), 2);
    let c = arrived.unlock(b"h", &mut world.env()).0;
    assert_eq!(
        c.woken.iter().map(|w| w.waiter).collect::<Vec<_>>(),
        vec![1]
    );
    let c = arrived.unlock(b"a", &mut world.env()).0;
    assert_eq!(
        c.woken.iter().map(|w| w.waiter).collect::<Vec<_>>(),
        vec![3]
    );

    // Semaphores: the same limit joins, another ends the waits.
    let p = |owner: &'static [u8], limit, waiter| Permits {
        owner: id(owner),
        limit,
        permits: 1,
        ttl: 100,
        wait: Some(Wait::forever(waiter)),
        max_waiters: 10,
        max_hold: 0,
    };
    for (limit, joined) in [(1, true), (3, false)] {
        world.grants = Grants::Held;
        let mut lobby = Semaphore::default();
        assert_eq!(
            lobby.acquire(&p(b"w", limit, 10), &mut world.env()).1,
            Ok(Acquire::Queued)
        );
        world.grants = Grants::Open;
        let mut arrived = Semaphore::default();
        let got = arrived.acquire(&p(b"h", 1, 11), &mut world.env()).1;
        assert!(matches!(got, Ok(Acquire::Granted(_))));
        let c = arrived.merge(std::mem::take(&mut lobby.0), &mut world.env());
        assert_eq!(
            arrived.0.waiter_count(),
            usize::from(joined),
            "limit {limit}"
        );
        assert_eq!(
            c.timed_out,
            if joined { vec![] } else { vec![10] },
            "limit {limit}"
        );
    }
}

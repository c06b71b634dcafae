//! The semaphore (docs/COMMANDS.md, SEMAPHORE): at most `limit` permits held at once, strictly
//! in arrival order, one hold per owner, each holder with its own lease and token.

use redis_lease_core::{
    Acquire, Changes, DropReason, Effect, Env, Id, Lock, LockError, Permits, Semaphore, Tokens,
    Wait,
};

use crate::harness::{id, World};

/// One semaphore key in a world whose clock starts at 1000 ms; waiter ids are handed out to
/// every request.
struct Sem {
    s: Semaphore,
    world: World,
    woken: Vec<u64>,
    timed_out: Vec<u64>,
    effects: Vec<Effect>,
}

impl Sem {
    fn new() -> Sem {
        Sem {
            s: Semaphore::default(),
            world: World::at(1_000),
            woken: vec![],
            timed_out: vec![],
            effects: vec![],
        }
    }

    fn with<T>(&mut self, f: impl FnOnce(&mut Semaphore, &mut Env) -> (Changes, T)) -> T {
        let (c, out) = f(&mut self.s, &mut self.world.env());
        self.woken.extend(c.woken.iter().map(|w| w.waiter));
        self.timed_out.extend(c.timed_out);
        self.effects.extend(c.effects);
        out
    }

    /// ACQUIRE; `wait`: None, Some(None) (forever) or Some(Some(until)).
    fn acquire(
        &mut self,
        owner: &str,
        limit: u32,
        permits: u32,
        ttl: u64,
        wait: Option<Option<u64>>,
    ) -> (u64, Result<Acquire, LockError>) {
        let id = self.world.next_id();
        let req = Permits {
            owner: &Id::from(owner),
            limit,
            permits,
            ttl,
            wait: wait.map(|until| Wait { id, until }),
            max_waiters: 100,
            max_hold: 0,
        };
        (id, self.with(|s, env| s.acquire(&req, env)))
    }

    /// ACQUIRE without a wait, limit 3, ttl 100: the token if granted.
    fn take(&mut self, owner: &str, permits: u32) -> Option<u64> {
        match self.acquire(owner, 3, permits, 100, None).1 {
            Ok(Acquire::Granted(t)) => Some(t),
            Ok(_) => None,
            Err(e) => panic!("{e:?}"),
        }
    }

    /// ACQUIRE with limit 3, ttl 100, waiting without a limit: its waiter id.
    fn queue_for(&mut self, owner: &str, permits: u32) -> u64 {
        let (id, r) = self.acquire(owner, 3, permits, 100, Some(None));
        assert_eq!(r, Ok(Acquire::Queued), "{owner}");
        id
    }

    fn release(&mut self, owner: &str) -> bool {
        self.with(|s, env| s.release(owner.as_bytes(), env))
    }

    fn renew(&mut self, owner: &str, ttl: u64) -> Option<u64> {
        self.with(|s, env| s.renew(owner.as_bytes(), ttl, env))
    }

    fn tick(&mut self) {
        self.with(|s, env| (s.tick(env), ()))
    }

    fn woken(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.woken)
    }

    fn effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    fn used(&self) -> u64 {
        self.s.0.permits_used()
    }

    fn deadline(&self, owner: &str) -> u64 {
        self.s
            .0
            .hold_of(owner.as_bytes(), self.world.now)
            .unwrap()
            .deadline
    }
}

#[test]
fn a_semaphore_holds_at_most_limit_permits() {
    let mut s = Sem::new();
    let a = s.take("a", 2).unwrap();
    let b = s.take("b", 1).unwrap();
    assert!(b > a);
    assert_eq!(s.used(), 3);
    assert_eq!(s.take("c", 1), None);
    assert_eq!(s.s.0.limit(), 3);
    assert!(s.release("a"));
    assert_eq!(s.used(), 1);
    assert!(s.take("c", 2).is_some());
    assert_eq!(s.take("d", 1), None);
    assert_eq!(s.used(), 3);
}

#[test]
fn the_first_take_of_an_empty_key_comes_after_its_limit() {
    let mut s = Sem::new();
    let t = s.take("a", 1).unwrap();
    let e = s.effects();
    assert_eq!(e.len(), 2, "{e:?}");
    assert_eq!(e[0], Effect::Limit { limit: 3 });
    assert_eq!(
        e[1],
        Effect::Take {
            owner: b"a".to_vec().into(),
            permits: 1,
            deadline: 1_100,
            token: t,
        }
    );
    // A second holder: no Limit.
    s.take("b", 1).unwrap();
    let e = s.effects();
    assert!(
        e.len() == 1 && matches!(e[0], Effect::Take { permits: 1, .. }),
        "{e:?}"
    );
}

#[test]
fn a_semaphore_serves_strictly_in_arrival_order_so_a_large_request_never_starves() {
    let mut s = Sem::new();
    s.take("a", 1).unwrap();
    s.take("b", 1).unwrap();
    let big = s.queue_for("big", 3);
    // One permit is free, but the head of the queue needs three: nobody overtakes it.
    assert_eq!(s.take("small", 1), None);
    let small = s.queue_for("small", 1);
    assert!(s.release("a"));
    assert!(s.woken().is_empty());
    assert_eq!(s.used(), 1);
    assert!(s.release("b"));
    assert_eq!(s.woken(), vec![big]);
    assert_eq!(s.used(), 3);
    assert!(s.release("big"));
    assert_eq!(s.woken(), vec![small]);
}

#[test]
fn a_run_of_waiters_that_fit_is_served_together() {
    let mut s = Sem::new();
    s.take("h", 3).unwrap();
    let a = s.queue_for("a", 1);
    let b = s.queue_for("b", 2);
    let c = s.queue_for("c", 1);
    assert!(s.release("h"));
    assert_eq!(s.woken(), vec![a, b]);
    assert_eq!(s.s.0.waiters().map(|w| w.id).collect::<Vec<_>>(), vec![c]);
}

#[test]
fn a_semaphore_holder_asking_again_gets_its_token_and_a_lease_at_least_ttl_long() {
    let mut s = Sem::new();
    let t = s.take("a", 2).unwrap();
    s.effects();
    s.world.now = 1_050;
    // A later deadline: extended, with a Renew.
    let (_, r) = s.acquire("a", 3, 2, 100, None);
    assert_eq!(r, Ok(Acquire::Granted(t)));
    assert_eq!(
        s.effects(),
        vec![Effect::Renew {
            owner: b"a".to_vec().into(),
            deadline: 1_150
        }]
    );
    // An earlier deadline: not shortened, and nothing to replicate.
    let (_, r) = s.acquire("a", 3, 2, 10, Some(None));
    assert_eq!(r, Ok(Acquire::Granted(t)));
    assert!(s.effects().is_empty());
    assert_eq!(s.deadline("a"), 1_150);
    assert_eq!(s.used(), 2);
    assert_eq!(s.s.0.holder_count(), 1);
}

#[test]
fn a_semaphore_holder_asking_with_other_permits_is_refused() {
    let mut s = Sem::new();
    let t = s.take("a", 2).unwrap();
    s.effects();
    for wait in [None, Some(None)] {
        let (_, r) = s.acquire("a", 3, 1, 500, wait);
        assert_eq!(r, Err(LockError::PermitsMismatch { permits: 2 }));
    }
    assert!(s.effects().is_empty());
    assert_eq!(s.s.0.waiter_count(), 0);
    let h = s.s.0.hold_of(b"a", s.world.now).unwrap();
    assert_eq!((h.reads, h.token, h.deadline), (2, t, 1_100));
}

#[test]
fn a_request_naming_another_limit_is_refused_and_changes_nothing() {
    let mut s = Sem::new();
    s.take("a", 3).unwrap();
    let q = s.queue_for("q", 1);
    s.effects();
    for wait in [None, Some(None), Some(Some(5_000))] {
        let req = Permits {
            owner: &Id::from(b"b"),
            limit: 4,
            permits: 1,
            ttl: 100,
            wait: wait.map(|until| Wait { id: 99, until }),
            max_waiters: 100,
            max_hold: 0,
        };
        let (c, r) = s.s.acquire(&req, &mut s.world.env());
        assert_eq!(r, Err(LockError::LimitMismatch { limit: 3 }));
        assert!(c.is_empty());
    }
    assert_eq!(s.s.0.limit(), 3);
    assert_eq!(s.s.0.waiters().map(|w| w.id).collect::<Vec<_>>(), vec![q]);
    assert_eq!(s.used(), 3);
}

#[test]
fn an_empty_semaphore_key_takes_the_limit_of_the_request_that_creates_it() {
    let mut s = Sem::new();
    s.take("a", 3).unwrap();
    assert!(s.release("a"));
    assert!(s.s.0.is_empty());
    s.effects();
    let (_, r) = s.acquire("b", 5, 4, 100, None);
    assert!(matches!(r, Ok(Acquire::Granted(_))));
    assert_eq!(s.s.0.limit(), 5);
    assert_eq!(s.effects()[0], Effect::Limit { limit: 5 });
    // A key that only has waiters exists: it keeps its limit.
    let mut s = Sem::new();
    s.world.grants = redis_lease_core::Grants::Held;
    s.queue_for("w", 1);
    let (_, r) = s.acquire("x", 7, 1, 100, None);
    assert_eq!(r, Err(LockError::LimitMismatch { limit: 3 }));
}

#[test]
fn semaphore_tokens_strictly_increase_and_each_holder_has_its_own_lease() {
    let mut s = Sem::new();
    let (_, a) = s.acquire("a", 3, 1, 100, None);
    let (_, b) = s.acquire("b", 3, 1, 300, None);
    let (Ok(Acquire::Granted(a)), Ok(Acquire::Granted(b))) = (a, b) else {
        panic!()
    };
    assert!(b > a);
    s.world.now = 1_050;
    // Renewing b does not prolong a; RENEW sets the lease exactly (here: shorter).
    assert_eq!(s.renew("b", 100), Some(b));
    assert_eq!(s.deadline("b"), 1_150);
    assert_eq!(s.deadline("a"), 1_100);
    assert_eq!(s.renew("nobody", 100), None);
    s.world.now = 1_100;
    s.tick();
    assert!(s.s.0.hold_of(b"a", s.world.now).is_none());
    assert_eq!(s.used(), 1);
    let c = s.take("c", 2).unwrap();
    assert!(c > b);
    // The same owner again after its hold lapsed: a new hold, a new token.
    s.world.now = 2_000;
    let a2 = s.take("a", 1).unwrap();
    assert!(a2 > c);
}

#[test]
fn a_semaphore_lapse_hands_the_permits_on() {
    let mut s = Sem::new();
    s.take("a", 2).unwrap();
    s.take("b", 1).unwrap();
    let w = s.queue_for("w", 2);
    s.effects();
    s.world.now = 1_100;
    s.tick();
    assert_eq!(s.woken(), vec![w]);
    let e = s.effects();
    assert!(
        e.iter()
            .filter(|e| matches!(
                e,
                Effect::Drop {
                    reason: DropReason::Lapse,
                    ..
                }
            ))
            .count()
            == 2,
        "{e:?}"
    );
    // Both lapsed: the key had no holder when w took its permits, so its limit came first.
    assert!(matches!(e[2], Effect::Limit { limit: 3 }), "{e:?}");
    assert!(matches!(
        e[3],
        Effect::Take {
            permits: 2,
            deadline: 1_200,
            ..
        }
    ));
}

#[test]
fn a_semaphore_release_gives_back_all_the_permits() {
    let mut s = Sem::new();
    s.take("a", 3).unwrap();
    let w = s.queue_for("w", 3);
    assert!(s.release("a"));
    assert_eq!(s.woken(), vec![w]);
    assert!(!s.release("a"));
    assert!(s.release("w"));
    assert!(s.s.0.is_empty());
}

#[test]
fn a_timed_out_large_request_at_the_head_lets_smaller_ones_in() {
    let mut s = Sem::new();
    s.take("h", 2).unwrap();
    let (big, r) = s.acquire("big", 3, 3, 100, Some(Some(1_050)));
    assert_eq!(r, Ok(Acquire::Queued));
    let small = s.queue_for("small", 1);
    s.world.now = 1_050;
    s.tick();
    assert_eq!(s.timed_out, vec![big]);
    assert_eq!(s.woken(), vec![small]);
    assert_eq!(s.used(), 3);
}

#[test]
fn a_semaphore_wait_that_ends_at_the_lapse_is_granted() {
    let mut s = Sem::new();
    s.take("h", 3).unwrap();
    let (at, _) = s.acquire("at", 3, 1, 100, Some(Some(1_100)));
    let (before, _) = s.acquire("before", 3, 3, 100, Some(Some(1_099)));
    s.world.now = 1_200;
    s.tick();
    // h's lease ended at 1100: `at`'s wait ended in that same ms (granted), `before`'s 1 ms
    // earlier (timed out), although the tick came later than both.
    assert_eq!(s.woken(), vec![at]);
    assert_eq!(s.timed_out, vec![before]);
}

/// The same owner queued on two connections: when one request is granted, the other cannot be
/// (one hold per owner). With the same permits it is a retry and gets the holder's token;
/// with other permits its wait ends without a grant.
#[test]
fn a_queued_request_of_an_owner_that_became_a_holder_is_a_retry_or_ends() {
    let mut s = Sem::new();
    s.take("h", 3).unwrap();
    let first = s.queue_for("o", 1);
    let same = s.queue_for("o", 1);
    let other = s.queue_for("o", 2);
    let next = s.queue_for("n", 2);
    assert!(s.release("h"));
    let woken = s.woken();
    assert_eq!(woken, vec![first, same, next]);
    assert_eq!(s.timed_out, vec![other]);
    assert_eq!(s.used(), 3);
    assert_eq!(s.s.0.hold_of(b"o", s.world.now).unwrap().reads, 1);
}

#[test]
fn the_queue_of_a_semaphore_has_a_limit() {
    let mut s = Sem::new();
    s.take("h", 3).unwrap();
    let req = |owner: &'static [u8], waiter| Permits {
        owner: id(owner),
        limit: 3,
        permits: 1,
        ttl: 10,
        wait: Some(Wait::forever(waiter)),
        max_waiters: 1,
        max_hold: 0,
    };
    assert_eq!(
        s.with(|l, env| l.acquire(&req(b"a", 50), env)),
        Ok(Acquire::Queued)
    );
    assert_eq!(
        s.with(|l, env| l.acquire(&req(b"b", 51), env)),
        Err(LockError::TooManyWaiters(1))
    );
}

#[test]
fn replaying_a_semaphores_effects_rebuilds_the_same_state() {
    let mut s = Sem::new();
    s.take("a", 2).unwrap();
    let w = s.queue_for("w", 3);
    s.take("b", 1);
    s.world.now = 1_050;
    s.acquire("a", 3, 2, 500, None).1.unwrap();
    s.world.now = 1_100;
    s.release("a");
    s.tick();
    s.release("w");
    s.take("c", 2).unwrap();
    s.renew("c", 30);
    assert_eq!(s.woken, vec![w]);
    let mut replica = Lock::new();
    let mut tokens = Tokens::new();
    for e in &s.effects {
        replica.apply(e, &mut tokens);
    }
    let view = |l: &Lock| {
        let mut v: Vec<_> = l.holders().map(|h| (h.owner.to_vec(), h.hold)).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    assert_eq!(view(&replica), view(&s.s.0));
    assert!(!view(&replica).is_empty());
    assert_eq!(replica.limit(), 3);
    assert_eq!(replica.permits_used(), s.used());
    assert_eq!(replica.last_token(), s.s.0.last_token());
    assert_eq!(tokens.high_water(), s.world.tokens.high_water());
}

#[test]
fn a_semaphore_whose_holders_all_lapsed_takes_a_new_limit_before_any_tick() {
    let mut f = Sem::new();
    assert!(f.take("a", 2).is_some());
    // Every lease has ended, but no tick has run yet: time passes before the limit is
    // compared, as if the timer had already removed the key.
    f.world.now += 1_000;
    let (_, r) = f.acquire("b", 7, 7, 100, None);
    assert!(matches!(r, Ok(Acquire::Granted(_))), "{r:?}");
    assert_eq!(f.s.0.limit(), 7);
    assert!(f.effects.iter().any(|e| matches!(
        e,
        Effect::Drop {
            reason: DropReason::Lapse,
            ..
        }
    )));
}

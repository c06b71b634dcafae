//! The lock manager's rules on the pure core: several keys at once (`multi`), the wait-for
//! graph (`waitfor`), and hold caps (MAXHOLD); with a property test that drives random
//! multi-key and single-key requests the way the shell does and checks the invariants after
//! every step.

mod harness;

use std::collections::{BTreeMap, HashMap, HashSet};

use harness::{id, World};
use proptest::prelude::*;
use redis_lease_core::multi::{
    grant_ready, mlock, mrenew, munlock, MultiAcquire, MultiRequest, Ready,
};
use redis_lease_core::waitfor::{closes_cycle, Graph};
use redis_lease_core::{
    Acquire, Changes, Effect, Grants, Id, Kind, Lock, LockError, Mode, Request, RwLock, Tokens,
    Wait,
};

/// Every key's grants open (as far as eight keys).
const OPEN: [Grants; 8] = [Grants::Open; 8];

fn mreq(owner: &str, mode: Mode, ttl: u64, wait: Option<Wait>) -> MultiRequest<'static> {
    MultiRequest {
        owner: id(owner),
        mode,
        ttl,
        wait,
        max_waiters: 100,
        max_hold: 0,
    }
}

fn req(owner: &str, mode: Mode, ttl: u64, wait: Option<Wait>, max_hold: u64) -> Request<'static> {
    Request {
        owner: id(owner),
        mode,
        ttl,
        wait,
        max_waiters: 100,
        max_hold,
    }
}

fn refs(keys: &mut [RwLock]) -> Vec<&mut RwLock> {
    keys.iter_mut().collect()
}

#[test]
fn mlock_grants_every_key_or_none() {
    let mut w = World::at(1_000);
    let mut keys = [RwLock::default(), RwLock::default(), RwLock::default()];
    let _ = keys[1].lock(&req("x", Mode::Write, 100, None, 0), &mut w.env());
    let (_, r) = mlock(
        &mut refs(&mut keys),
        &OPEN,
        &mreq("o", Mode::Write, 100, None),
        &mut w.env(),
    );
    assert_eq!(r, Ok(MultiAcquire::Busy));
    assert!(keys.iter().all(|k| k.0.hold_of("o", 1_000).is_none()));
    assert!(keys[0].0.is_empty() && keys[2].0.is_empty());
    keys[1].unlock("x", &mut w.env());
    let (_, r) = mlock(
        &mut refs(&mut keys),
        &OPEN,
        &mreq("o", Mode::Write, 100, None),
        &mut w.env(),
    );
    let Ok(MultiAcquire::Granted(t)) = r else {
        panic!("{r:?}")
    };
    assert_eq!(t.len(), 3);
    for (k, tk) in keys.iter().zip(&t) {
        assert_eq!(k.0.hold_of("o", 1_000).map(|h| h.token), Some(*tk));
    }
    let (_, n) = munlock(&mut refs(&mut keys), &OPEN, id("o"), &mut w.env());
    assert_eq!(n, 3);
    assert!(keys.iter().all(|k| k.0.is_empty()));
}

#[test]
fn a_parked_mlock_keeps_its_place_and_is_granted_when_the_last_key_frees() {
    let mut w = World::at(1_000);
    let mut keys = [RwLock::default(), RwLock::default()];
    let _ = keys[0].lock(&req("x", Mode::Write, 100, None, 0), &mut w.env());
    let wait = Wait::forever(w.next_id());
    let m = mreq("m", Mode::Write, 100, Some(wait));
    let (_, r) = mlock(&mut refs(&mut keys), &OPEN, &m, &mut w.env());
    assert_eq!(r, Ok(MultiAcquire::Queued));
    // Key 1 is free, but nobody overtakes the parked request there.
    let (c, r) = keys[1].lock(&req("y", Mode::Read, 100, None, 0), &mut w.env());
    assert_eq!(r, Ok(Acquire::Busy));
    assert_eq!(c.ready, vec![wait.id], "key 1 reports it ready");
    let (_, ready) = grant_ready(&mut refs(&mut keys), &OPEN, &m, &mut w.env());
    assert_eq!(ready, Ready::NotYet, "key 0 is still held");
    assert!(keys[1].0.hold_of("m", 1_000).is_none(), "no partial hold");
    let (c, _) = keys[0].unlock("x", &mut w.env());
    assert_eq!(c.ready, vec![wait.id]);
    let (_, ready) = grant_ready(&mut refs(&mut keys), &OPEN, &m, &mut w.env());
    let Ready::Granted(t) = ready else {
        panic!("{ready:?}")
    };
    assert_eq!(t.len(), 2);
    assert!(keys
        .iter()
        .all(|k| k.0.hold_of("m", 1_000).is_some() && k.0.waiter_count() == 0));
}

/// A timer that runs late: the free key reports the request ready at its deadline (a timer
/// on time would have seen it free), and the look at every key ends its wait where a key was
/// not free by then, once, on every key; a key that freed by then serves it.
#[test]
fn a_late_look_at_a_parked_mlock_serves_it_or_ends_its_wait_once() {
    for freed in [false, true] {
        let mut w = World::at(1_000);
        let mut keys = [RwLock::default(), RwLock::default()];
        let _ = keys[0].lock(&req("x", Mode::Write, 150, None, 0), &mut w.env());
        let wait = Wait {
            id: w.next_id(),
            until: Some(w.mono() + if freed { 200 } else { 100 }),
        };
        let m = mreq("m", Mode::Write, 100, Some(wait));
        let (_, r) = mlock(&mut refs(&mut keys), &OPEN, &m, &mut w.env());
        assert_eq!(r, Ok(MultiAcquire::Queued));
        // Both deadlines passed by the time anything looks.
        w.now += 300;
        let c = keys[1].tick(&mut w.env());
        assert_eq!(c.ready, vec![wait.id], "the free key reports it ready");
        assert!(c.timed_out.is_empty());
        let (changes, ready) = grant_ready(&mut refs(&mut keys), &OPEN, &m, &mut w.env());
        let ended: usize = changes
            .iter()
            .map(|c| c.timed_out.iter().filter(|t| **t == wait.id).count())
            .sum();
        if freed {
            // x's lease ended at +150, before the wait did (+200).
            assert!(matches!(ready, Ready::Granted(_)), "{ready:?}");
            assert_eq!(ended, 0);
        } else {
            assert_eq!(ready, Ready::NotYet);
            assert_eq!(ended, 1, "{changes:?}");
            assert!(keys.iter().all(|k| k.0.waiter_count() == 0));
        }
    }
}

#[test]
fn max_hold_caps_grants_and_renewals() {
    let mut w = World::at(1_000);
    let mut k = RwLock::default();
    let (_, r) = k.lock(&req("o", Mode::Write, 600, None, 500), &mut w.env());
    assert_eq!(r, Err(LockError::MaxHold { left: 500 }));
    assert!(k.0.is_empty());
    let (c, r) = k.lock(&req("o", Mode::Write, 300, None, 500), &mut w.env());
    assert!(matches!(r, Ok(Acquire::Granted(_))));
    assert!(c
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Cap { at: 1_500, .. })));
    w.now = 1_200;
    let (c, r) = k.try_renew("o", 301, &mut w.env());
    assert_eq!(r, Err(LockError::MaxHold { left: 300 }));
    assert!(c.effects.is_empty());
    let (_, r) = k.try_renew("o", 300, &mut w.env());
    assert!(matches!(r, Ok(Some(_))));
    // Re-entry keeps the first cap, whatever it asks for.
    let (_, r) = k.lock(&req("o", Mode::Write, 400, None, 0), &mut w.env());
    assert_eq!(r, Err(LockError::MaxHold { left: 300 }));
    // The effects replay to the same cap.
    let mut replica = RwLock::default();
    let mut tokens = Tokens::new();
    let mut w2 = World::at(1_000);
    let (c, _) = RwLock::default().lock(&req("o", Mode::Write, 300, None, 500), &mut w2.env());
    for e in &c.effects {
        replica.0.apply(e, &mut tokens);
    }
    assert_eq!(replica.0.hold_of("o", 1_000).map(|h| h.cap), Some(1_500));
    // MRENEW refuses all if one key would pass its cap.
    let mut keys = [RwLock::default(), k];
    let _ = keys[0].lock(&req("o", Mode::Write, 100, None, 0), &mut w.env());
    let (_, r) = mrenew(&mut refs(&mut keys), &OPEN, id("o"), 1_000, &mut w.env());
    assert_eq!(r, Err(LockError::MaxHold { left: 300 }));
    assert_eq!(
        keys[0].0.hold_of("o", 1_200).map(|h| h.deadline),
        Some(1_300)
    );
}

// ---------------------------------------------------------------------------------------------
// The wait-for graph: the memoised walk against a plain reachability over every edge.

struct Keys<'a> {
    locks: &'a [(Kind, Lock)],
    waits: HashMap<Id, Vec<(usize, u64)>>,
}

impl Graph for Keys<'_> {
    type Key = usize;
    fn waits(&self, owner: &Id) -> Vec<u64> {
        self.waits
            .get(owner)
            .map_or_else(Vec::new, |w| w.iter().map(|(_, id)| *id).collect())
    }
    fn keys_of(&self, id: u64) -> Vec<usize> {
        self.waits
            .values()
            .flatten()
            .filter(|(_, i)| *i == id)
            .map(|(k, _)| *k)
            .collect()
    }
    fn with_lock(&self, key: &usize, f: &mut dyn FnMut(Kind, &Lock)) -> bool {
        let (kind, lock) = &self.locks[*key];
        f(*kind, lock);
        true
    }
    fn alive(&self, _: u64) -> bool {
        true
    }
}

/// A node of the plain graph: an owner, or one parked request (key, waiter id).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum N {
    Owner(Id),
    Req(usize, u64),
}

/// Every edge of the definition, without shortcuts: a request waits for each holder that
/// excludes it (not its own owner) and each request ahead of it; an owner for each of its
/// requests.
fn edges(
    locks: &[(Kind, Lock)],
    waits: &HashMap<Id, Vec<(usize, u64)>>,
    now: u64,
) -> HashMap<N, HashSet<N>> {
    let mut out: HashMap<N, HashSet<N>> = HashMap::new();
    for (k, (kind, lock)) in locks.iter().enumerate() {
        let waiters: Vec<_> = lock.waiters().collect();
        for (i, w) in waiters.iter().enumerate() {
            let e = out.entry(N::Req(k, w.id)).or_default();
            for a in &waiters[..i] {
                e.insert(N::Req(k, a.id));
            }
            for h in lock.live_holders(now) {
                let excludes = match kind {
                    Kind::Semaphore => {
                        u64::from(h.hold.reads) + u64::from(w.permits) > u64::from(lock.limit())
                    }
                    _ => w.mode == Mode::Write || h.hold.writes > 0,
                };
                if excludes && *h.owner != w.owner {
                    e.insert(N::Owner(h.owner.clone()));
                }
            }
        }
    }
    for (o, ws) in waits {
        let e = out.entry(N::Owner(o.clone())).or_default();
        for (k, id) in ws {
            e.insert(N::Req(*k, *id));
        }
    }
    out
}

fn reaches(edges: &HashMap<N, HashSet<N>>, from: &N, to: &[N]) -> bool {
    let mut seen = HashSet::new();
    let mut stack: Vec<N> = edges.get(from).into_iter().flatten().cloned().collect();
    while let Some(o) = stack.pop() {
        if to.contains(&o) {
            return true;
        }
        if seen.insert(o.clone()) {
            stack.extend(edges.get(&o).into_iter().flatten().cloned());
        }
    }
    false
}

/// The false positive an owner-level graph gives: x's read and y's read wait behind a writer
/// W; x's write waits behind both. y waits for x's *read* request, which waits only for W: no
/// cycle, whatever x's write waits for.
#[test]
fn an_owner_s_other_request_ahead_is_no_cycle() {
    let mut w = World::at(1_000);
    let mut k = RwLock::default();
    let _ = k.lock(&req("W", Mode::Write, 10_000, None, 0), &mut w.env());
    let mut waits: HashMap<Id, Vec<(usize, u64)>> = HashMap::new();
    for (o, mode) in [
        ("x", Mode::Read),
        ("y", Mode::Read),
        ("w0", Mode::Write),
        ("x", Mode::Write),
    ] {
        let id = w.next_id();
        let (_, r) = k.lock(
            &req(o, mode, 10_000, Some(Wait::forever(id)), 0),
            &mut w.env(),
        );
        assert_eq!(r, Ok(Acquire::Queued));
        waits.entry(Id::from(o)).or_default().push((0, id));
    }
    let locks = vec![(Kind::RwLock, std::mem::take(&mut k.0))];
    let g = Keys {
        locks: &locks,
        waits,
    };
    assert!(!closes_cycle(&g, &Id::from("x"), 4, &[0], 1_000));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Random holds and queues over rwlock, election and semaphore keys: the walk finds a
    /// cycle through a waiter exactly when plain reachability over every edge does.
    #[test]
    fn the_walk_finds_exactly_the_cycles(ops in proptest::collection::vec((0usize..4, 0usize..5, any::<bool>(), 1u32..3, any::<bool>()), 1..40)) {
        let mut w = World::at(1_000);
        let kinds = [Kind::RwLock, Kind::RwLock, Kind::Semaphore, Kind::Election];
        let mut locks: Vec<(Kind, Lock)> = kinds.iter().map(|k| (*k, Lock::new())).collect();
        let mut waits: HashMap<Id, Vec<(usize, u64)>> = HashMap::new();
        for (key, owner, write, permits, wait) in ops {
            let owner = format!("o{owner}");
            let wid = w.next_id();
            let wt = wait.then(|| Wait::forever(wid));
            let (kind, lock) = &mut locks[key];
            let slot = std::mem::take(lock);
            let (slot, r) = match kind {
                Kind::RwLock => {
                    let mut l = RwLock(slot);
                    let mode = if write { Mode::Write } else { Mode::Read };
                    let (_, r) = l.lock(&req(&owner, mode, 10_000, wt, 0), &mut w.env());
                    (l.0, r)
                }
                Kind::Election => {
                    let mut l = redis_lease_core::Election(slot);
                    let (_, r) = l.campaign(id(owner.as_str()), 10_000, wt, 100, &mut w.env());
                    (l.0, r)
                }
                Kind::Semaphore => {
                    let mut l = redis_lease_core::Semaphore(slot);
                    let p = redis_lease_core::Permits { owner: id(owner.as_str()), limit: 2, permits, ttl: 10_000, wait: wt, max_waiters: 100, max_hold: 0 };
                    let (_, r) = l.acquire(&p, &mut w.env());
                    (l.0, r)
                }
            };
            *lock = slot;
            if r == Ok(Acquire::Queued) {
                waits.entry(Id::from(owner.as_str())).or_default().push((key, wid));
            }
        }
        let all = edges(&locks, &waits, 1_000);
        let g = Keys { locks: &locks, waits: waits.clone() };
        for (owner, ws) in &waits {
            for (key, wid) in ws {
                let walk = closes_cycle(&g, owner, *wid, &[*key], 1_000);
                let me = N::Req(*key, *wid);
                let naive = reaches(&all, &me, &[N::Owner(owner.clone()), me.clone()]);
                prop_assert_eq!(walk, naive, "owner {:?} waiter {} on key {}", owner, wid, key);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Random multi-key traffic, driven as the shell drives it.

#[derive(Clone, Debug)]
enum Step {
    /// A fresh owner asks for a set of keys (bit mask), read or write, waiting or not.
    Multi { mask: u8, read: bool, wait: bool },
    /// A fresh owner asks for one key with a wait.
    Single { key: usize, read: bool },
    /// The holder of the oldest grant gives everything back.
    Release,
    /// The clock moves on.
    Advance(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1u8..16, any::<bool>(), any::<bool>()).prop_map(|(mask, read, wait)| Step::Multi {
            mask,
            read,
            wait
        }),
        (0usize..4, any::<bool>()).prop_map(|(key, read)| Step::Single { key, read }),
        Just(Step::Release),
        Just(Step::Release),
        (1u64..300).prop_map(Step::Advance),
    ]
}

struct Sim {
    w: World,
    keys: Vec<RwLock>,
    /// Parked multi-key requests: id -> (owner, key indexes, mode, until).
    groups: BTreeMap<u64, (String, Vec<usize>, Mode, Option<u64>)>,
    /// Owners holding, in grant order, with their keys.
    holding: Vec<(String, Vec<usize>)>,
    /// Every waiter answered, and how.
    answered: HashMap<u64, &'static str>,
    single: HashMap<u64, (String, usize)>,
}

impl Sim {
    fn absorb(&mut self, changes: Vec<(usize, Changes)>, ready: &mut Vec<u64>) {
        for (k, c) in changes {
            for wk in c.woken {
                assert!(
                    self.answered.insert(wk.waiter, "granted").is_none(),
                    "answered twice"
                );
                let (o, key) = self.single.remove(&wk.waiter).expect("a single waiter");
                assert_eq!(key, k);
                self.holding.push((o, vec![k]));
            }
            for id in c.timed_out {
                if self.answered.contains_key(&id) {
                    continue; // a group's other keys: already answered
                }
                self.answered.insert(id, "timed out");
                self.groups.remove(&id);
                self.single.remove(&id);
            }
            ready.extend(c.ready);
        }
    }

    fn drain(&mut self, mut ready: Vec<u64>) {
        let mut rounds = 0;
        while let Some(id) = ready.pop() {
            rounds += 1;
            assert!(rounds < 10_000, "drain does not end");
            let Some((owner, ks, mode, until)) = self.groups.get(&id).cloned() else {
                continue;
            };
            let m = MultiRequest {
                owner: id_of(&owner),
                mode,
                ttl: 1_000,
                wait: Some(Wait { id, until }),
                max_waiters: 100,
                max_hold: 0,
            };
            let mut env = self.w.env();
            let mut picked: Vec<&mut RwLock> = self
                .keys
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| ks.contains(i))
                .map(|(_, k)| k)
                .collect();
            let n = picked.len();
            let (changes, r) = grant_ready(&mut picked, &OPEN[..n], &m, &mut env);
            drop(picked);
            let changes: Vec<_> = ks.iter().copied().zip(changes).collect();
            self.absorb(changes, &mut ready);
            if let Ready::Granted(t) = r {
                assert_eq!(t.len(), ks.len());
                assert!(
                    self.answered.insert(id, "granted").is_none(),
                    "answered twice"
                );
                self.groups.remove(&id);
                self.holding.push((owner, ks));
            }
        }
    }

    fn check(&self) {
        let now = self.w.now;
        // No partial hold: a holding owner holds each of its keys (or its lease lapsed on all
        // of them at once: the same deadline everywhere).
        for (o, ks) in &self.holding {
            let held: Vec<bool> = ks
                .iter()
                .map(|k| self.keys[*k].0.hold_of(o.as_str(), now).is_some())
                .collect();
            assert!(
                held.iter().all(|h| *h) || held.iter().all(|h| !*h),
                "partial hold of {o}: {held:?}"
            );
        }
        for (id, (_, ks, mode, _)) in &self.groups {
            // Parked: not holding any of its keys, and not grantable on all of them at once
            // (else drain would have granted it).
            let mut all_ready = true;
            for k in ks {
                let l = &self.keys[*k].0;
                let head = l.waiters().next().is_some_and(|w| w.id == *id);
                let free = match mode {
                    Mode::Write => l.live_holders(now).next().is_none(),
                    Mode::Read => l.mode(now) != Some(Mode::Write),
                };
                all_ready &= head && free;
            }
            assert!(!all_ready, "group {id} could be granted but waits");
        }
    }
}

fn id_of(o: &str) -> &'static Id {
    id(o)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_traffic_never_holds_partially_and_never_strands_a_ready_request(steps in proptest::collection::vec(step(), 1..60)) {
        let mut sim = Sim { w: World::at(1_000), keys: (0..4).map(|_| RwLock::default()).collect(), groups: BTreeMap::new(), holding: vec![], answered: HashMap::new(), single: HashMap::new() };
        let mut n = 0;
        for s in steps {
            n += 1;
            let owner = format!("o{n}");
            let mut ready = vec![];
            match s {
                Step::Multi { mask, read, wait } => {
                    let ks: Vec<usize> = (0..4).filter(|i| mask & (1 << i) != 0).collect();
                    let mode = if read { Mode::Read } else { Mode::Write };
                    let wid = sim.w.next_id();
                    let until = Some(sim.w.now + 500);
                    let wt = wait.then_some(Wait { id: wid, until });
                    let m = MultiRequest { owner: id_of(&owner), mode, ttl: 1_000, wait: wt, max_waiters: 100, max_hold: 0 };
                    let mut env = sim.w.env();
                    let mut picked: Vec<&mut RwLock> = sim.keys.iter_mut().enumerate().filter(|(i, _)| ks.contains(i)).map(|(_, k)| k).collect();
                    let n = picked.len();
                    let (changes, r) = mlock(&mut picked, &OPEN[..n], &m, &mut env);
                    drop(picked);
                    sim.absorb(ks.iter().copied().zip(changes).collect(), &mut ready);
                    match r {
                        Ok(MultiAcquire::Granted(_)) => sim.holding.push((owner, ks)),
                        Ok(MultiAcquire::Queued) => { sim.groups.insert(wid, (owner, ks, mode, until)); }
                        Ok(MultiAcquire::Busy) => {}
                        Err(e) => panic!("{e:?}"),
                    }
                }
                Step::Single { key, read } => {
                    let wid = sim.w.next_id();
                    let mode = if read { Mode::Read } else { Mode::Write };
                    let r = Request { owner: id_of(&owner), mode, ttl: 1_000, wait: Some(Wait { id: wid, until: Some(sim.w.now + 500) }), max_waiters: 100, max_hold: 0 };
                    let (c, out) = sim.keys[key].lock(&r, &mut sim.w.env());
                    sim.absorb(vec![(key, c)], &mut ready);
                    match out {
                        Ok(Acquire::Granted(_)) => sim.holding.push((owner, vec![key])),
                        Ok(Acquire::Queued) => { sim.single.insert(wid, (owner, key)); }
                        other => panic!("{other:?}"),
                    }
                }
                Step::Release => {
                    if !sim.holding.is_empty() {
                        let (o, ks) = sim.holding.remove(0);
                        for k in ks {
                            let (c, _) = sim.keys[k].unlock(o.as_str(), &mut sim.w.env());
                            sim.absorb(vec![(k, c)], &mut ready);
                        }
                    }
                }
                Step::Advance(ms) => {
                    sim.w.now += ms;
                    for k in 0..4 {
                        let c = sim.keys[k].tick(&mut sim.w.env());
                        sim.absorb(vec![(k, c)], &mut ready);
                    }
                }
            }
            sim.drain(ready);
            sim.check();
        }
    }
}

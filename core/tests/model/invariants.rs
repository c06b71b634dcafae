//! Properties checked on the core alone, after every step of a random run.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use redis_lease_core::{Acquire, Changes, Effect, Grants, Lock, Mode, Tokens};

use super::compare::{real_holders, HolderRow};
use super::ops::{Act, KindSel, Scenario};
use super::sut::{name, Key, Reply, Sut};
use super::TestResult;

/// What the checks remember across a run.
#[derive(Default)]
pub struct Seen {
    /// The highest token of any new grant so far (over every key).
    max_token: u64,
    /// The state rebuilt from the effects alone, with `Lock::apply` (a replica): it tells a
    /// reentrant grant from a new one, and must always hold what the key holds.
    shadow: Lock,
    shadow_tokens: Tokens,
    /// Waiter ids that were queued as an upgrade (they may go ahead of earlier waiters).
    upgrades: HashSet<u64>,
    /// The last ordinary (non-upgrade) waiter that was granted.
    last_fifo_woken: u64,
    /// Every waiter answered (granted or timed out), and every waiter cancelled.
    answered: HashSet<u64>,
    cancelled: HashSet<u64>,
    /// Election: which candidate each term belonged to, and the highest term.
    terms: HashMap<u64, Vec<u8>>,
    max_term: u64,
}

/// What the queue and the token source looked like before the step.
pub struct Before {
    ids: Vec<u64>,
    alive: HashSet<u64>,
    owners: HashMap<u64, Vec<u8>>,
    high_water: u64,
}

impl Before {
    pub fn of(sut: &Sut) -> Before {
        let ws = sut.waiters();
        Before {
            ids: ws.iter().map(|w| w.0).collect(),
            alive: ws.iter().filter(|w| w.6).map(|w| w.0).collect(),
            owners: ws.iter().map(|w| (w.0, w.1.clone())).collect(),
            high_water: sut.world.tokens.high_water(),
        }
    }
}

/// `owner` may take `mode`, given these live holders and ignoring the queue (locks and
/// elections).
fn admissible(holders: &[HolderRow], owner: &[u8], mode: Mode) -> bool {
    let mine = holders.iter().find(|h| h.0 == owner);
    match mode {
        Mode::Read => mine.is_some() || holders.iter().all(|h| h.2 == 0),
        Mode::Write => mine.is_some_and(|h| h.2 > 0) || holders.iter().all(|h| h.0 == owner),
    }
}

/// Checks what every step must keep, whatever the operation.
fn check_state(sut: &Sut) -> TestResult {
    let lock = sut.key.lock();
    let now = sut.world.now;
    let live = real_holders(lock.live_holders(now));
    let all = real_holders(lock.holders());
    // Never a writer beside another holder (live or not yet pruned).
    if all.iter().any(|h| h.2 > 0) {
        prop_assert_eq!(all.len(), 1, "a writer beside another holder: {:?}", all);
    }
    // No hold visible past its deadline.
    for h in &live {
        prop_assert!(now < h.3, "holder {:?} visible at {}", h, now);
    }
    prop_assert_eq!(lock.mode(now).is_some(), !live.is_empty());
    for h in &all {
        prop_assert_eq!(lock.hold_of(&h.0, now).is_some(), now < h.3);
    }
    if sut.key.kind() == KindSel::Sem {
        // Never more permits held than the limit, by anyone's count.
        let used: u64 = all.iter().map(|h| u64::from(h.1)).sum();
        prop_assert_eq!(lock.permits_used(), used);
        if !all.is_empty() {
            prop_assert!(
                used <= u64::from(lock.limit()),
                "{} permits held, limit {}: {:?}",
                used,
                lock.limit(),
                all
            );
        }
        for h in &all {
            prop_assert!(h.1 >= 1 && h.2 == 0, "semaphore holder {:?}", h);
        }
    }
    prop_assert_eq!(
        lock.is_empty(),
        lock.holder_count() == 0 && lock.waiter_count() == 0
    );
    Ok(())
}

/// The request's own effects are the last ones (time passes first): the shadow state just
/// before them is what it was decided on. How many they are, for a granted request;
/// `served`: a queued request of the same owner was granted first (so this one is a retry).
fn own_effects(kind: KindSel, owner: &[u8], effects: &[Effect], served: bool) -> usize {
    match (kind, effects.last()) {
        (KindSel::Sem, _) if served => 0,
        (KindSel::Sem, Some(Effect::Take { owner: o, .. })) if *o == *owner => {
            let limit =
                effects.len() >= 2 && matches!(effects[effects.len() - 2], Effect::Limit { .. });
            1 + usize::from(limit)
        }
        // A semaphore retry extends the lease (a Renew) or changes nothing.
        (KindSel::Sem, Some(Effect::Renew { owner: o, .. })) if *o == *owner => 1,
        (KindSel::Sem, _) => 0,
        _ => 1,
    }
}

pub fn check_step(
    sut: &Sut,
    seen: &mut Seen,
    before: &Before,
    act: &Act,
    out: &Option<(Reply, Changes)>,
) -> TestResult {
    check_state(sut)?;
    let Some((reply, changes)) = out else {
        return Ok(());
    };
    let kind = sut.key.kind();
    let lock = sut.key.lock();
    let now = sut.world.now;
    let held = sut.world.grants == Grants::Held;
    let granted_here = matches!(
        (act, reply),
        (Act::Lock { .. }, Reply::Acquire(Ok(Acquire::Granted(_))))
    );
    let own = match act {
        Act::Lock { owner, .. } if granted_here => {
            let o = name(*owner);
            let served = changes
                .woken
                .iter()
                .any(|w| before.owners.get(&w.waiter) == Some(&o));
            own_effects(kind, &o, &changes.effects, served)
        }
        _ => 0,
    };
    let mut decided_on = None;
    for (i, e) in changes.effects.iter().enumerate() {
        if granted_here && i + own == changes.effects.len() {
            decided_on = Some(real_holders(seen.shadow.holders()));
        }
        let prev = e
            .owner()
            .and_then(|o| seen.shadow.holders().find(|h| h.owner == o))
            .map(|h| h.hold);
        match e {
            Effect::Grant { mode, token, .. } => {
                let reentrant = matches!(prev, Some(h) if *mode == Mode::Read || h.writes > 0);
                if reentrant {
                    prop_assert_eq!(*token, prev.unwrap().token, "reentrant grant, {:?}", act);
                } else {
                    prop_assert!(!held, "a new token while grants are held: {:?}", e);
                    prop_assert!(
                        *token > seen.max_token,
                        "token {} after {}",
                        token,
                        seen.max_token
                    );
                    seen.max_token = *token;
                }
            }
            Effect::Take { token, .. } => {
                prop_assert!(!held, "a new holder while grants are held: {:?}", e);
                prop_assert!(prev.is_none(), "a second hold of one owner: {:?}", e);
                prop_assert!(
                    *token > seen.max_token,
                    "token {} after {}",
                    token,
                    seen.max_token
                );
                seen.max_token = *token;
            }
            Effect::Limit { limit } => {
                // Only right before the first Take of a key with no holder, and the key's own.
                prop_assert_eq!(seen.shadow.holder_count(), 0, "Limit on a held key");
                let next = changes.effects.get(i + 1);
                prop_assert!(
                    matches!(next, Some(Effect::Take { .. })),
                    "Limit, then {:?}",
                    next
                );
                prop_assert_eq!(*limit, lock.limit());
            }
            _ => {}
        }
        if let Effect::Take { .. } = e {
            let first = i > 0 && matches!(changes.effects[i - 1], Effect::Limit { .. });
            prop_assert_eq!(
                first,
                seen.shadow.holder_count() == 0,
                "Take without its Limit"
            );
        }
        seen.shadow.apply(e, &mut seen.shadow_tokens);
    }
    if held {
        prop_assert!(changes.woken.is_empty(), "woken while grants are held");
        prop_assert_eq!(sut.world.tokens.high_water(), before.high_water);
    }
    // The replica property: the effects alone rebuild the same holders and tokens.
    let all = real_holders(lock.holders());
    prop_assert_eq!(
        &real_holders(seen.shadow.holders()),
        &all,
        "replica after {:?}",
        act
    );
    prop_assert_eq!(seen.shadow.last_token(), lock.last_token());
    prop_assert_eq!(
        seen.shadow_tokens.high_water(),
        sut.world.tokens.high_water()
    );
    if kind == KindSel::Sem && !all.is_empty() {
        prop_assert_eq!(seen.shadow.limit(), lock.limit());
    }
    // After a command every stored holder is live (lapsed ones were pruned).
    let live = real_holders(lock.live_holders(now));
    // Time passes before every request is decided, a refused one too.
    prop_assert_eq!(&all, &live, "lapsed holders left after {:?}", act);

    // Every waiter is answered at most once over its life, never after it was cancelled, and
    // one that left is never granted.
    let cancelled = match act {
        Act::Cancel(id) if before.ids.contains(id) => Some(*id),
        _ => None,
    };
    let mut answered_now = HashSet::new();
    for id in changes
        .woken
        .iter()
        .map(|w| w.waiter)
        .chain(changes.timed_out.iter().copied())
    {
        prop_assert!(seen.answered.insert(id), "waiter {} answered twice", id);
        prop_assert!(
            !seen.cancelled.contains(&id),
            "waiter {} answered after cancel",
            id
        );
        prop_assert!(before.ids.contains(&id), "waiter {} was not queued", id);
        answered_now.insert(id);
    }
    for w in &changes.woken {
        prop_assert!(
            sut.alive(w.waiter),
            "waiter {} granted after it left",
            w.waiter
        );
    }
    seen.cancelled.extend(cancelled);
    // ...and exactly once: a waiter still connected that left the queue other than by
    // cancel was granted or timed out (one that left is dropped unanswered).
    let after: HashSet<u64> = lock.waiters().map(|w| w.id).collect();
    for id in &before.alive {
        if !after.contains(id) && Some(*id) != cancelled {
            prop_assert!(answered_now.contains(id), "waiter {} left unanswered", id);
        }
    }
    for id in &changes.timed_out {
        let until = lock.waiters().find(|w| w.id == *id);
        prop_assert!(until.is_none(), "timed out but still queued: {}", id);
    }

    // FIFO: ordinary waiters are granted in arrival order, none is passed over.
    for w in &changes.woken {
        if !seen.upgrades.contains(&w.waiter) {
            prop_assert!(
                w.waiter > seen.last_fifo_woken,
                "waiter {} granted after {}",
                w.waiter,
                seen.last_fifo_woken
            );
            seen.last_fifo_woken = w.waiter;
        }
    }
    let waiting: Vec<_> = sut.waiters().into_iter().filter(|w| w.6).collect();
    for w in &waiting {
        if !seen.upgrades.contains(&w.0) {
            prop_assert!(w.0 > seen.last_fifo_woken, "waiter {} was passed over", w.0);
        }
    }
    // The head of the queue is served as soon as it can be (a run of readers together),
    // unless grants are held; it is never a waiter that left.
    if let Some(first) = lock.waiters().next() {
        prop_assert!(sut.alive(first.id), "the head {} left", first.id);
        if !held {
            let head = &waiting[0];
            let blocked = match kind {
                KindSel::Sem => {
                    let used = lock.permits_used() + u64::from(head.3);
                    used > u64::from(lock.limit())
                }
                _ => !admissible(&live, &head.1, head.2),
            };
            prop_assert!(
                blocked,
                "head {:?} grantable but left waiting: {:?}",
                head,
                live
            );
        }
    }
    if let Act::Lock {
        owner, mode, wait, ..
    } = act
    {
        let o = name(*owner);
        match reply {
            Reply::Acquire(Ok(Acquire::Granted(t))) => {
                let hold = lock.hold_of(&o, now).expect("granted means held");
                prop_assert_eq!(hold.token, *t);
                let before = decided_on.unwrap_or_else(|| real_holders(seen.shadow.holders()));
                match before.iter().find(|h| h.0 == o) {
                    // A new holder: it may not overtake anyone still waiting.
                    None => {
                        prop_assert!(!held, "new holder {:?} while grants are held", act);
                        prop_assert!(waiting.is_empty(), "{:?} overtook {:?}", act, waiting)
                    }
                    // An upgrade is granted at once only to the sole holder.
                    Some(h) if *mode == Mode::Write && h.2 == 0 && kind == KindSel::Rw => {
                        prop_assert!(!held, "upgrade while grants are held");
                        prop_assert_eq!(before.len(), 1, "upgrade beside {:?}", before)
                    }
                    // Reentrant, a leader's renewal or a semaphore holder's retry: may pass
                    // the queue.
                    Some(_) => {}
                }
            }
            Reply::Acquire(Ok(Acquire::Queued)) => {
                let id = wait.expect("queued only with WAIT").id;
                if lock.holders().any(|h| *h.owner == o) {
                    seen.upgrades.insert(id);
                }
            }
            _ => {}
        }
    }

    if let Key::El(e) = &sut.key {
        prop_assert!(all.len() <= 1, "two leaders: {:?}", all);
        prop_assert!(all.iter().all(|h| h.1 == 0 && h.2 == 1));
        if let Some((o, term)) = e.current(now).map(|h| (h.owner.to_vec(), h.hold.token)) {
            match seen.terms.get(&term) {
                Some(prev) => prop_assert_eq!(prev, &o, "term {} changed hands", term),
                None => {
                    prop_assert!(
                        term > seen.max_term,
                        "term {} not above {}",
                        term,
                        seen.max_term
                    );
                    seen.max_term = term;
                    seen.terms.insert(term, o.clone());
                }
            }
            if let (Act::Lock { owner, ttl, .. }, Reply::Acquire(Ok(Acquire::Granted(t)))) =
                (act, reply)
            {
                prop_assert_eq!(&name(*owner), &o);
                prop_assert_eq!(*t, term);
                prop_assert_eq!(
                    e.current(now).unwrap().hold.deadline,
                    now.saturating_add(*ttl)
                );
            }
        }
    }
    Ok(())
}

pub fn run_invariants(kind: KindSel, s: &Scenario) -> TestResult {
    let mut sut = Sut::new(kind, s.limit);
    let mut seen = Seen::default();
    for op in &s.ops {
        let act = sut.resolve(op);
        let before = Before::of(&sut);
        let out = sut.act(&act);
        check_step(&sut, &mut seen, &before, &act, &out)?;
        if act.is_core_op() && s.reset && sut.reset_if_empty() {
            seen.shadow = Lock::default();
        }
    }
    Ok(())
}

//! Replay: `Changes.effects` applied with `Lock::apply` to a fresh `Lock` and a fresh
//! `Tokens` give the same holders, last token, high-water mark and (while anything is held)
//! semaphore limit, step by step and from the whole log at once.

use proptest::prelude::*;
use redis_lease_core::{Effect, Lock, Tokens};

use super::compare::real_holders;
use super::ops::{KindSel, Scenario};
use super::sut::Sut;
use super::TestResult;

pub fn run_replay(kind: KindSel, s: &Scenario) -> TestResult {
    let mut sut = Sut::new(kind, s.limit);
    let mut log: Vec<Effect> = vec![];
    let mut replica = Lock::new();
    let mut replica_tokens = Tokens::new();
    for op in &s.ops {
        let act = sut.resolve(op);
        if let Some((_, changes)) = sut.act(&act) {
            for e in &changes.effects {
                replica.apply(e, &mut replica_tokens);
            }
            log.extend(changes.effects);
        }
        let lock = sut.key.lock();
        let holders = real_holders(lock.holders());
        prop_assert_eq!(
            real_holders(replica.holders()),
            holders.clone(),
            "after {:?}",
            act
        );
        prop_assert_eq!(replica.last_token(), lock.last_token());
        prop_assert_eq!(replica_tokens.high_water(), sut.world.tokens.high_water());
        if kind == KindSel::Sem && !holders.is_empty() {
            prop_assert_eq!(replica.limit(), lock.limit(), "limit after {:?}", act);
            prop_assert_eq!(replica.permits_used(), lock.permits_used());
        }
    }
    // And once more from scratch, the whole log at once.
    let mut fresh = Lock::new();
    let mut fresh_tokens = Tokens::new();
    for e in &log {
        fresh.apply(e, &mut fresh_tokens);
    }
    let lock = sut.key.lock();
    prop_assert_eq!(real_holders(fresh.holders()), real_holders(lock.holders()));
    prop_assert_eq!(fresh.last_token(), lock.last_token());
    prop_assert_eq!(fresh_tokens.high_water(), sut.world.tokens.high_water());
    prop_assert_eq!(fresh.next_deadline(), lock.next_deadline());
    prop_assert_eq!(fresh.last_deadline(), lock.last_deadline());
    Ok(())
}

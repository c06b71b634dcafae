//! Model-based, invariant and replay properties of the pure core, for read-write locks,
//! elections and semaphores, with wait deadlines (ties with lease deadlines included),
//! grants switched between open and held, waiters that leave, and waiters taken out and put
//! back.
//!
//! * `*_matches_the_model` (model/compare.rs): a deliberately simple reference model of one
//!   key (model/reference.rs: a `Vec` of holders, a `Vec` of waiters, linear scans) written
//!   from docs/COMMANDS.md, driven in lockstep with the real key by random operations; every
//!   reply, every woken and timed-out waiter and the visible state are compared after each
//!   step. Tokens are compared by relative order (the model counts 1, 2, 3...; the core adds a
//!   clock floor), through an order-preserving map.
//! * `*_invariants` (model/invariants.rs): properties of the core alone after every step:
//!   permits within the limit, FIFO, no hold past its deadline, tokens strictly increasing,
//!   no new holder or token while grants are held, every waiter answered at most once (and
//!   exactly once when it leaves the queue still connected, other than by cancel), and the
//!   replica property (the effects alone, replayed with `Lock::apply`, rebuild the holders).
//! * `replaying_effects_rebuilds_the_state` (model/replay.rs).
//! * model/corners.rs: targeted tests of what the properties reach rarely.
//!
//! Case counts keep `cargo test -p redis-lease-core` within about a minute on two cores;
//! `PROPTEST_CASES=n` runs every property with n cases instead.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};

#[path = "model/compare.rs"]
mod compare;
#[path = "model/corners.rs"]
mod corners;
mod harness;
#[path = "model/invariants.rs"]
mod invariants;
#[path = "model/ops.rs"]
mod ops;
#[path = "model/reference.rs"]
mod reference;
#[path = "model/replay.rs"]
mod replay;
#[path = "model/sut.rs"]
mod sut;

use compare::run_against_model;
use invariants::run_invariants;
use ops::{scenario, KindSel};
use replay::run_replay;

type TestResult = Result<(), TestCaseError>;

fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

fn kind() -> impl Strategy<Value = KindSel> {
    prop_oneof![Just(KindSel::Rw), Just(KindSel::El), Just(KindSel::Sem)]
}

proptest! {
    #![proptest_config(config(400))]

    #[test]
    fn rwlock_matches_the_model(s in scenario(200)) {
        run_against_model(KindSel::Rw, &s)?;
    }

    #[test]
    fn election_matches_the_model(s in scenario(120)) {
        run_against_model(KindSel::El, &s)?;
    }

    #[test]
    fn semaphore_matches_the_model(s in scenario(200)) {
        run_against_model(KindSel::Sem, &s)?;
    }
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn rwlock_invariants(s in scenario(200)) {
        run_invariants(KindSel::Rw, &s)?;
    }

    #[test]
    fn election_invariants(s in scenario(120)) {
        run_invariants(KindSel::El, &s)?;
    }

    #[test]
    fn semaphore_invariants(s in scenario(200)) {
        run_invariants(KindSel::Sem, &s)?;
    }
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn replaying_effects_rebuilds_the_state(kind in kind(), s in scenario(200)) {
        run_replay(kind, &s)?;
    }
}

/// The generated runs are not shallow: a fixed sample of them (the same on every run) reaches
/// every rule of the model several times.
#[test]
fn the_generated_runs_reach_every_rule() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use reference::{Cov, Rule};

    let mut runner = TestRunner::deterministic();
    let mut total = Cov::default();
    for kind in [KindSel::Rw, KindSel::El, KindSel::Sem] {
        let mut cov = Cov::default();
        for _ in 0..60 {
            let s = scenario(200).new_tree(&mut runner).unwrap().current();
            cov.add(&run_against_model(kind, &s).expect("agrees with the model"));
        }
        eprintln!("{kind:?}: {cov:?}");
        total.add(&cov);
    }
    for rule in Rule::ALL {
        assert!(
            total.get(rule) >= 3,
            "{rule:?} reached {} times",
            total.get(rule)
        );
    }
}

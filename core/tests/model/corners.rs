//! Targeted tests of the corners the properties reach rarely: the top of the token range,
//! upgrades beside other upgrades, an upgrade whose read hold lapsed, waiters that left.

use redis_lease_core::{Acquire, Effect, LockError, Mode, RwLock, Tokens};

use super::ops::{Act, KindSel, Op, WaitGen};
use super::sut::{name, Reply, Sut};
use crate::harness::{request, World, START};

/// A small driver for hand-written scenarios.
struct Hand {
    sut: Sut,
}

impl Hand {
    fn new() -> Hand {
        Hand {
            sut: Sut::new(KindSel::Rw, 1),
        }
    }

    fn lock(
        &mut self,
        owner: usize,
        mode: Mode,
        ttl: u64,
        wait: bool,
    ) -> Result<Acquire, LockError> {
        let op = Op::Lock {
            owner,
            write: mode == Mode::Write,
            permits: 1,
            other_limit: None,
            ttl,
            wait: wait.then_some(WaitGen::Forever),
        };
        let act = self.sut.resolve(&op);
        match self.sut.act(&act) {
            Some((Reply::Acquire(r), _)) => r,
            other => panic!("{other:?}"),
        }
    }

    fn woken(&mut self, act: Act) -> Vec<u64> {
        match self.sut.act(&act) {
            Some((_, c)) => c.woken.iter().map(|w| w.waiter).collect(),
            None => vec![],
        }
    }
}

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;
const W: usize = 3;

/// A key's own last token (say from an RDB file) bounds new tokens even when the token source
/// has not seen it.
#[test]
fn a_keys_last_token_bounds_new_tokens() {
    let mut l = RwLock::default();
    l.0.observe_token(5_000_000_000_000_000);
    let mut world = World::at(START);
    let (_, r) = l.lock(&request(b"a", Mode::Write, 10, None, 10), &mut world.env());
    assert_eq!(r, Ok(Acquire::Granted(5_000_000_000_000_001)));
}

/// At the top of the token range no token is issued and the grant is refused: never a panic (a
/// panic in a module kills Redis) and never a wrapped token (which would break fencing). The
/// top is reached with a clock at or past u64::MAX / 1000 ms, or with a token u64::MAX observed
/// from an RDB file, the AOF or a replication stream.
#[test]
fn tokens_do_not_overflow_at_the_top_of_the_range() {
    // By the clock: the ceiling is i64::MAX (tokens are RESP integers); past it, no token.
    let mut tokens = Tokens::new();
    assert_eq!(tokens.issue(0, u64::MAX / 1000 + 1), None);
    tokens.observe(Tokens::MAX - 1);
    let first = tokens.issue(0, START).unwrap();
    let next = std::panic::catch_unwind(move || tokens.issue(0, START));
    assert!(
        matches!(next, Ok(None)),
        "no second token after the ceiling {first}: {next:?}"
    );
    // By a replicated grant, then an ordinary request at an ordinary time.
    let result = std::panic::catch_unwind(|| {
        let mut l = RwLock::default();
        let mut world = World::at(START);
        let grant = Effect::Grant {
            owner: b"a".to_vec().into(),
            mode: Mode::Read,
            deadline: START + 10,
            token: u64::MAX,
        };
        l.0.apply(&grant, &mut world.tokens);
        l.lock(&request(b"b", Mode::Read, 10, None, 10), &mut world.env())
            .1
    });
    // There is no token above u64::MAX: the only correct answer is to refuse the grant.
    assert!(
        !matches!(result, Ok(Ok(Acquire::Granted(_))) | Err(_)),
        "grant after token u64::MAX: {result:?}"
    );
}

/// While a reader waits to upgrade, a second reader that *waits* to upgrade gets the DEADLOCK
/// error; one that asks without WAIT is answered at once, and not granted: nil.
#[test]
fn a_second_upgrade_without_wait_is_refused_with_nil() {
    let mut h = Hand::new();
    assert!(matches!(
        h.lock(A, Mode::Read, 100, false),
        Ok(Acquire::Granted(_))
    ));
    assert!(matches!(
        h.lock(B, Mode::Read, 100, false),
        Ok(Acquire::Granted(_))
    ));
    assert_eq!(h.lock(A, Mode::Write, 100, true), Ok(Acquire::Queued));
    // With WAIT: the error.
    assert_eq!(
        h.lock(B, Mode::Write, 100, true),
        Err(LockError::UpgradeDeadlock)
    );
    // Without WAIT: not granted, answered at once: nil.
    assert_eq!(h.lock(B, Mode::Write, 100, false), Ok(Acquire::Busy));
}

/// A write request queued before its owner became a reader (the same owner id on two
/// connections) counts as a waiting upgrade: a second reader's upgrade gets the DEADLOCK error
/// instead of both waiting for each other until a lease lapses.
#[test]
fn an_upgrade_beside_a_reader_already_waiting_for_write_is_refused() {
    let mut h = Hand::new();
    assert!(matches!(
        h.lock(W, Mode::Write, 100, false),
        Ok(Acquire::Granted(_))
    ));
    assert_eq!(h.lock(A, Mode::Read, 1_000, true), Ok(Acquire::Queued)); // id 1
    assert_eq!(h.lock(B, Mode::Read, 1_000, true), Ok(Acquire::Queued)); // id 2
    assert_eq!(h.lock(A, Mode::Write, 1_000, true), Ok(Acquire::Queued)); // id 3
    assert_eq!(h.woken(Act::Unlock { owner: W }), vec![1, 2]);
    // A and B both read; A waits for the write lock (id 3). If B waited to upgrade as well,
    // each would wait for the other to leave.
    let b = h.lock(B, Mode::Write, 1_000, true);
    let stuck = h.woken(Act::Advance(999)).is_empty() && h.woken(Act::Tick).is_empty();
    assert_eq!(
        b,
        Err(LockError::UpgradeDeadlock),
        "stuck until the leases lapse: {stuck}"
    );
}

/// A reader waiting to upgrade whose read hold lapsed is an ordinary waiter: another reader may
/// then wait to upgrade (no deadlock is possible).
#[test]
fn an_upgrade_whose_read_hold_lapsed_is_an_ordinary_waiter() {
    let mut h = Hand::new();
    assert!(matches!(
        h.lock(A, Mode::Read, 10, false),
        Ok(Acquire::Granted(_))
    ));
    assert!(matches!(
        h.lock(B, Mode::Read, 1_000, false),
        Ok(Acquire::Granted(_))
    ));
    assert!(matches!(
        h.lock(C, Mode::Read, 1_000, false),
        Ok(Acquire::Granted(_))
    ));
    assert_eq!(h.lock(W, Mode::Write, 1_000, true), Ok(Acquire::Queued)); // id 1
    assert_eq!(h.lock(A, Mode::Write, 1_000, true), Ok(Acquire::Queued)); // id 2, upgrade
                                                                          // A's read hold lapses while its upgrade waits.
    assert!(h.woken(Act::Advance(10)).is_empty());
    assert!(h.woken(Act::Tick).is_empty());
    assert!(h.sut.key.lock().hold_of(name(A), h.sut.world.now).is_none());
    // B may wait to upgrade: A is no longer a reader.
    assert_eq!(h.lock(B, Mode::Write, 1_000, true), Ok(Acquire::Queued));
}

/// A waiting upgrade whose read hold lapsed is served in arrival order, not ahead of a writer
/// that queued before it.
#[test]
fn a_lapsed_upgrader_does_not_overtake_earlier_waiters() {
    let mut h = Hand::new();
    assert!(matches!(
        h.lock(A, Mode::Read, 10, false),
        Ok(Acquire::Granted(_))
    ));
    assert!(matches!(
        h.lock(B, Mode::Read, 1_000, false),
        Ok(Acquire::Granted(_))
    ));
    assert_eq!(h.lock(W, Mode::Write, 1_000, true), Ok(Acquire::Queued)); // id 1
    assert_eq!(h.lock(A, Mode::Write, 1_000, true), Ok(Acquire::Queued)); // id 2, upgrade
    assert!(h.woken(Act::Advance(10)).is_empty());
    assert!(h.woken(Act::Tick).is_empty());
    // B leaves: W (id 1) arrived before A's request (id 2), and A holds nothing any more.
    assert_eq!(h.woken(Act::Unlock { owner: B }), vec![1]);
}

/// A waiter whose client left still counts against `max_waiters` (and in `waiter_count()`,
/// INFO's `waiters`) until the shell cancels it, which the module does within one event-loop
/// turn of the disconnect; once cancelled it no longer counts.
#[test]
fn waiters_that_left_count_against_the_limit_until_cancelled() {
    let mut world = World::at(START);
    let mut l = RwLock::default();
    let req = |owner: &'static [u8], wait| request(owner, Mode::Write, 100, wait, 2);
    assert!(matches!(
        l.lock(&req(b"h", None), &mut world.env()).1,
        Ok(Acquire::Granted(_))
    ));
    assert_eq!(
        l.lock(&req(b"a", Some(1)), &mut world.env()).1,
        Ok(Acquire::Queued)
    );
    assert_eq!(
        l.lock(&req(b"b", Some(2)), &mut world.env()).1,
        Ok(Acquire::Queued)
    );
    world.leave(2);
    // Not cancelled yet: both places are taken.
    assert_eq!(
        l.lock(&req(b"c", Some(3)), &mut world.env()).1,
        Err(LockError::TooManyWaiters(2))
    );
    assert_eq!(l.0.waiter_count(), 2);
    // The shell cancels it: one live waiter, so a second one fits.
    assert!(l.cancel(2, &mut world.env()).1);
    assert_eq!(l.0.waiter_count(), 1);
    assert_eq!(
        l.lock(&req(b"c", Some(3)), &mut world.env()).1,
        Ok(Acquire::Queued)
    );
}

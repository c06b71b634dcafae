//! The acquisition rules, step by step, with time as an input (no server, no clock).

use super::*;

const MS: Duration = Duration::from_millis(1);

fn policy() -> RetryPolicy {
    RetryPolicy {
        base_delay: 10 * MS,
        max_delay: 100 * MS,
        budget: Duration::from_secs(5),
    }
}

fn reset() -> Failure {
    Failure::Transient {
        uncertain: true,
        err: std::io::Error::from(std::io::ErrorKind::ConnectionReset).into(),
    }
}

fn refused() -> Failure {
    Failure::Transient {
        uncertain: false,
        err: std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(),
    }
}

fn granted(token: u64) -> Result<Reply, Failure> {
    Ok(Reply::Granted { token, acked: None })
}

fn hold(count: u64, token: u64) -> Result<Option<HoldView>, Failure> {
    Ok(Some(HoldView { count, token }))
}

/// A generated owner (a fresh UUID) on a single server.
fn start(wait: Wait, now: Instant) -> (Acquisition, Step) {
    Acquisition::new(wait, true, false, policy(), now)
}

fn sleep_of(step: &Step) -> Duration {
    match step {
        Step::Sleep(d) => *d,
        other => panic!("expected a sleep, got {other:?}"),
    }
}

fn confirm_of(step: Step) -> Grant {
    match step {
        Step::Confirm(g) => g,
        other => panic!("expected a confirmation, got {other:?}"),
    }
}

#[test]
fn the_wait_becomes_the_servers_wait() {
    let t0 = Instant::now();
    assert!(matches!(
        start(Wait::No, t0).1,
        Step::Send(ServerWait::Once)
    ));
    assert!(matches!(
        start(Wait::Forever, t0).1,
        Step::Send(ServerWait::Forever)
    ));
    assert!(matches!(
        start(Wait::For(Duration::from_secs(5)), t0).1,
        Step::Send(ServerWait::Ms(5_000))
    ));
    // Too little time left for a WAIT (WAIT 0 would mean forever): try once.
    assert!(matches!(
        start(Wait::For(MS), t0).1,
        Step::Send(ServerWait::Once)
    ));
    // Longer than the server accepts: its longest wait, asked for again after it.
    assert!(matches!(
        start(Wait::For(Duration::from_secs(1 << 40)), t0).1,
        Step::Send(ServerWait::Ms(1_000_000_000_000))
    ));
    // Too long for a deadline at all: no limit.
    assert!(matches!(
        start(Wait::For(Duration::MAX), t0).1,
        Step::Send(ServerWait::Forever)
    ));
}

#[test]
fn a_caller_chosen_owner_reads_its_holds_before_the_first_request() {
    let t0 = Instant::now();
    let (mut a, step) = Acquisition::new(Wait::No, false, false, policy(), t0);
    assert!(matches!(step, Step::ReadBaseline));
    assert!(!a.needs_cleanup());
    let step = a.on_baseline(t0, hold(2, 7));
    assert!(matches!(step, Step::Send(ServerWait::Once)));
    assert!(!a.needs_cleanup(), "a caller-chosen owner is never swept");
}

#[test]
fn a_grant_is_confirmed_before_it_is_held() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::For(Duration::from_secs(1)), t0);
    assert!(a.needs_cleanup(), "a request in flight may leave a hold");
    let g = confirm_of(a.on_reply(t0 + 5 * MS, granted(42)));
    assert_eq!((g.token, g.since, g.acked, g.sweep), (42, t0, None, false));
    match a.on_confirm(t0 + 6 * MS, Confirmation::Held(t0)) {
        Step::Done(Outcome::Held {
            token,
            last_sent,
            sweep,
        }) => assert_eq!((token, last_sent, sweep), (42, t0, false)),
        other => panic!("{other:?}"),
    }
    assert!(!a.needs_cleanup());
}

#[test]
fn nil_is_not_granted_and_leaves_nothing_to_clean_up() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::No, t0);
    assert!(matches!(
        a.on_reply(t0, Ok(Reply::NotGranted)),
        Step::Done(Outcome::NotGranted)
    ));
    assert!(!a.needs_cleanup());
}

#[test]
fn a_lost_reply_is_followed_by_info_and_the_hold_is_adopted() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::For(Duration::from_secs(10)), t0);
    let step = a.on_reply(t0 + 100 * MS, Err(reset()));
    assert!(sleep_of(&step) <= 10 * MS);
    assert!(a.needs_cleanup());
    assert!(matches!(a.on_timeout(t0 + 110 * MS), Step::ReadInfo));
    let g = confirm_of(a.on_info(t0 + 111 * MS, hold(1, 9)));
    // Adopted: its token from INFO, its lease counted from the lost request's send time, no
    // replica count known, and released by sweeping (a late duplicate may still arrive).
    assert_eq!((g.token, g.since, g.acked, g.sweep), (9, t0, None, true));
}

#[test]
fn info_without_a_new_hold_asks_again_with_the_time_left() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::For(Duration::from_secs(10)), t0);
    a.on_reply(t0 + MS, Err(reset()));
    a.on_timeout(t0 + 20 * MS);
    match a.on_info(t0 + 1_000 * MS, Ok(None)) {
        Step::Send(ServerWait::Ms(ms)) => assert_eq!(ms, 9_000),
        other => panic!("{other:?}"),
    }
    // A later grant counts from the lost request: it may be that one's.
    let g = confirm_of(a.on_reply(t0 + 1_001 * MS, granted(5)));
    assert_eq!(g.since, t0 + 1_000 * MS, "INFO settled the unknown outcome");
    assert!(g.sweep, "an outcome was unknown once: sweep on release");
}

#[test]
fn holds_the_owner_had_before_are_not_adopted() {
    let t0 = Instant::now();
    let (mut a, _) = Acquisition::new(
        Wait::For(Duration::from_secs(5)),
        false,
        false,
        policy(),
        t0,
    );
    a.on_baseline(t0, hold(1, 3));
    a.on_reply(t0 + MS, Err(reset()));
    assert!(!a.needs_cleanup(), "never swept: the owner is the caller's");
    a.on_timeout(t0 + 10 * MS);
    assert!(matches!(a.on_info(t0 + 11 * MS, hold(1, 3)), Step::Send(_)));
    a.on_reply(t0 + 12 * MS, Err(reset()));
    a.on_timeout(t0 + 20 * MS);
    let g = confirm_of(a.on_info(t0 + 21 * MS, hold(2, 3)));
    assert_eq!(g.token, 3);
    assert!(!g.sweep);
}

#[test]
fn a_refused_connection_is_retried_without_info() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::For(Duration::from_secs(5)), t0);
    let step = a.on_reply(t0 + MS, Err(refused()));
    assert!(!a.needs_cleanup(), "nothing was sent, nothing can be held");
    sleep_of(&step);
    assert!(matches!(a.on_timeout(t0 + 20 * MS), Step::Send(_)));
}

#[test]
fn a_certain_failure_after_an_uncertain_one_keeps_the_cleanup() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::For(Duration::from_secs(5)), t0);
    a.on_reply(t0 + MS, Err(reset()));
    a.on_timeout(t0 + 10 * MS);
    a.on_info(t0 + 11 * MS, Err(refused()));
    assert!(a.needs_cleanup());
    assert!(matches!(a.on_timeout(t0 + 30 * MS), Step::ReadInfo));
}

#[test]
fn out_of_time_with_an_unknown_outcome_looks_at_info_once_more() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::For(100 * MS), t0);
    // The reply was lost after the deadline: no sleep, one last INFO.
    assert!(matches!(
        a.on_reply(t0 + 200 * MS, Err(reset())),
        Step::ReadInfo
    ));
    match a.on_info(t0 + 201 * MS, Ok(None)) {
        Step::Done(Outcome::Failed(Error::Unavailable { attempts, .. })) => {
            assert!(attempts >= 1)
        }
        other => panic!("{other:?}"),
    }
    assert!(!a.needs_cleanup(), "INFO showed nothing held");

    // The same, but the last INFO finds the hold.
    let (mut a, _) = start(Wait::For(100 * MS), t0);
    a.on_reply(t0 + 200 * MS, Err(reset()));
    let g = confirm_of(a.on_info(t0 + 201 * MS, hold(1, 11)));
    assert_eq!(g.token, 11);
}

#[test]
fn out_of_time_without_an_unknown_outcome_gives_up() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::For(100 * MS), t0);
    assert!(matches!(
        a.on_reply(t0 + 200 * MS, Err(refused())),
        Step::Done(Outcome::Failed(Error::Unavailable { .. }))
    ));
    assert!(!a.needs_cleanup());
}

#[test]
fn sleeps_never_reach_past_the_deadline() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::For(50 * MS), t0);
    let mut now = t0;
    for _ in 0..20 {
        match a.on_reply(now, Err(refused())) {
            Step::Sleep(d) => {
                assert!(now + d <= t0 + 50 * MS);
                now += d;
                a.on_timeout(now);
            }
            Step::Done(Outcome::Failed(Error::Unavailable { .. })) => return,
            other => panic!("{other:?}"),
        }
        now += MS;
    }
    panic!("never gave up");
}

#[test]
fn a_refused_connection_ends_a_non_waiting_acquisition_at_once() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::No, t0);
    assert!(matches!(
        a.on_reply(t0, Err(refused())),
        Step::Done(Outcome::Failed(Error::Unavailable { attempts: 1, .. }))
    ));
    assert!(!a.needs_cleanup(), "a refused request carried nothing");
    // After a lost reply the INFO read is refused too: answer now, the clean-up armed.
    let (mut a, _) = start(Wait::No, t0);
    assert!(matches!(a.on_reply(t0, Err(reset())), Step::Sleep(_)));
    assert!(matches!(a.on_timeout(t0 + MS), Step::ReadInfo));
    assert!(matches!(
        a.on_info(t0 + 2 * MS, Err(refused())),
        Step::Done(Outcome::Failed(Error::Unavailable { .. }))
    ));
    assert!(a.needs_cleanup(), "the lost reply may have been a grant");
    // A waiting acquisition retries a refusal (a restart takes a moment).
    let (mut a, _) = start(Wait::For(Duration::from_secs(5)), t0);
    assert!(matches!(a.on_reply(t0, Err(refused())), Step::Sleep(_)));
}

#[test]
fn without_a_deadline_the_retry_budget_ends_it() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::Forever, t0);
    assert!(matches!(a.on_reply(t0, Err(refused())), Step::Sleep(_)));
    a.on_timeout(t0 + 10 * MS);
    assert!(matches!(
        a.on_reply(t0 + Duration::from_secs(6), Err(refused())),
        Step::Done(Outcome::Failed(Error::Unavailable { .. }))
    ));
}

#[test]
fn a_fatal_error_ends_it_and_cleans_up_only_after_an_unknown_outcome() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::Forever, t0);
    let fatal = || Failure::Fatal(Error::Deadlock("DEADLOCK".into()));
    assert!(matches!(
        a.on_reply(t0, Err(fatal())),
        Step::Done(Outcome::Failed(Error::Deadlock(_)))
    ));
    assert!(!a.needs_cleanup());

    let (mut a, _) = start(Wait::Forever, t0);
    a.on_reply(t0, Err(reset()));
    a.on_timeout(t0 + 10 * MS);
    a.on_info(t0 + 11 * MS, Ok(None));
    a.on_reply(t0 + 12 * MS, Err(reset()));
    a.on_timeout(t0 + 20 * MS);
    assert!(matches!(
        a.on_info(t0 + 21 * MS, Err(fatal())),
        Step::Done(Outcome::Failed(Error::Deadlock(_)))
    ));
    assert!(a.needs_cleanup(), "the lost request may still be granted");
}

#[test]
fn a_grant_that_lapsed_before_confirmation_is_asked_again() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::For(Duration::from_secs(5)), t0);
    confirm_of(a.on_reply(t0 + MS, granted(1)));
    assert!(matches!(
        a.on_confirm(t0 + 2 * MS, Confirmation::Revoked),
        Step::Send(ServerWait::Ms(_))
    ));
    // Without time left (or without a wait) it is simply not granted.
    confirm_of(a.on_reply(t0 + 3 * MS, granted(2)));
    assert!(matches!(
        a.on_confirm(t0 + Duration::from_secs(6), Confirmation::Revoked),
        Step::Done(Outcome::NotGranted)
    ));
    let (mut a, _) = start(Wait::No, t0);
    confirm_of(a.on_reply(t0, granted(3)));
    assert!(matches!(
        a.on_confirm(t0, Confirmation::Revoked),
        Step::Done(Outcome::NotGranted)
    ));
    assert!(!a.needs_cleanup());
}

#[test]
fn an_unsure_confirmation_is_settled_through_info() {
    let t0 = Instant::now();
    let (mut a, _) = start(Wait::For(Duration::from_secs(5)), t0);
    confirm_of(a.on_reply(t0 + MS, granted(4)));
    let step = a.on_confirm(t0 + 10 * MS, Confirmation::Unsure(LossReason::Expired));
    sleep_of(&step);
    assert!(a.needs_cleanup());
    assert!(matches!(a.on_timeout(t0 + 20 * MS), Step::ReadInfo));
    let g = confirm_of(a.on_info(t0 + 21 * MS, hold(1, 4)));
    assert_eq!((g.token, g.since), (4, t0));
    assert!(g.sweep);

    // Out of time: the loss is the error.
    let (mut a, _) = start(Wait::For(10 * MS), t0);
    confirm_of(a.on_reply(t0 + MS, granted(4)));
    assert!(matches!(
        a.on_confirm(t0 + 20 * MS, Confirmation::Unsure(LossReason::Expired)),
        Step::Done(Outcome::Failed(Error::LeaseLost(LossReason::Expired)))
    ));
}

#[test]
fn a_grant_too_few_replicas_confirmed_is_retried_within_the_deadline() {
    let t0 = Instant::now();
    let unacked = Confirmation::NotReplicated {
        acked: 0,
        wanted: 1,
    };
    let (mut a, _) = start(Wait::For(Duration::from_secs(1)), t0);
    let g = confirm_of(a.on_reply(
        t0 + MS,
        Ok(Reply::Granted {
            token: 8,
            acked: Some(0),
        }),
    ));
    assert_eq!(g.acked, Some(0));
    sleep_of(&a.on_confirm(t0 + 2 * MS, unacked));
    assert!(matches!(a.on_timeout(t0 + 20 * MS), Step::Send(_)));
    confirm_of(a.on_reply(t0 + 21 * MS, granted(9)));
    assert!(matches!(
        a.on_confirm(t0 + Duration::from_secs(2), unacked),
        Step::Done(Outcome::Failed(Error::NotReplicated {
            acked: 0,
            wanted: 1
        }))
    ));

    // A try-lock reports it at once.
    let (mut a, _) = start(Wait::No, t0);
    confirm_of(a.on_reply(t0, granted(10)));
    assert!(matches!(
        a.on_confirm(t0, unacked),
        Step::Done(Outcome::Failed(Error::NotReplicated { .. }))
    ));
}

#[test]
fn a_baseline_read_is_retried() {
    let t0 = Instant::now();
    let (mut a, _) = Acquisition::new(
        Wait::For(Duration::from_secs(1)),
        false,
        false,
        policy(),
        t0,
    );
    sleep_of(&a.on_baseline(t0, Err(refused())));
    assert!(matches!(a.on_timeout(t0 + 10 * MS), Step::ReadBaseline));
    assert!(matches!(
        a.on_baseline(t0 + Duration::from_secs(2), Err(refused())),
        Step::Done(Outcome::Failed(Error::Unavailable { .. }))
    ));
}

#[test]
fn a_connection_that_resends_by_itself_is_always_swept() {
    let t0 = Instant::now();
    let (mut a, _) = Acquisition::new(Wait::No, true, true, policy(), t0);
    assert!(confirm_of(a.on_reply(t0, granted(1))).sweep);
    let (mut a, _) = Acquisition::new(Wait::No, false, true, policy(), t0);
    a.on_baseline(t0, Ok(None));
    assert!(
        !confirm_of(a.on_reply(t0, granted(1))).sweep,
        "not ours alone"
    );
}

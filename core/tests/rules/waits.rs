//! Wait deadlines: time passes in order, as a timer that fired on time would see it. At each
//! lease deadline every lease ending by then lapses and the key is handed on; a waiter whose
//! wait ends strictly before the key frees up for it times out; at a tie the lapse goes first.

use std::collections::HashMap;

use super::Fixture;
use redis_lease_core::{Acquire, DropReason, Effect, Election, Mode, Wait};

use crate::harness::World;

fn dropped(e: &Effect, who: &str) -> bool {
    matches!(e, Effect::Drop { owner, reason: DropReason::Lapse } if *owner == *who.as_bytes())
}

fn granted_to(e: &Effect, who: &str, until: u64) -> bool {
    matches!(e, Effect::Grant { owner, deadline, .. } if *owner == *who.as_bytes() && *deadline == until)
}

#[test]
fn a_wait_that_ends_in_the_same_ms_as_the_holders_lease_lapses_is_granted() {
    // On time, and by a tick that comes late: the order of events is the same.
    for tick_at in [1_100, 1_130, 50_000] {
        let mut f = Fixture::new();
        f.req("h", Mode::Write, 100, false).unwrap(); // lease ends at 1100
        let (id, r) = f.req_until("w", Mode::Write, 50, 1_100);
        assert_eq!(r, Ok(Acquire::Queued));
        assert_eq!(f.world.next_wakeup(&f.lock.0), Some(1_100));
        f.take_effects();
        f.world.now = tick_at;
        f.tick();
        assert_eq!(f.woken_ids(), vec![id], "tick at {tick_at}");
        assert!(f.timed_out_ids().is_empty());
        let effects = f.take_effects();
        assert_eq!(effects.len(), 2, "{effects:?}");
        assert!(dropped(&effects[0], "h"));
        // The grant is made now: its lease lasts ttl from the moment of the grant.
        assert!(granted_to(&effects[1], "w", tick_at + 50), "{effects:?}");
    }
}

#[test]
fn a_wait_that_ends_1_ms_before_the_lapse_times_out() {
    for tick_at in [1_099, 1_100, 1_200] {
        let mut f = Fixture::new();
        f.req("h", Mode::Write, 100, false).unwrap(); // lease ends at 1100
        let (id, r) = f.req_until("w", Mode::Write, 50, 1_099);
        assert_eq!(r, Ok(Acquire::Queued));
        assert_eq!(f.world.next_wakeup(&f.lock.0), Some(1_099));
        f.world.now = tick_at;
        f.tick();
        assert_eq!(f.timed_out_ids(), vec![id], "tick at {tick_at}");
        assert!(f.woken_ids().is_empty(), "tick at {tick_at}");
        assert!(f.queue().is_empty());
        assert_eq!(f.lock.0.is_empty(), tick_at >= 1_100);
    }
}

#[test]
fn a_tie_with_a_lapse_that_does_not_free_the_key_for_the_waiter_times_it_out() {
    let mut f = Fixture::new();
    f.req("a", Mode::Read, 100, false).unwrap(); // 1100
    f.req("b", Mode::Read, 200, false).unwrap(); // 1200
    let (id, _) = f.req_until("w", Mode::Write, 50, 1_100);
    f.world.now = 1_100;
    f.tick();
    // a lapsed at 1100, but b still reads: the key did not free up for w by the end of its wait.
    assert_eq!(f.timed_out_ids(), vec![id]);
    assert!(f.woken_ids().is_empty());
    assert!(f.token_of("b").is_some() && f.token_of("a").is_none());
    assert!(f.queue().is_empty());
}

#[test]
fn a_late_tick_serves_in_the_order_things_happened() {
    let mut f = Fixture::new();
    f.req("h", Mode::Write, 100, false).unwrap(); // lease ends at 1100
    let (r1, _) = f.req_until("r1", Mode::Read, 100, 1_090);
    let (w, _) = f.req_until("w", Mode::Write, 50, 1_150);
    assert_eq!(f.req("r2", Mode::Read, 100, true), Ok(Acquire::Queued));
    let r2 = f.world.last_id();
    let (r3, _) = f.req_until("r3", Mode::Read, 100, 1_120);
    // The timer comes late, at 1200: the key is free, and every wait but r2's has ended.
    f.take_effects();
    f.world.now = 1_200;
    f.tick();
    // r1's wait ended at 1090, before h's lease (1100): it timed out. At 1100 the key went to
    // w, whose wait was still running; r3 then waited behind w until its wait ended at 1120.
    assert_eq!(f.timed_out_ids(), vec![r1, r3]);
    assert_eq!(f.woken_ids(), vec![w]);
    assert_eq!(f.queue(), vec![r2]);
    let effects = f.take_effects();
    assert_eq!(effects.len(), 2, "{effects:?}");
    assert!(dropped(&effects[0], "h"));
    assert!(granted_to(&effects[1], "w", 1_250));
}

#[test]
fn a_timed_out_writer_at_the_head_lets_the_readers_behind_it_in() {
    let mut f = Fixture::new();
    f.req("r0", Mode::Read, 1_000, false).unwrap();
    let (w, r) = f.req_until("w", Mode::Write, 100, 1_050);
    assert_eq!(r, Ok(Acquire::Queued));
    assert_eq!(f.req("r1", Mode::Read, 100, true), Ok(Acquire::Queued));
    let r1 = f.world.last_id();
    let (r2, r) = f.req_until("r2", Mode::Read, 100, 1_200);
    assert_eq!(r, Ok(Acquire::Queued));
    f.world.now = 1_050;
    f.tick();
    assert_eq!(f.timed_out_ids(), vec![w]);
    assert_eq!(f.woken_ids(), vec![r1, r2]);
    assert_eq!(f.lock.0.live_holders(f.world.now).count(), 3);
}

#[test]
fn any_operation_lets_time_pass_before_it_is_decided() {
    let mut f = Fixture::new();
    f.req("r0", Mode::Read, 1_000, false).unwrap();
    let (w, _) = f.req_until("w", Mode::Write, 100, 1_050);
    assert_eq!(f.req("r1", Mode::Read, 100, true), Ok(Acquire::Queued));
    let r1 = f.world.last_id();
    // No tick ran at 1050. A new reader at 1060 finds the writer's wait over and r1 served:
    // it is not queued behind a writer that is no longer there.
    f.world.now = 1_060;
    assert!(f.r("r2").is_some());
    assert_eq!(f.timed_out_ids(), vec![w]);
    assert_eq!(f.woken_ids(), vec![r1]);
}

#[test]
fn waits_that_end_together_end_in_arrival_order() {
    let mut f = Fixture::new();
    f.req("h", Mode::Write, 1_000, false).unwrap();
    let (x, _) = f.req_until("x", Mode::Write, 100, 1_050);
    let (y, _) = f.req_until("y", Mode::Read, 100, 1_050);
    let (z, _) = f.req_until("z", Mode::Read, 100, 1_040);
    f.world.now = 1_050;
    f.tick();
    assert_eq!(f.timed_out_ids(), vec![z, x, y]);
    assert!(f.queue().is_empty());
}

#[test]
fn an_upgrade_whose_wait_ends_lets_the_queue_move() {
    let mut f = Fixture::new();
    f.req("a", Mode::Read, 1_000, false).unwrap();
    f.req("b", Mode::Read, 1_000, false).unwrap();
    let (up, r) = f.req_until("a", Mode::Write, 100, 1_050);
    assert_eq!(r, Ok(Acquire::Queued));
    assert_eq!(f.req("x", Mode::Read, 100, true), Ok(Acquire::Queued));
    let x = f.world.last_id();
    f.world.now = 1_050;
    f.tick();
    assert_eq!(f.timed_out_ids(), vec![up]);
    assert_eq!(f.woken_ids(), vec![x]);
    // a still reads; its upgrade simply did not happen.
    assert_eq!(f.lock.0.mode(f.world.now), Some(Mode::Read));
    assert_eq!(f.lock.0.hold_of(b"a", f.world.now).unwrap().writes, 0);
}

#[test]
fn a_waiter_granted_before_its_wait_ends_is_not_timed_out_later() {
    let mut f = Fixture::new();
    f.req("h", Mode::Write, 100, false).unwrap();
    let (w, _) = f.req_until("w", Mode::Write, 500, 1_300);
    f.world.now = 1_100;
    f.tick();
    assert_eq!(f.woken_ids(), vec![w]);
    f.world.now = 1_400;
    f.tick();
    assert!(f.timed_out_ids().is_empty());
    assert!(!f.cancel(w));
}

#[test]
fn a_cancelled_waiter_is_neither_granted_nor_timed_out() {
    let mut f = Fixture::new();
    f.req("h", Mode::Write, 100, false).unwrap();
    let (w, _) = f.req_until("w", Mode::Write, 100, 1_050);
    let (v, _) = f.req_until("v", Mode::Write, 100, 2_000);
    assert!(f.cancel(w));
    assert!(!f.cancel(w));
    f.world.now = 1_100;
    f.tick();
    assert!(f.timed_out_ids().is_empty());
    assert_eq!(f.woken_ids(), vec![v]);
}

#[test]
fn the_next_wakeup_is_the_earliest_lease_or_wait_deadline() {
    let mut f = Fixture::new();
    f.req("h", Mode::Write, 100, false).unwrap();
    assert_eq!(f.world.next_wakeup(&f.lock.0), Some(1_100));
    assert_eq!(
        f.req_until("w", Mode::Write, 100, 1_080).1,
        Ok(Acquire::Queued)
    );
    assert_eq!(f.world.next_wakeup(&f.lock.0), Some(1_080));
    // A wait without a limit is no wake-up.
    f.req("v", Mode::Write, 100, true).unwrap();
    assert_eq!(f.world.next_wakeup(&f.lock.0), Some(1_080));
    f.world.now = 1_080;
    f.tick();
    assert_eq!(f.world.next_wakeup(&f.lock.0), Some(1_100));
}

#[test]
fn a_candidate_whose_wait_ends_as_the_leader_lapses_becomes_leader() {
    let mut world = World::at(1_000);
    let mut e = Election::default();
    let (_, r) = e.campaign(b"a", 100, None, 10, &mut world.env());
    assert!(matches!(r, Ok(Acquire::Granted(_))));
    let at_lapse = Some(Wait {
        id: 1,
        until: Some(1_100),
    });
    let before = Some(Wait {
        id: 2,
        until: Some(1_099),
    });
    assert_eq!(
        e.campaign(b"b", 100, at_lapse, 10, &mut world.env()).1,
        Ok(Acquire::Queued)
    );
    assert_eq!(
        e.campaign(b"c", 100, before, 10, &mut world.env()).1,
        Ok(Acquire::Queued)
    );
    world.now = 1_150;
    let c = e.tick(&mut world.env());
    assert_eq!(c.timed_out, vec![2]);
    assert_eq!(c.woken.len(), 1);
    assert_eq!(c.woken[0].waiter, 1);
    assert_eq!(e.current(world.now).unwrap().owner, b"b");
}

/// Every waiter that leaves the queue other than by cancel is answered exactly once: granted
/// or timed out.
#[test]
fn every_waiter_is_answered_exactly_once_over_its_life() {
    let mut f = Fixture::new();
    f.req("h", Mode::Write, 200, false).unwrap();
    let mut queued = vec![];
    for (i, until) in [1_050, 1_100, 1_150, 0, 1_300, 1_301, 0, 1_100]
        .iter()
        .enumerate()
    {
        let owner = format!("o{i}");
        let mode = if i % 3 == 0 { Mode::Write } else { Mode::Read };
        let (id, r) = if *until == 0 {
            let r = f.req(&owner, mode, 60, true);
            (f.world.last_id(), r)
        } else {
            f.req_until(&owner, mode, 60, *until)
        };
        assert_eq!(r, Ok(Acquire::Queued));
        queued.push(id);
    }
    let cancelled = queued[5];
    assert!(f.cancel(cancelled));
    let mut answers: HashMap<u64, usize> = HashMap::new();
    let (mut granted, mut timed_out) = (0, 0);
    for now in (1_000..=3_000).step_by(7) {
        f.world.now = now;
        f.tick();
        let (w, t) = (f.woken_ids(), f.timed_out_ids());
        granted += w.len();
        timed_out += t.len();
        for id in w.into_iter().chain(t) {
            *answers.entry(id).or_default() += 1;
        }
        // Waiters that were granted (60 ms leases) give their holds back after 20 ms.
        let owners: Vec<String> = f
            .lock
            .0
            .holders()
            .filter(|h| h.owner != b"h" && h.hold.deadline <= now + 40)
            .map(|h| String::from_utf8(h.owner.to_vec()).unwrap())
            .collect();
        for o in owners {
            f.unlock(&o);
        }
    }
    assert!(f.lock.0.is_empty(), "{:?}", f.lock.0);
    for id in &queued {
        let n = answers.get(id).copied().unwrap_or(0);
        let want = usize::from(*id != cancelled);
        assert_eq!(n, want, "waiter {id}: {answers:?}");
    }
    assert_eq!(answers.len(), queued.len() - 1);
    assert!(
        granted >= 2 && timed_out >= 2,
        "{granted} granted, {timed_out} timed out"
    );
}

/// Steps the wall clock alone by `ms` (the monotonic clock, on which waits are kept, does
/// not move).
fn step_wall(f: &mut Fixture, ms: i64) {
    f.world.now = f.world.now.saturating_add_signed(ms);
    f.world.wall_ahead += ms;
}

#[test]
fn a_step_of_the_wall_clock_back_does_not_lengthen_a_wait() {
    let mut f = Fixture::new();
    f.req("h", Mode::Write, 60_000, false).unwrap();
    // Waits until monotonic 1_500 (the clocks agree at first: the wall reads 1_000).
    let (id, r) = f.req_until("w", Mode::Write, 50, 1_500);
    assert_eq!(r, Ok(Acquire::Queued));
    step_wall(&mut f, -800);
    // The key is to be looked at when the wait ends, where that falls on the stepped clock.
    assert_eq!(f.world.next_wakeup(&f.lock.0), Some(1_500 - 800));
    f.world.now += 499;
    f.tick();
    assert!(f.timed_out_ids().is_empty(), "ended early");
    // 500 ms later on both clocks: the wait is over, although the wall clock reads only 700.
    f.world.now += 1;
    f.tick();
    assert_eq!(f.timed_out_ids(), vec![id]);
    // The holder's lease is absolute: it still runs (until wall 61_000).
    assert!(f.token_of("h").is_some());
}

#[test]
fn a_step_of_the_wall_clock_forward_does_not_cut_a_wait_short() {
    let mut f = Fixture::new();
    f.req("h", Mode::Write, 2_000, false).unwrap(); // lease ends at wall 3_000
    let (id, r) = f.req_until("w", Mode::Write, 50, 1_500);
    assert_eq!(r, Ok(Acquire::Queued));
    step_wall(&mut f, 1_900); // the wall reads 2_900, the monotonic clock 1_000
    f.tick();
    assert!(f.timed_out_ids().is_empty(), "ended early");
    // The wait ends at wall 3_400 now: the lease (wall 3_000) comes first.
    assert_eq!(f.world.next_wakeup(&f.lock.0), Some(3_000));
    // 100 ms on: the wait (monotonic 1_100 of 1_500) still runs when the lease lapses at wall
    // 3_000, so the waiter is served there.
    f.world.now += 100;
    f.tick();
    assert_eq!(f.woken_ids(), vec![id]);
}

#[test]
fn a_lapse_and_a_wait_are_ordered_by_where_the_wait_ends_on_the_wall_clock_now() {
    // The lease ends at wall 1_100; the wait at monotonic 1_300, which is wall 1_550 once the
    // wall clock stepped 250 ahead.
    let mut f = Fixture::new();
    f.req("h", Mode::Write, 100, false).unwrap();
    let (id, _) = f.req_until("w", Mode::Write, 50, 1_300);
    step_wall(&mut f, 250);
    f.world.now = 1_300 + 250 + 10; // both deadlines are past: wait at wall 1_550, lapse 1_100
    f.tick();
    // The lapse (wall 1_100) came before the wait's end (wall 1_550): served.
    assert_eq!(f.woken_ids(), vec![id]);

    let mut f = Fixture::new();
    f.req("h", Mode::Write, 500, false).unwrap(); // lapse at wall 1_500
    let (id, _) = f.req_until("w", Mode::Write, 50, 1_300);
    step_wall(&mut f, 150); // the wait now ends at wall 1_450
    f.world.now = 1_600;
    f.tick();
    // The wait ended (wall 1_450) before the lapse (wall 1_500): it timed out.
    assert_eq!(f.timed_out_ids(), vec![id]);
    assert!(f.woken_ids().is_empty());
}

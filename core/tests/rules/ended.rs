//! The holds an operation ends (`Changes::ended`): the owner's last hold, a resignation, a
//! lapse, each with how long it was held since its token was issued.

use redis_lease_core::{Effect, Election, Mode, Permits, RwLock, Semaphore};

use super::harness::{granted, id, request, World};

#[test]
fn a_hold_ends_at_its_last_release_with_its_time_held() {
    let mut w = World::at(1_000);
    let mut l = RwLock::default();
    let (c, r) = l.lock(&request("a", Mode::Read, 5_000, None, 10), &mut w.env());
    granted(r).unwrap();
    assert!(c.ended.is_empty(), "a grant ends nothing");
    let _ = l.lock(&request("a", Mode::Read, 5_000, None, 10), &mut w.env());
    w.now = 1_250;
    let (c, _) = l.unlock("a", &mut w.env());
    assert!(c.ended.is_empty(), "a reentrant hold still holds");
    w.now = 1_400;
    let (c, _) = l.unlock("a", &mut w.env());
    assert_eq!(c.ended.len(), 1);
    assert_eq!(c.ended[0].held_ms, 400);
    assert!(matches!(
        c.effects[c.ended[0].effect as usize],
        Effect::Release { .. }
    ));
    let (c, done) = l.unlock("a", &mut w.env());
    assert!(!done && c.ended.is_empty(), "nothing held, nothing ends");
}

#[test]
fn a_lapse_ends_the_hold_and_the_index_names_its_drop_among_the_grants() {
    let mut w = World::at(1_000);
    let mut l = RwLock::default();
    let _ = l.lock(&request("a", Mode::Write, 300, None, 10), &mut w.env());
    let waiter = w.next_id();
    let (_, r) = l.lock(
        &request("b", Mode::Write, 300, Some(waiter), 10),
        &mut w.env(),
    );
    assert!(granted(r).is_none());
    w.now = 2_000;
    let c = l.tick(&mut w.env());
    // a lapsed at 1300; the tick that sees it counts its hold up to now, and grants b.
    assert_eq!(c.ended.len(), 1, "{c:?}");
    assert_eq!(c.ended[0].held_ms, 1_000);
    assert!(matches!(
        c.effects[c.ended[0].effect as usize],
        Effect::Drop { .. }
    ));
    // Appended changes keep each index pointing at its own effect.
    let mut all = c;
    w.now = 2_400;
    let (more, _) = l.lock(&request("c", Mode::Read, 300, None, 10), &mut w.env());
    all.append(more);
    assert_eq!(all.ended.len(), 2, "{all:?}");
    let drop = &all.effects[all.ended[1].effect as usize];
    assert_eq!(drop.owner(), Some(id("b")), "{all:?}");
    assert_eq!(all.ended[1].held_ms, 400);
}

#[test]
fn a_resignation_and_a_semaphore_release_end_holds() {
    let mut w = World::at(5_000);
    let mut e = Election::default();
    let _ = e.campaign(id("l"), 1_000, None, 10, &mut w.env());
    w.now = 5_100;
    let (c, _) = e.resign(id("l"), &mut w.env());
    assert_eq!(c.ended.len(), 1);
    assert_eq!(c.ended[0].held_ms, 100);

    let mut s = Semaphore::default();
    let req = Permits {
        owner: id("o"),
        limit: 3,
        permits: 2,
        ttl: 1_000,
        wait: None,
        max_waiters: 10,
        max_hold: 0,
    };
    let _ = s.acquire(&req, &mut w.env());
    w.now = 5_150;
    let (c, _) = s.release(id("o"), &mut w.env());
    assert_eq!(c.ended.len(), 1, "every permit goes at once");
    assert_eq!(c.ended[0].held_ms, 50);
}

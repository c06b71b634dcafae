//! Waiters whose key just left the keyspace. Why it left decides what they are told, and that
//! is known only after the value's unlink callback: an eviction is announced right after it
//! (the waiters then wait in the lobby until the evicted leases would have lapsed), a
//! reload (`DEBUG RELOAD`) brings the key back (they queue in it again), anything else (DEL,
//! FLUSHALL, RENAME, MOVE, expiry, overwrite) answers them LOCKGONE, at the timer's next turn.

use std::cell::RefCell;

use redis_lease_core::{Kind, Ms, Waiter};

use crate::clock::now_ms;
use crate::registry::Orphans;
use crate::{schedule, state, waiters};

/// The last key unlinked with live leases or waiters, for an eviction announced next.
#[derive(Debug)]
pub struct Unlinked {
    pub db: i32,
    pub name: Box<[u8]>,
    /// Its last lease deadline, if still to come.
    pub until: Option<Ms>,
    pub kind: Kind,
    pub limit: u32,
}

thread_local! {
    static LAST: RefCell<Option<Unlinked>> = const { RefCell::new(None) };
}

/// A key with live leases or waiters left the keyspace.
pub fn unlinked(o: Orphans, until: Option<Ms>, kind: Kind, limit: u32) {
    let u = Unlinked {
        db: o.db,
        name: o.name.clone(),
        until,
        kind,
        limit,
    };
    LAST.with(|l| *l.borrow_mut() = Some(u));
    add_group(o);
}

/// The unlinked key, if it is `name` in `db` (taken: asked once, by the eviction event).
pub fn take_unlinked(db: i32, name: &[u8]) -> Option<Unlinked> {
    LAST.with(|l| {
        let mut l = l.borrow_mut();
        let hit = l.as_ref().is_some_and(|u| u.db == db && *u.name == *name);
        if hit {
            l.take()
        } else {
            None
        }
    })
}

/// Waiters of a key that went away (at `place`, if known): answered LOCKGONE at the timer's
/// next turn.
pub fn add(place: Option<(i32, Box<[u8]>)>, w: Vec<Waiter>) {
    let (db, name) = place.unwrap_or((-1, Box::default()));
    add_group(Orphans {
        db,
        name,
        waiters: w,
        flushed: None,
    });
}

/// Waiters taken out of a key of `kind` by a flush: they queue again if a reload brings the
/// key back (else LOCKGONE at the timer's next turn).
pub fn flushed(db: i32, name: Box<[u8]>, kind: Kind, w: Vec<Waiter>) {
    add_group(Orphans {
        db,
        name,
        waiters: w,
        flushed: Some(kind),
    });
}

fn add_group(o: Orphans) {
    if o.waiters.is_empty() {
        return;
    }
    state::with(move |s| s.waiters.add_orphans(o));
    schedule::arm(now_ms());
}

/// The orphans of `name` in `db` (to park them elsewhere).
pub fn take(db: i32, name: &[u8]) -> Option<Orphans> {
    let name: Box<[u8]> = name.into();
    state::with(move |s| s.waiters.take_orphans_of(db, &name))
}

/// Every orphan group.
pub fn take_all() -> Vec<Orphans> {
    state::with(|s| s.waiters.take_orphans())
}

/// Answers every orphan LOCKGONE.
pub fn answer_gone() {
    for o in take_all() {
        for w in o.waiters {
            waiters::answer(w.id, waiters::Answer::Gone);
        }
    }
}

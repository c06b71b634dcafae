//! The module's one timer: at each key's next wake-up it prunes lapsed leases, ends waits that
//! ran out and hands the key to its waiters; it also takes departed waiters out of their
//! queues, answers the waiters of keys that went away, and opens lobbies when grants open. On
//! a replica it changes nothing (its master's effects arrive); the schedule waits for a
//! promotion, which wakes it.

use std::collections::HashSet;

use crate::clock::now_ms;
use crate::commit::{decide, Open, Origin};
use crate::ffi::ctx::Ctx;
use crate::ffi::key::{Key, Typed};
use crate::ffi::string::RString;
use crate::ffi::{guard, replicate, timer};
use crate::index::Slot;
use crate::value::{Saved, Stored};
use crate::visit::{visit, Visitor};
use crate::wire::{self, Record, Word};
use crate::{orphans, reopen, schedule, state, waiters};

/// While a failover pauses writes (`CLIENT PAUSE WRITE`, `FAILOVER`), background writes must
/// wait: look again this much later.
const PAUSED_RETRY_MS: u64 = 10;

/// Most keys one timer turn handles before it yields to the event loop (and fires again at
/// once), so a burst of lapses cannot stall the server.
const KEYS_PER_TURN: usize = 10_000;

pub fn fire(ctx: &Ctx) {
    schedule::fired();
    guard::injected("the timer's turn");
    if timer::avoid_replica_traffic() {
        schedule::arm(now_ms() + PAUSED_RETRY_MS);
        return;
    }
    if !ctx.is_master() {
        return;
    }
    let now = now_ms();
    if !ctx.loading() {
        orphans::answer_gone();
        high_water(ctx);
    }
    // Each key under its own guard: a bug on one key does not stop the others, and the
    // timer is armed again whatever happened.
    for (slot, id) in waiters::take_cancels() {
        guard::callback("a waiter's departure", || on_slot(ctx, slot, Some(id)));
    }
    let mut handled = 0;
    // A key looked at once per turn: one that is due again at once (a multi-key request it
    // reported ready at its deadline, which the drain below settles) waits for the next
    // turn, so no key can keep the timer in its loop.
    let mut seen: HashSet<Slot, foldhash::fast::RandomState> = HashSet::default();
    let mut again: Vec<Slot> = Vec::new();
    while handled < KEYS_PER_TURN {
        let Some(slot) = schedule::pop_due(now) else {
            break;
        };
        if !seen.insert(slot) {
            again.push(slot);
            continue;
        }
        guard::callback("a key's wake-up", || on_slot(ctx, slot, None));
        handled += 1;
    }
    guard::callback("multi-key grants", || crate::commands::multi::drain(ctx));
    for slot in again {
        schedule::set(slot, Some(now));
    }
    let next = if handled == KEYS_PER_TURN {
        Some(now)
    } else {
        schedule::first_due()
    };
    if let Some(at) = next {
        schedule::arm(at);
    }
}

/// Writes the token high-water mark to the AOF and replicas when it is due (an AOF rewrite
/// with no lock key to carry it): `LEASE.APPLY lease:high rwlock HIGH n`, which makes no key.
fn high_water(ctx: &Ctx) {
    let high = state::with(|s| std::mem::take(&mut s.high_due).then_some(s.tokens.high_water()));
    if let Some(high) = high {
        let key = RString::from_bytes(wire::HIGH_KEY);
        replicate::records(ctx, key.as_str(), Word::RwLock, &[Record::High(high)]);
    }
}

struct Tick {
    slot: Slot,
    cancel: Option<u64>,
}

impl Visitor for Tick {
    fn visit<K: Saved>(self, mut key: Key)
    where
        Stored<K>: Typed,
    {
        let Ok(Some(v)) = key.value::<Stored<K>>() else {
            return;
        };
        if v.slot != self.slot {
            if v.slot.is_none() {
                v.slot = self.slot;
            } else if self.cancel.is_none() {
                // A stale entry naming a key that has its own.
                schedule::detach(self.slot);
            }
        }
        let cancel = self.cancel;
        let origin = Origin::Here {
            owner: None,
            own: false,
        };
        let _ = decide::<K, ()>(key, Open::Existing, origin, |v, env| match cancel {
            Some(id) => (v.core.cancel(id, env).0, ()),
            None => (v.core.tick(env), ()),
        });
    }
}

/// Looks at the key of `slot`: ticks it (or takes departed waiter `cancel` out), or opens its
/// lobby, or drops an entry whose key is gone.
fn on_slot(ctx: &Ctx, slot: Slot, cancel: Option<u64>) {
    let Some((db, name)) = schedule::place(slot) else {
        return;
    };
    if visit(ctx, db, &name, Tick { slot, cancel }).is_ok() {
        return;
    }
    let lobby = crate::holdback::lobby_slot(db, &name) == Some(slot);
    if lobby {
        // The name's held-back state: a wait ran out, a waiter left, or grants opened.
        reopen::release(ctx, db, &name);
    } else if cancel.is_none() {
        // No key and no lobby: a stale entry (its key went by a route that did not say so).
        schedule::detach(slot);
    }
}

//! Server events and keyspace notifications: a flush takes the waiters of the flushed keys
//! (answered LOCKGONE, unless a reload brings the keys back); SWAPDB moves the index with the
//! dbs; a promotion starts the quarantine and wakes the timer; a demotion sends the waiters
//! away and empties the queues; loading ends the quarantine's wait for data; a key renamed or
//! moved gets its index entry at its new place; an eviction of live leases holds back new
//! grants on the key until they would have lapsed.

use crate::clock::now_ms;
use crate::commit::{ensure_slot, requeue};
use crate::ffi::ctx::{log_warning, Ctx};
use crate::ffi::key::{Key, Typed};
use crate::ffi::server::{Handlers, Loading};
use crate::ffi::string::RStr;
use crate::ffi::{replicate, server};
use crate::index::Slot;
use crate::registry::Orphans;
use crate::value::{Saved, Stored};
use crate::visit::{visit, Visitor};
use crate::wire::{Record, Word};
use crate::{holdback, orphans, schedule, state, text, waiters};

pub fn handlers() -> Handlers {
    Handlers {
        flush,
        swapdb,
        role,
        loading,
        generic,
        evicted,
        cron,
        turn,
        forked,
    }
}

/// The cron: the stall check runs even when no command comes.
fn cron(ctx: &Ctx, hz: i32) {
    let now = server::monotonic_ms();
    let master = ctx.is_master();
    let stall = state::with(move |s| {
        s.master = master;
        s.stall_after = holdback::stall_after(hz);
        holdback::ran(s, now)
    });
    if let Some(gap) = stall {
        holdback::stalled(gap);
    }
    crate::floor::tick(ctx, now);
    if master && !ctx.loading() {
        schedule::keep_armed();
    }
}

/// Each turn of the event loop (before it sleeps, after it wakes): the server runs now, so a
/// stall is measured from the last moment it ran, not from the last cron tick (a command that
/// blocks the server for less than the bound is no stall). A step of the wall clock is seen
/// here too: every key with waiters is looked at again, so no wait outlasts its deadline.
fn turn(_ctx: &Ctx) {
    let now = server::monotonic_ms();
    if let Some(gap) = state::with(move |s| holdback::ran(s, now)) {
        holdback::stalled(gap);
    }
    if schedule::wall_stepped(now_ms(), now) {
        waiters::look_again();
    }
    if state::ready_pending() {
        // Multi-key requests reported ready by a path that does not drain (a server event, a
        // load): the timer grants them (one load here; commands and the timer drain before
        // they return, so nothing is pending in the common case).
        schedule::arm(now_ms());
    }
}

/// A child was forked. If it rewrites the AOF while no lock key exists, the rewritten file
/// has no record carrying the token high-water mark (without an RDB preamble): the timer
/// writes one to the new incremental file, so a restart never hands out a lower token.
fn forked(ctx: &Ctx) {
    if !ctx.aof_on() || !ctx.is_master() || state::keys() > 0 {
        return;
    }
    let due = state::with(|s| {
        s.high_due = s.tokens.high_water() > 0;
        s.high_due
    });
    if due {
        schedule::arm(now_ms());
    }
}

/// Takes the waiters out of a key about to be flushed, and drops its index entry.
struct Flushed;

impl Visitor for Flushed {
    fn visit<K: Saved>(self, mut key: Key)
    where
        Stored<K>: Typed,
    {
        let db = key.ctx().db();
        let name: Box<[u8]> = key.name().bytes().into();
        let Ok(Some(v)) = key.value::<Stored<K>>() else {
            return;
        };
        schedule::detach(std::mem::replace(&mut v.slot, Slot::NONE));
        let waiting = v.core.lock_mut().take_waiters();
        orphans::flushed(db, name, K::KIND, waiting);
    }
}

fn flush(ctx: &Ctx, db: Option<i32>) {
    // Only keys with waiters are opened (their waiters are taken); every other entry of the
    // flushed db(s) just goes. Lobbies stay: their names have no key to flush.
    let selected = ctx.db();
    for slot in waiters::slots() {
        if let Some((d, name)) = schedule::place(slot) {
            if db.is_none_or(|db| db == d) {
                let _ = visit(ctx, d, &name, Flushed);
            }
        }
    }
    ctx.select_db(selected);
    for slot in state::with(move |s| s.index.slots_in(db)) {
        let lobby = schedule::place(slot)
            .is_some_and(|(d, name)| holdback::lobby_slot(d, &name) == Some(slot));
        if !lobby {
            schedule::detach(slot);
        }
    }
}

fn swapdb(a: i32, b: i32) {
    state::with(move |s| {
        s.index.swap_dbs(a, b);
        s.waiters.swap_dbs(a, b);
        let moved: Vec<_> = s.evicted.drain().collect();
        for ((db, name), e) in moved {
            let db = if db == a {
                b
            } else if db == b {
                a
            } else {
                db
            };
            s.evicted.insert((db, name), e);
        }
    });
    holdback::swap_dbs(a, b);
}

/// Sends a key's waiters away on a demotion (only the new master can grant).
struct Demoted;

impl Visitor for Demoted {
    fn visit<K: Saved>(self, mut key: Key)
    where
        Stored<K>: Typed,
    {
        if let Ok(Some(v)) = key.value::<Stored<K>>() {
            for w in v.core.lock_mut().take_waiters() {
                waiters::answer(w.id, waiters::Answer::Demoted);
            }
        }
    }
}

fn role(ctx: &Ctx, master: bool) {
    holdback::set_master(master);
    if master {
        holdback::start_quarantine();
        schedule::arm(now_ms());
        return;
    }
    // Redis has already unblocked its blocked clients (they left); empty the queues, which
    // are this server's own (a replica's keys must equal its master's), and the lobbies.
    let selected = ctx.db();
    let slots = waiters::slots();
    waiters::take_cancels();
    for slot in slots {
        if let Some((db, name)) = schedule::place(slot) {
            let _ = visit(ctx, db, &name, Demoted);
        }
    }
    for (slot, ids) in holdback::clear() {
        schedule::detach(slot);
        for id in ids {
            waiters::answer(id, waiters::Answer::Demoted);
        }
    }
    for id in waiters::all() {
        waiters::answer(id, waiters::Answer::Demoted);
    }
    ctx.select_db(selected);
}

/// Puts reloaded keys' waiters back in their queues.
struct Reattach(Orphans);

impl Visitor for Reattach {
    fn visit<K: Saved>(self, key: Key)
    where
        Stored<K>: Typed,
    {
        if self.0.flushed == Some(K::KIND) {
            requeue::<K>(key, self.0.waiters);
        } else {
            // The name came back as a key of another kind: their lock is gone.
            for w in self.0.waiters {
                waiters::answer(w.id, waiters::Answer::Gone);
            }
        }
    }
}

fn loading(ctx: &Ctx, what: Loading) {
    if what != Loading::Ended {
        return;
    }
    // A reload (DEBUG RELOAD) flushed and loaded again: waiters whose key came back wait on.
    // Waiters of a key deleted before it (in the same turn, not answered yet) are not taken
    // back: they get their LOCKGONE.
    let selected = ctx.db();
    for o in orphans::take_all() {
        let (db, name) = (o.db, o.name.clone());
        if o.flushed.is_none() {
            orphans::add(Some((db, name)), o.waiters);
            continue;
        }
        if let Err(Reattach(o)) = visit(ctx, db, &name, Reattach(o)) {
            orphans::add(Some((db, name)), o.waiters);
        }
    }
    ctx.select_db(selected);
    if ctx.is_master() {
        holdback::start_quarantine();
    }
    schedule::arm(now_ms());
}

/// A renamed or moved key gets its index entry at its new place (its waiters were answered
/// LOCKGONE when it left the old one).
struct Moved;

impl Visitor for Moved {
    fn visit<K: Saved>(self, mut key: Key)
    where
        Stored<K>: Typed,
    {
        let db = key.ctx().db();
        let name = key.name().bytes();
        let Ok(Some(v)) = key.value::<Stored<K>>() else {
            return;
        };
        if !v.slot.is_none() && schedule::place(v.slot).is_some() {
            schedule::relocate(v.slot, db, name);
        } else {
            ensure_slot(v, db, name);
        }
        // At a held-back name, the key takes the lobby's waiters in at once (the timer's
        // turn goes through the commit path).
        let when = match holdback::lobby_slot(db, name) {
            Some(_) => Some(now_ms()),
            None => schedule::wakeup_of(v.core.lock()),
        };
        schedule::set(v.slot, when);
    }
}

fn generic(ctx: &Ctx, event: &[u8], key: RStr) {
    if event != b"rename_to" && event != b"move_to" {
        return;
    }
    let db = ctx.db();
    let _ = visit(ctx, db, key.bytes(), Moved);
}

fn evicted(ctx: &Ctx, key: RStr) {
    let db = ctx.db();
    let name = key.bytes();
    let Some(u) = orphans::take_unlinked(db, name) else {
        return;
    };
    if let Some(until) = u.until {
        log_warning(&format!(
            "lease: maxmemory evicted '{}' while its leases run until {until}; new grants on \
             it are held back until then (use a volatile-* maxmemory-policy: lock keys have \
             no TTL, so those never evict them)",
            text::escaped(name, 128)
        ));
        holdback::evicted(db, name, until, true);
        // Replicas (and the AOF) hold back too: a promoted replica must not let a second
        // holder in while the evicted lease runs.
        replicate::records(ctx, key, Word::of_kind(u.kind), &[Record::Evicted(until)]);
    }
    // Its waiters wait on, in the lobby, until grants open on it again.
    if let Some(o) = orphans::take(db, name) {
        holdback::park_waiters(db, name, u.kind, u.limit, o.waiters);
    }
}

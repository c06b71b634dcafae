//! When the module looks at a key again: every key of its types has an entry in the key index
//! with its next wake-up (its first lease deadline or its first wait deadline), and one shared
//! Redis timer is armed for the earliest of all. The timer's entry point (`crate::timer`)
//! registers itself here when the module loads.

use std::sync::OnceLock;

use redis_lease_core::{Lock, Mono, Ms};

use crate::clock::now_ms;
use crate::ffi::ctx::Ctx;
use crate::ffi::server::monotonic_ms;
use crate::ffi::timer;
use crate::index::{Place, Slot};
use crate::state;

static FIRE: OnceLock<fn(&Ctx)> = OnceLock::new();

/// The function the timer runs (once, while the module loads).
pub fn init(fire: fn(&Ctx)) {
    let _ = FIRE.set(fire);
}

/// The longest single timer; a later wake-up re-arms when it fires. (A far deadline must not
/// overflow Redis's timer arithmetic, ms * 1000 in a 64-bit µs clock.)
const MAX_TIMER_MS: u64 = 60_000;

/// The monotonic clock the core's wait deadlines are kept on.
pub static MONO: fn() -> Ms = monotonic_ms;

/// The monotonic clock for one core operation (read only if a wait deadline is looked at).
pub fn mono() -> Mono<'static> {
    Mono::read(&MONO)
}

/// When (wall-clock ms) the timer must look at `lock` again: its first lease deadline or its
/// first wait deadline, whichever comes first.
pub fn wakeup_of(lock: &Lock) -> Option<Ms> {
    lock.next_wakeup(|until| mono().to_wall(until, now_ms()))
}

/// The least step of the wall clock against the monotonic one (either way) that moves the
/// wait deadlines' places on the wall clock enough to look at their keys again. A clock that
/// NTP slews moves far less between two turns of the event loop.
const STEP_MS: i64 = 50;

/// Notes both clocks at a turn of the event loop; true if the wall clock stepped since the
/// last turn. A key's wake-up is on the wall clock, its waits' deadlines on the monotonic
/// one: after a step back, a wake-up set for a wait would come late.
pub fn wall_stepped(wall: Ms, mono: Ms) -> bool {
    let ahead = (wall as i64).wrapping_sub(mono as i64);
    state::with(move |s| {
        let last = s.wall_ahead.replace(ahead);
        last.is_some_and(|l| ahead.wrapping_sub(l).abs() > STEP_MS)
    })
}

/// Makes sure the timer fires no later than `at`, with one Redis timer at most: a timer
/// that is replaced is stopped first. (Every timer's turn arms the next; two timers alive
/// would stay two for good, and each extra one makes every `CreateTimer` walk past it.)
pub fn arm(at: Ms) {
    let Some(fire) = FIRE.get().copied() else {
        return;
    };
    let now = now_ms();
    let recorded = state::with(|s| s.timer);
    match recorded {
        // Due in time. One already overdue has most likely not fired yet (after a stall, or
        // inside a long command): it fires at the next turn, so it stays too, unless Redis no
        // longer holds it (its turn ended before it armed the next).
        Some((id, when)) if when <= at && (when > now || timer::alive(id)) => return,
        Some((id, when)) if when > at => timer::stop(id),
        _ => {}
    }
    let period = at.saturating_sub(now).min(MAX_TIMER_MS);
    let id = timer::create(period, fire);
    state::with(|s| s.timer = id.map(|id| (id, at)));
}

/// The timer fired: it is no longer armed. (Its turn's first step: Redis still holds a
/// firing timer, so it must not be stopped from its own turn.)
pub fn fired() {
    state::with(|s| s.timer = None);
}

/// Arms the timer if something is due and no timer is left (a timer's turn that failed after
/// its first step armed no next one): the cron calls it, so a due lapse or wait does not wait
/// for the next command.
pub fn keep_armed() {
    if timer::live() == 0 {
        if let Some(at) = first_due() {
            arm(at);
        }
    }
}

/// A new index entry for the key `name` in `db`.
pub fn attach(db: i32, name: &[u8]) -> Slot {
    state::with(|s| s.index.attach(db, name))
}

/// Drops a key's entry (it left the keyspace).
pub fn detach(slot: Slot) -> bool {
    state::with(|s| s.index.detach(slot))
}

/// Whether `slot` is the live entry of `name` in `db`.
pub fn is_at(slot: Slot, db: i32, name: &[u8]) -> bool {
    state::with(|s| s.index.is_at(slot, db, name))
}

/// Where `slot`'s key is, as owned data.
pub fn place(slot: Slot) -> Option<(i32, Box<[u8]>)> {
    state::with(|s| s.index.place(slot).map(|p: Place| (p.db, p.name.into())))
}

/// Where `slot`'s key is: its db, and its name copied into `name` (no allocation for a short
/// name).
pub fn place_into(slot: Slot, name: &mut smallvec::SmallVec<[u8; 64]>) -> Option<i32> {
    name.clear();
    state::with(|s| {
        s.index.place(slot).map(|p: Place| {
            name.extend_from_slice(p.name);
            p.db
        })
    })
}

/// The key moved (RENAME, MOVE).
pub fn relocate(slot: Slot, db: i32, name: &[u8]) {
    state::with(|s| s.index.relocate(slot, db, name));
}

/// Makes the timer look at `slot`'s key at `when` (`None`: not at all).
pub fn set(slot: Slot, when: Option<Ms>) {
    // The timer is re-armed only if it would fire too late for `when` (or is overdue: see
    // `arm`). The time the running command read is recent enough to tell.
    let now = crate::clock::recent_ms();
    let earlier = state::with(move |s| {
        s.index.schedule(slot, when);
        when.filter(|at| s.timer.is_none_or(|(_, t)| *at < t || t < now))
    });
    if let Some(at) = earlier {
        arm(at);
    }
}

/// The next entry due at or before `now`.
pub fn pop_due(now: Ms) -> Option<Slot> {
    state::with(|s| s.index.pop_due(now))
}

/// The earliest wake-up scheduled.
pub fn first_due() -> Option<Ms> {
    state::with(|s| s.index.first_due())
}

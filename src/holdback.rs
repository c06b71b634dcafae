//! When new grants are held back, and where waiters wait meanwhile.
//!
//! - **Quarantine** (`lease.quarantine`): after this server becomes a master, and after it
//!   loads its data, it makes no new grant for that long: the old master (or this server before
//!   a crash) may have granted leases this one never saw, and they lapse by then.
//! - **Stalls**: a master that did not run for a while (SIGSTOP, a paused VM, a long blocking
//!   command, a forward clock step) may have been replaced meanwhile, and the old master's
//!   clients may reach it again before it learns so: it quarantines again as it resumes, so
//!   that it makes no grant beside a promoted replica.
//! - **Evicted leases**: when maxmemory eviction removes a key whose leases are still running,
//!   new grants on that name wait until those leases would have lapsed.
//!
//! Holds that exist keep working. A name whose key has nothing left to hold it (no holder)
//! but has waiters keeps its core state in the lobby, outside the keyspace, so that the
//! keyspace stays what replicas and the AOF see: the same core `Lock` (kind, limit, queue),
//! with grants closed, so requests meet the same rules there as with the key present. When
//! grants open again it becomes the key and serves its waiters in arrival order; a key that
//! arrives at the name meanwhile takes them in (`commit::decide`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use redis_lease_core::{Grants, Kind, Lock, Ms, Waiter};

use crate::clock::now_ms;
use crate::ffi::ctx::log_warning;
use crate::ffi::server::monotonic_ms;
use crate::index::Slot;
use crate::state::{self, Evicted, Shell};
use crate::{config, schedule, waiters};

/// The held-back state of a name that has no key now: the core's state of the name (no
/// holder, its waiters in arrival order, its kind and a semaphore's limit), whose grants stay
/// closed until they open again; then it becomes the key.
#[derive(Debug)]
pub struct Lobby {
    pub slot: Slot,
    pub kind: Kind,
    pub lock: Lock,
}

/// Lobbies by db, then by name.
type Lobbies = HashMap<i32, HashMap<Box<[u8]>, Lobby>>;

thread_local! {
    static LOBBY: std::cell::RefCell<Lobbies> = std::cell::RefCell::new(HashMap::new());
}

/// As `state::with`, for the lobbies (a cell of their own: a lobby borrow may look up the
/// waiter registry).
fn with_lobby<T>(f: impl FnOnce(&mut Lobbies) -> T + Send) -> T {
    LOBBY.with(|l| {
        let mut l = l.borrow_mut();
        let out = f(&mut l);
        IN_LOBBY.store(l.len(), Ordering::Relaxed);
        out
    })
}

/// How many dbs have lobbies: lets the common case (none) skip the lobby without a look.
static IN_LOBBY: AtomicUsize = AtomicUsize::new(0);

fn no_lobby() -> bool {
    IN_LOBBY.load(Ordering::Relaxed) == 0
}

/// Until when (wall-clock ms) grants on `name` in `db` are held back (`None`: they are open
/// now). The quarantine is a local duration, kept on the monotonic clock so that no step of
/// the wall clock lengthens or revives it; an evicted lease's end is absolute, as leases are.
pub fn held_until(db: i32, name: &[u8]) -> Option<Ms> {
    let (wall, mono) = (now_ms(), monotonic_ms());
    let floor = crate::floor::held_until(name, wall);
    let name: Box<[u8]> = name.into();
    state::with(move |s| {
        let q = s.quarantine_until.saturating_sub(mono);
        let mut until = (q > 0).then(|| wall.saturating_add(q));
        until = until.max(floor);
        if !s.evicted.is_empty() {
            if let Some(e) = s.evicted.get(&(db, name)) {
                if e.until > wall {
                    until = Some(until.map_or(e.until, |u: Ms| u.max(e.until)));
                }
            }
        }
        until
    })
}

/// Whether new grants may be made on `name` in `db` now.
pub fn grants(db: i32, name: &[u8]) -> Grants {
    // The common case costs two loads and no allocation.
    let mono = monotonic_ms();
    let quiet = state::with(move |s| {
        if s.quarantine_until != 0 && s.quarantine_until <= mono {
            // Ended: the hot path's check (`quarantine_until == 0`) needs no clock.
            s.quarantine_until = 0;
        }
        s.quarantine_until == 0 && s.evicted.is_empty()
    });
    if crate::floor::holds(name) {
        return Grants::Held;
    }
    if quiet || held_until(db, name).is_none() {
        Grants::Open
    } else {
        Grants::Held
    }
}

/// Starts a quarantine of `lease.quarantine` ms from now (if it is set).
pub fn start_quarantine() {
    let q = config::quarantine_ms();
    if q == 0 {
        return;
    }
    let now = monotonic_ms();
    let until = now.saturating_add(q);
    state::with(move |s| {
        if until > s.quarantine_until {
            s.quarantine_until = until;
            s.quarantine_since = now;
        }
    });
    schedule::arm(now_ms().saturating_add(q));
}

/// `CONFIG SET lease.quarantine`: a running quarantine lasts the new setting from its start
/// (longer or shorter; 0 ends it now). Every name with waiters (keys and lobbies) is looked at
/// again at once, so its waiters are served by the rules as they are now and its next wake-up
/// is set again from its own deadlines and the new end.
pub fn quarantine_set() {
    let q = config::quarantine_ms();
    let now = monotonic_ms();
    let running = state::with(move |s| {
        if s.quarantine_until <= now {
            return false;
        }
        s.quarantine_until = s.quarantine_since.saturating_add(q).max(now);
        true
    });
    if running {
        waiters::look_again();
    }
}

/// When grants on `name` in `db` open again, if they are held back now: a key's waiters are
/// looked at then too, not only at their deadlines and its leases' ends. Cheap when nothing is
/// held back.
pub fn opens_at(db: i32, name: &[u8]) -> Option<Ms> {
    let quiet = state::with(|s| s.quarantine_until == 0 && s.evicted.is_empty());
    if quiet {
        None
    } else {
        held_until(db, name)
    }
}

/// The shortest gap that counts as a stall.
pub const STALL_FLOOR_MS: Ms = 1000;

/// The stall bound for a server whose cron runs `hz` times a second: a second, or three cron
/// periods on a server with a slower cron, so an idle server never looks stalled.
pub fn stall_after(hz: i32) -> Ms {
    STALL_FLOOR_MS.max(3000 / u64::try_from(hz.max(1)).unwrap_or(1))
}

/// The server runs at `now` (monotonic ms: a turn of the event loop, a cron tick or a
/// command): the gap since it last ran if that is a stall on a master. Cheap: the hot path
/// calls it with the state already borrowed.
pub fn ran(s: &mut Shell, now: Ms) -> Option<Ms> {
    let last = s.last_ran;
    s.last_ran = now.max(last);
    let gap = now.saturating_sub(last);
    if last == 0 || gap <= s.stall_after.max(STALL_FLOOR_MS) || !s.master {
        return None;
    }
    s.stats.stalls += 1;
    Some(gap)
}

/// A master resumed after a stall of `gap` ms: quarantine again (if one is configured).
pub fn stalled(gap: Ms) {
    let q = config::quarantine_ms();
    if q == 0 {
        return;
    }
    log_warning(&format!(
        "lease: the server did not run for {gap} ms (stopped, paused or blocked): a replica may \
         have been promoted meanwhile; no new grants for lease.quarantine ({q} ms)"
    ));
    start_quarantine();
}

/// How far apart two sightings of the server on the wall clock make a request check the
/// monotonic clock for a stall before it is decided.
const SUSPECT_MS: Ms = STALL_FLOOR_MS / 2;

/// A request at wall-clock `now`: whether the gap since the last request (or a backward step,
/// or there being no last request) calls for the monotonic check ([`ran`]) before it is
/// decided: after an idle time (cheap:
/// the event loop's last turn is then recent, no stall), after a stall inside a batch of
/// commands (which the event loop's turns do not see until the batch ends), or after a step of
/// the clock. Back-to-back requests read no second clock.
pub fn suspect(s: &mut Shell, now: Ms) -> bool {
    let last = std::mem::replace(&mut s.last_wall, now);
    // The first request since the module loaded has nothing to compare with: it checks.
    last == 0 || now < last || now - last > SUSPECT_MS
}

/// This server's role (kept for the hot path's stall check).
pub fn set_master(master: bool) {
    state::with(move |s| s.master = master);
}

/// Ms of quarantine left.
pub fn quarantine_left() -> u64 {
    let now = monotonic_ms();
    state::with(move |s| s.quarantine_until.saturating_sub(now))
}

/// A key whose leases run until `until` was evicted: hold back new grants on it until then.
/// `here`: this server evicted it (not its master, or a file it loaded).
pub fn evicted(db: i32, name: &[u8], until: Ms, here: bool) {
    let name: Box<[u8]> = name.into();
    state::with(move |s| {
        let now = now_ms();
        s.evicted.retain(|_, e| e.until > now);
        let e = s.evicted.entry((db, name)).or_insert(Evicted { until });
        e.until = e.until.max(until);
        s.stats.evictions += u64::from(here);
    });
    schedule::arm(until);
}

/// The hold-backs of evicted leases still running at `now` (to save them).
pub fn evicted_now(now: Ms) -> Vec<(i32, Box<[u8]>, Ms)> {
    state::with(move |s| {
        s.evicted
            .iter()
            .filter(|(_, e)| e.until > now)
            .map(|((db, name), e)| (*db, name.clone(), e.until))
            .collect()
    })
}

/// Parks the held-back state of a key that has no holder left while grants are held (or of
/// an evicted key's waiters): `lock`, of `kind`, outside the keyspace under `name`. `slot` is
/// the key's index entry, which the lobby keeps (it wakes the lobby up). Should a lobby be
/// there already, the waiters join it by arrival (another kind's are answered WRONGTYPE, as
/// their request would be).
pub fn park(db: i32, name: &[u8], slot: Slot, kind: Kind, lock: Lock) {
    let slot = if slot.is_none() {
        schedule::attach(db, name)
    } else {
        slot
    };
    let ids: Vec<u64> = lock.waiters().map(|w| w.id).collect();
    waiters::rebind(&ids, (db, name), slot);
    let lobby = match take(db, name) {
        None => Lobby { slot, kind, lock },
        Some(mut there) => {
            schedule::detach(slot);
            let mut lock = lock;
            for w in lock.take_waiters() {
                if there.kind == kind {
                    there.lock.requeue(w);
                } else {
                    waiters::answer(w.id, waiters::Answer::WrongType);
                }
            }
            waiters::rebind(&ids, (db, name), there.slot);
            there
        }
    };
    put(db, name, lobby);
}

/// Parks `waiting`, the waiters of an evicted key of `kind` (and `limit`), in the lobby.
pub fn park_waiters(db: i32, name: &[u8], kind: Kind, limit: u32, waiting: Vec<Waiter>) {
    let mut lock = Lock::new();
    lock.restore_limit(limit);
    for w in waiting {
        lock.requeue(w);
    }
    park(db, name, Slot::NONE, kind, lock);
}

/// Puts a lobby (back) in place, to wake at its first wait deadline or when grants open,
/// whichever is first; an empty one goes, with its index entry.
pub fn put(db: i32, name: &[u8], lobby: Lobby) {
    if lobby.lock.is_empty() {
        schedule::detach(lobby.slot);
        return;
    }
    let (slot, until) = (lobby.slot, schedule::wakeup_of(&lobby.lock));
    let group = lobby.lock.waiters().next().is_some_and(|w| w.group);
    let key: Box<[u8]> = name.into();
    with_lobby(move |l| {
        l.entry(db).or_default().insert(key, lobby);
    });
    reschedule(slot, until, group);
}

/// Wakes the lobby at its first wait deadline, or when grants open, whichever is first; now
/// if they are open, unless a multi-key request at its head waits for its other keys (their
/// events serve it here, through `commit::decide_many`).
fn reschedule(slot: Slot, until: Option<Ms>, group: bool) {
    let open = schedule::place(slot).and_then(|(db, name)| held_until(db, &name));
    let when = match (until, open) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) if group => a,
        (_, None) => Some(now_ms()),
        (None, b) => b,
    };
    schedule::set(slot, when);
}

/// Calls `f` with the state of the lobby of `name` in `db`; false if there is none (the
/// wait-for walk reads lobbies as it reads keys).
pub fn with_lock(db: i32, name: &[u8], f: &mut dyn FnMut(Kind, &Lock)) -> bool {
    if no_lobby() {
        return false;
    }
    LOBBY.with(|l| {
        let l = l.borrow();
        match l.get(&db).and_then(|m| m.get(name)) {
            Some(x) => {
                f(x.kind, &x.lock);
                true
            }
            None => false,
        }
    })
}

/// The lobby slot of `name`, if waiters wait there.
pub fn lobby_slot(db: i32, name: &[u8]) -> Option<Slot> {
    if no_lobby() {
        return None;
    }
    let name: Box<[u8]> = name.into();
    with_lobby(move |l| l.get(&db).and_then(|m| m.get(&name)).map(|x| x.slot))
}

/// The kind of the lobby of `name`, if there is one (cheap when there is none).
pub fn lobby_kind(db: i32, name: &[u8]) -> Option<Kind> {
    if no_lobby() {
        return None;
    }
    let name: Box<[u8]> = name.into();
    with_lobby(move |l| l.get(&db).and_then(|m| m.get(&name)).map(|x| x.kind))
}

/// Takes the lobby of `name` out (to run the core on it, or to make its key).
pub fn take(db: i32, name: &[u8]) -> Option<Lobby> {
    if no_lobby() {
        return None;
    }
    let name: Box<[u8]> = name.into();
    with_lobby(move |l| {
        let m = l.get_mut(&db)?;
        let out = m.remove(&name);
        if m.is_empty() {
            l.remove(&db);
        }
        out
    })
}

/// SWAPDB: lobbies follow their db's contents, as keys do.
pub fn swap_dbs(a: i32, b: i32) {
    with_lobby(move |l| {
        let x = l.remove(&a);
        let y = l.remove(&b);
        if let Some(x) = x {
            l.insert(b, x);
        }
        if let Some(y) = y {
            l.insert(a, y);
        }
    });
}

/// This server became a replica: nobody waits in its lobbies any more.
pub fn clear() -> Vec<(Slot, Vec<u64>)> {
    with_lobby(|l| {
        l.drain()
            .flat_map(|(_, m)| m.into_values())
            .map(|x| (x.slot, x.lock.waiters().map(|w| w.id).collect()))
            .collect()
    })
}

/// How many requests wait in lobbies (a multi-key request parked for several names
/// counts once).
pub fn waiting() -> usize {
    with_lobby(|l| {
        let mut ids: Vec<u64> = l
            .values()
            .flat_map(|m| m.values())
            .flat_map(|x| x.lock.waiters().map(|w| w.id))
            .filter(|&id| waiters::alive(id))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    })
}

/// How many waiters wait in the lobby of `name` in `db`.
pub fn waiting_on(db: i32, name: &[u8]) -> usize {
    if no_lobby() {
        return 0;
    }
    let name: Box<[u8]> = name.into();
    with_lobby(move |l| {
        l.get(&db).and_then(|m| m.get(&name)).map_or(0, |x| {
            x.lock.waiters().filter(|w| waiters::alive(w.id)).count()
        })
    })
}

/// The waiters in the lobby of `name` in `db`, in arrival order (for `*.INFO`).
pub fn queue_on(db: i32, name: &[u8]) -> Vec<Waiter> {
    if no_lobby() {
        return Vec::new();
    }
    let name: Box<[u8]> = name.into();
    with_lobby(move |l| {
        l.get(&db)
            .and_then(|m| m.get(&name))
            .map_or_else(Vec::new, |x| x.lock.waiters().cloned().collect())
    })
}

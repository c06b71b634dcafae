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
//! Holds that exist keep working. A waiter whose key has nothing left to hold it (no holder)
//! waits in the lobby, outside the keyspace, so that the keyspace stays what replicas and the
//! AOF see; when grants open again its key is made anew and the lobby's waiters queue in it in
//! arrival order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use redis_lease_core::{Grants, Kind, Ms, Waiter};

use crate::clock::now_ms;
use crate::ffi::ctx::log_warning;
use crate::index::Slot;
use crate::state::{self, Evicted, Shell};
use crate::{config, schedule, waiters};

/// Waiters of a name that has no key now.
#[derive(Debug)]
pub struct Lobby {
    pub slot: Slot,
    pub kind: Kind,
    /// A semaphore's limit (0 for the other kinds).
    pub limit: u32,
    pub waiters: Vec<Waiter>,
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

/// Until when grants on `name` in `db` are held back (`None`: they are open at `now`).
pub fn held_until(db: i32, name: &[u8], now: Ms) -> Option<Ms> {
    let floor = crate::floor::held_until(name, now);
    let name: Box<[u8]> = name.into();
    state::with(move |s| {
        let mut until = (s.quarantine_until > now).then_some(s.quarantine_until);
        until = until.max(floor);
        if !s.evicted.is_empty() {
            if let Some(e) = s.evicted.get(&(db, name)) {
                if e.until > now {
                    until = Some(until.map_or(e.until, |u: Ms| u.max(e.until)));
                }
            }
        }
        until
    })
}

/// Whether new grants may be made on `name` in `db` at `now`.
pub fn grants(db: i32, name: &[u8], now: Ms) -> Grants {
    // The common case costs two loads and no allocation.
    let quiet = state::with(|s| s.quarantine_until <= now && s.evicted.is_empty());
    if crate::floor::holds(name) {
        return Grants::Held;
    }
    if quiet || held_until(db, name, now).is_none() {
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
    let until = now_ms().saturating_add(q);
    state::with(move |s| s.quarantine_until = s.quarantine_until.max(until));
    schedule::arm(until);
}

/// The shortest gap that counts as a stall.
pub const STALL_FLOOR_MS: Ms = 1000;

/// The stall bound for a server whose cron runs `hz` times a second: a second, or three cron
/// periods on a server with a slower cron, so an idle server never looks stalled.
pub fn stall_after(hz: i32) -> Ms {
    STALL_FLOOR_MS.max(3000 / u64::try_from(hz.max(1)).unwrap_or(1))
}

/// The server runs at `now` (a cron tick or a command): the gap since it last ran if that is
/// a stall on a master. Cheap: the hot path calls it with the state already borrowed.
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

/// This server's role (kept for the hot path's stall check).
pub fn set_master(master: bool) {
    state::with(move |s| s.master = master);
}

/// Ms of quarantine left.
pub fn quarantine_left(now: Ms) -> u64 {
    state::with(|s| s.quarantine_until.saturating_sub(now))
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

/// Parks the waiters of a key that has no holder left while grants are held back. `slot`
/// is the key's index entry, which the lobby keeps (it wakes the lobby up).
pub fn park(db: i32, name: &[u8], slot: Slot, kind: Kind, limit: u32, mut waiting: Vec<Waiter>) {
    let slot = if slot.is_none() {
        schedule::attach(db, name)
    } else {
        slot
    };
    let ids: Vec<u64> = waiting.iter().map(|w| w.id).collect();
    waiters::rebind(&ids, slot);
    let name: Box<[u8]> = name.into();
    let when = with_lobby(move |l| {
        let lobby = l.entry(db).or_default().entry(name).or_insert(Lobby {
            slot,
            kind,
            limit,
            waiters: Vec::new(),
        });
        lobby.waiters.append(&mut waiting);
        lobby.waiters.sort_by_key(|w| w.id);
        next_wake(lobby)
    });
    reschedule(slot, when);
}

fn next_wake(lobby: &Lobby) -> Option<Ms> {
    lobby.waiters.iter().filter_map(|w| w.until).min()
}

fn reschedule(slot: Slot, until: Option<Ms>) {
    // Wake at the first wait deadline, or when grants open, whichever is first.
    let open = schedule::place(slot).and_then(|(db, name)| held_until(db, &name, now_ms()));
    let when = match (until, open) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b).or(Some(now_ms())),
    };
    schedule::set(slot, when);
}

/// The lobby slot of `name`, if waiters wait there.
pub fn lobby_slot(db: i32, name: &[u8]) -> Option<Slot> {
    if no_lobby() {
        return None;
    }
    let name: Box<[u8]> = name.into();
    with_lobby(move |l| l.get(&db).and_then(|m| m.get(&name)).map(|x| x.slot))
}

/// Takes the lobby of `name` out, to make its key anew.
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

/// The lobby at `slot` woke up with grants still held: end the waits that ran out and wake
/// again later; the lobby is dropped when nobody is left.
pub fn expire(db: i32, name: &[u8], now: Ms) {
    let key: Box<[u8]> = name.into();
    let (ended, slot, when, empty) = match with_lobby(move |l| {
        let lobby = l.get_mut(&db)?.get_mut(&key)?;
        let mut ended = Vec::new();
        lobby.waiters.retain(|w| {
            let over = w.until.is_some_and(|u| u <= now) || !waiters::alive(w.id);
            if over {
                ended.push(w.id);
            }
            !over
        });
        let empty = lobby.waiters.is_empty();
        let out = (ended, lobby.slot, next_wake(lobby), empty);
        if empty {
            if let Some(m) = l.get_mut(&db) {
                m.remove(&key);
                if m.is_empty() {
                    l.remove(&db);
                }
            }
        }
        Some(out)
    }) {
        Some(x) => x,
        None => return,
    };
    for id in ended {
        waiters::answer(id, waiters::Answer::Nil);
    }
    if empty {
        schedule::detach(slot);
    } else {
        reschedule(slot, when);
    }
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
            .map(|x| (x.slot, x.waiters.iter().map(|w| w.id).collect()))
            .collect()
    })
}

/// How many waiters wait in lobbies.
pub fn waiting() -> usize {
    with_lobby(|l| {
        l.values()
            .flat_map(|m| m.values())
            .map(|x| x.waiters.len())
            .sum()
    })
}

/// How many waiters wait in the lobby of `name` in `db`.
pub fn waiting_on(db: i32, name: &[u8]) -> usize {
    if no_lobby() {
        return 0;
    }
    let name: Box<[u8]> = name.into();
    with_lobby(move |l| {
        l.get(&db)
            .and_then(|m| m.get(&name))
            .map_or(0, |x| x.waiters.len())
    })
}

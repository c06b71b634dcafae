//! The token floor in Redis Cluster: tokens of one key rise over its whole life, also when its
//! slot moves to another master.
//!
//! A key's high-water mark travels inside the key, so a key that moves (MIGRATE) keeps its
//! tokens; a released key has no key and nothing travels. So:
//!
//! - Every master broadcasts its high-water mark over the cluster bus ([`FLOOR`], every
//!   [`FLOOR_EVERY_MS`]), and every node raises its own to the highest it hears: floors
//!   follow the cluster's even across clock skew between masters.
//! - A master importing a slot (`CLUSTER SETSLOT s IMPORTING src`) makes no grant on it until
//!   the source's mark from after the source gave the slot up arrives ([`FINAL`], sent as
//!   `CLUSTER SETSLOT s NODE other` runs on the source, and repeated for a few seconds): every
//!   token the source issued on that slot is then below this node's next one. Holds that
//!   exist (moved keys) keep working; waiters wait as in a quarantine.
//! - A hold whose source never answers (it died, or learned the move by gossip only) ends
//!   after [`WAIT_MS`], logged: then the broadcast floors are what this node knows.
//!
//! Everything here runs on the main thread (the SETSLOT filter, bus messages, the cron).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use redis_lease_core::Ms;

use crate::ffi::cluster::{self, Handlers, NodeId};
use crate::ffi::ctx::{log_notice, log_warning, Ctx};
use crate::ffi::server::monotonic_ms;
use crate::validate::TOKEN_CEILING;
use crate::{slot, state};

/// A master's high-water mark (8 bytes, big-endian).
pub const FLOOR: u8 = 1;
/// A node gave a slot up: the slot (2 bytes) and its high-water mark (8 bytes), big-endian.
pub const FINAL: u8 = 2;
/// The message kinds the module receives.
pub const KINDS: &[u8] = &[FLOOR, FINAL];

/// How often a master broadcasts its mark (at most; the cron's pace).
pub const FLOOR_EVERY_MS: Ms = 100;
/// How long a master waits at most for the source's mark of a slot it imports.
pub const WAIT_MS: Ms = 10_000;
/// For how long a node that gave a slot up repeats its FINAL (once a second).
const REPEAT_MS: Ms = 5_000;

/// Grants held back on an importing slot until the mark of `from` arrives.
struct Hold {
    from: NodeId,
    since: Ms,
}

#[derive(Default)]
struct Floor {
    holds: HashMap<u16, Hold>,
    /// Slots this node gave up: when, and when their FINAL was last sent.
    gave_up: HashMap<u16, (Ms, Ms)>,
    /// When the mark was last broadcast, and which.
    sent: (Ms, u64),
}

thread_local! {
    static FLOOR_STATE: RefCell<Floor> = RefCell::new(Floor::default());
}

fn with<T>(f: impl FnOnce(&mut Floor) -> T) -> T {
    FLOOR_STATE.with(|s| {
        let mut s = s.borrow_mut();
        let out = f(&mut s);
        HELD.store(s.holds.len(), Ordering::Relaxed);
        out
    })
}

/// How many slots have grants held: lets the hot path skip the lookup (none, nearly always).
static HELD: AtomicUsize = AtomicUsize::new(0);

/// What the cluster layer calls.
pub fn handlers() -> Handlers {
    Handlers { message, setslot }
}

/// Whether no slot has grants held (the hot path's one look).
pub fn none_held() -> bool {
    HELD.load(Ordering::Relaxed) == 0
}

/// Whether grants on `name` wait for a source's mark.
pub fn holds(name: &[u8]) -> bool {
    if none_held() {
        return false;
    }
    let s = slot::of(name);
    with(|f| f.holds.contains_key(&s))
}

/// When to look again at grants held on `name` (the mark may come any time: soon).
pub fn held_until(name: &[u8], now: Ms) -> Option<Ms> {
    holds(name).then_some(now + FLOOR_EVERY_MS)
}

/// Slots whose grants are held now (for INFO).
pub fn held_slots() -> usize {
    HELD.load(Ordering::Relaxed)
}

fn high() -> u64 {
    state::with(|s| s.tokens.high_water())
}

fn observe(mark: u64) {
    // A mark past the ceiling can only be corrupt: raising to it would end grants for good.
    if mark <= TOKEN_CEILING {
        state::with(move |s| s.tokens.observe(mark));
    }
}

fn final_payload(slot: u16, mark: u64) -> [u8; 10] {
    let mut p = [0u8; 10];
    p[..2].copy_from_slice(&slot.to_be_bytes());
    p[2..].copy_from_slice(&mark.to_be_bytes());
    p
}

fn message(_ctx: &Ctx, sender: &NodeId, kind: u8, payload: &[u8]) {
    match (kind, payload.len()) {
        (FLOOR, 8) => {
            let mut b = [0u8; 8];
            b.copy_from_slice(payload);
            observe(u64::from_be_bytes(b));
        }
        (FINAL, 10) => {
            let s = u16::from_be_bytes([payload[0], payload[1]]);
            let mut b = [0u8; 8];
            b.copy_from_slice(&payload[2..]);
            observe(u64::from_be_bytes(b));
            let done = with(|f| {
                let ours = f.holds.get(&s).is_some_and(|h| &h.from == sender);
                ours && f.holds.remove(&s).is_some()
            });
            if done {
                state::with(|st| st.stats.floor_holds_ended += 1);
            }
        }
        _ => {}
    }
}

fn node_id(b: &[u8]) -> Option<NodeId> {
    b.try_into().ok()
}

/// `CLUSTER SETSLOT <slot> IMPORTING|MIGRATING|NODE|STABLE [id]`, before it runs.
fn setslot(args: &[&[u8]]) {
    let Some(s) = std::str::from_utf8(args.first().copied().unwrap_or_default())
        .ok()
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|s| *s < 16384)
    else {
        return;
    };
    let what = args
        .get(1)
        .map(|w| w.to_ascii_lowercase())
        .unwrap_or_default();
    let id = args.get(2).and_then(|b| node_id(b));
    // Local durations (the hold's bound, the FINAL's repeats) on the cron's clock.
    let now = monotonic_ms();
    match (what.as_slice(), id) {
        (b"importing", Some(from)) => with(|f| {
            f.holds.insert(s, Hold { from, since: now });
        }),
        (b"stable", _) => with(|f| {
            f.holds.remove(&s);
        }),
        (b"node", Some(to)) if Some(to) != cluster::my_id() => {
            // Given up (or never ours: a bystander's mark is a bound too): after this no
            // grant is made here on the slot, so this mark covers every token issued on it.
            with(|f| {
                f.holds.remove(&s);
                f.gave_up.insert(s, (now, now));
            });
            cluster::send(None, FINAL, &final_payload(s, high()));
        }
        // NODE <this node>: the hold, if importing, stays until the source's mark arrives.
        _ => {}
    }
}

/// The cron (`now`: monotonic ms): broadcast the mark, repeat recent FINALs, end holds that
/// waited too long.
pub fn tick(ctx: &Ctx, now: Ms) {
    if !ctx.is_cluster() {
        return;
    }
    let mark = high();
    let master = ctx.is_master();
    let (floor, finals, expired) = with(|f| {
        let due = now.saturating_sub(f.sent.0) >= FLOOR_EVERY_MS
            && (f.sent.1 != mark || now.saturating_sub(f.sent.0) >= 1000);
        let floor = (master && due).then(|| {
            f.sent = (now, mark);
        });
        f.gave_up
            .retain(|_, (at, _)| now.saturating_sub(*at) < REPEAT_MS);
        let mut finals = Vec::new();
        for (s, (_, last)) in f.gave_up.iter_mut() {
            if now.saturating_sub(*last) >= 1000 {
                *last = now;
                finals.push(*s);
            }
        }
        let mut expired = Vec::new();
        f.holds.retain(|s, h| {
            let over = now.saturating_sub(h.since) >= WAIT_MS;
            if over {
                expired.push((*s, h.from));
            }
            !over
        });
        (floor.is_some(), finals, expired)
    });
    if floor {
        cluster::send(None, FLOOR, &mark.to_be_bytes());
    }
    for s in finals {
        cluster::send(None, FINAL, &final_payload(s, mark));
    }
    for (s, from) in expired {
        state::with(|st| st.stats.floor_holds_expired += 1);
        log_warning(&format!(
            "lease: no token mark came from {} for slot {s} in {WAIT_MS} ms: grants on it open \
             with the floor this node has",
            String::from_utf8_lossy(&from)
        ));
    }
}

/// Subscribes to the cluster traffic (cluster mode only).
pub fn init(ctx: &Ctx) -> Result<(), String> {
    if !ctx.is_cluster() {
        return Ok(());
    }
    cluster::init(ctx, KINDS, handlers())?;
    log_notice("lease: token floors are exchanged over the cluster bus");
    Ok(())
}

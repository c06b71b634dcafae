//! Several keys of one command at once (`RWLOCK.MLOCK` and the like): each key's value is
//! opened (all in the selected db), one core operation runs over all of them with one clock
//! and token source, and each key is committed on its own.

use redis_lease_core::{Changes, Env, Grants, RwLock};

use crate::clock;
use crate::commit::{commit, ensure_slot, Origin};
use crate::ffi::ctx::Ctx;
use crate::ffi::key::{Access, Key, WRONGTYPE};
use crate::ffi::reply::ReplyError;
use crate::ffi::string::RStr;
use crate::value::Stored;
use crate::{holdback, state, waiters};

pub type RwStored = Stored<RwLock>;

/// The keys of one command, open for writing, in its order.
pub struct Keys<'a> {
    pub keys: Vec<Key<'a>>,
    pub db: i32,
    before: Vec<usize>,
}

/// Opens every key; `create`: make missing keys (a request for holds), else leave them
/// missing (`None` values). A key of another type is WRONGTYPE, before anything is made.
pub fn open<'a>(ctx: &'a Ctx, names: &[RStr<'a>], create: bool) -> Result<Keys<'a>, ReplyError> {
    let db = ctx.db();
    let mut keys = Vec::with_capacity(names.len());
    for name in names {
        let key = Key::open(ctx, *name, Access::Write)
            .ok_or_else(|| ReplyError::from("ERR could not open the key"))?;
        if key.peek::<RwStored>().is_err() {
            return Err(WRONGTYPE.into());
        }
        keys.push(key);
    }
    let mut before = Vec::with_capacity(keys.len());
    for key in &mut keys {
        let name = key.name().bytes();
        if create {
            let (v, created) = key
                .value_or_create::<RwStored>(Stored::default)
                .map_err(|_| ReplyError::from(WRONGTYPE))?;
            if created {
                state::count_key(1);
                if let Some(slot) = holdback::lobby_slot(db, name) {
                    // Its waiters wait in the lobby: this request queues behind them there.
                    v.slot = slot;
                }
            }
        }
        if let Ok(Some(v)) = key.value::<RwStored>() {
            ensure_slot(v, db, name);
            before.push(v.core.0.holder_count());
        } else {
            before.push(0);
        }
    }
    Ok(Keys { keys, db, before })
}

impl<'a> Keys<'a> {
    /// Runs `op` over the keys' values (missing keys as empty locks that are not kept), with
    /// the module's clock and tokens, and grants held if any key's are; departed waiters
    /// are taken out of each queue first.
    pub fn run<T>(
        &mut self,
        op: impl FnOnce(&mut [&mut RwLock], &mut Env) -> (Vec<Changes>, T),
    ) -> (Vec<Changes>, T) {
        let (now, round_up) = clock::now();
        let db = self.db;
        let mut spare: Vec<RwLock> = Vec::new();
        let mut slots = Vec::new();
        let mut names = Vec::new();
        for key in &mut self.keys {
            names.push(key.name().bytes());
            slots.push(key.value::<RwStored>().ok().flatten().map(|v| v.slot));
        }
        let slots2 = slots.clone();
        let (mut tokens, quiet, cancels, stall) = state::with(move |s| {
            let stall = holdback::ran(s, now);
            let quiet = s.quarantine_until <= now && s.evicted.is_empty();
            let cancels: Vec<Vec<u64>> = slots2
                .iter()
                .map(|slot| slot.map_or_else(Vec::new, |sl| s.waiters.take_cancels_of(sl)))
                .collect();
            (s.tokens, quiet, cancels, stall)
        });
        let mut quiet = quiet;
        if let Some(gap) = stall {
            // Before this request is decided: it may come from a client of the replaced master.
            holdback::stalled(gap);
            quiet = false;
        }
        let held = !quiet
            && names
                .iter()
                .any(|n| holdback::grants(db, n, now) == Grants::Held);
        let grants = if held { Grants::Held } else { Grants::Open };
        let alive = waiters::alive;
        let mut values: Vec<&mut RwLock> = Vec::with_capacity(self.keys.len());
        let missing = self
            .keys
            .iter_mut()
            .filter(|k| !matches!(k.peek::<RwStored>(), Ok(Some(_))))
            .count();
        spare.resize_with(missing, RwLock::default);
        let mut spare_iter = spare.iter_mut();
        for key in self.keys.iter_mut() {
            match key.value::<RwStored>() {
                Ok(Some(v)) => values.push(&mut v.core),
                _ => values.extend(spare_iter.next()),
            }
        }
        let mut env = Env {
            now,
            round_up,
            tokens: &mut tokens,
            alive: &alive,
            grants,
        };
        let mut pre: Vec<Changes> = Vec::with_capacity(values.len());
        for (v, ids) in values.iter_mut().zip(cancels) {
            let mut c = Changes::default();
            for id in ids {
                c.append(v.cancel(id, &mut env).0);
            }
            pre.push(c);
        }
        let (changes, out) = op(&mut values, &mut env);
        drop(values);
        state::with(move |s| s.tokens = tokens);
        let changes = pre
            .into_iter()
            .zip(changes)
            .map(|(mut a, b)| {
                a.append(b);
                a
            })
            .collect();
        (changes, out)
    }

    /// The state of each key as it is now (missing keys: `None`).
    pub fn locks(&self) -> Vec<Option<&RwStored>> {
        self.keys
            .iter()
            .map(|k| k.peek::<RwStored>().ok().flatten())
            .collect()
    }

    /// Each key's index entry (every key must exist).
    pub fn slots(&mut self) -> Vec<crate::index::Slot> {
        self.keys
            .iter()
            .map(|k| {
                k.peek::<RwStored>()
                    .ok()
                    .flatten()
                    .map_or(crate::index::Slot::NONE, |v| v.slot)
            })
            .collect()
    }

    /// Commits each key's changes (`origin` as for one key).
    pub fn commit(self, changes: Vec<Changes>, origin: Origin) {
        for ((key, before), c) in self.keys.into_iter().zip(self.before).zip(changes) {
            commit::<RwLock>(key, before, c, origin);
        }
    }
}

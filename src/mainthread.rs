//! A value only Redis's main thread may touch, checked on every access: the module's state.
//!
//! Redis calls the module on its main thread (commands, timers, blocked-client callbacks,
//! server events, type callbacks); the one exception, a value freed by a lazy-free thread,
//! touches only atomics. A `thread_local!` in a shared object costs a `__tls_get_addr` call
//! and a lazy-initialisation check on each access (about 60 instructions, several times per
//! command); this cell costs a `pthread_self` and a compare, and stays memory-safe should the
//! rule ever be broken: another thread panics (caught by the entry point's guard) instead of
//! racing the main thread.

use std::cell::{RefCell, UnsafeCell};
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct MainThread<T> {
    /// The thread that owns the value: the first to touch it (the module loads on the main
    /// thread, and its load touches the state). 0: none yet.
    owner: AtomicUsize,
    value: UnsafeCell<Option<RefCell<T>>>,
}

// SAFETY: the value is reached only through `with`, which lets only the owning thread through;
// `owner` is an atomic. No `&T` ever leaves the owning thread (`with` takes a closure).
unsafe impl<T> Sync for MainThread<T> {}

impl<T: Default> MainThread<T> {
    pub const fn new() -> MainThread<T> {
        MainThread {
            owner: AtomicUsize::new(0),
            value: UnsafeCell::new(None),
        }
    }

    /// Runs `f` on the value (made on first use). Panics on any thread but the owner, and on
    /// a re-entrant borrow (as `RefCell` does).
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() } as usize;
        let owner = self.owner.load(Ordering::Relaxed);
        if owner != me && !self.claim(me, owner) {
            panic!("the module's state was reached from a thread other than Redis's main thread");
        }
        // SAFETY: only the owning thread gets here (checked above, and `owner` never changes
        // once set), so this is never reached from two threads; the RefCell catches a
        // re-entrant borrow on that thread.
        let slot = unsafe { &mut *self.value.get() };
        let cell = slot.get_or_insert_with(|| RefCell::new(T::default()));
        f(&mut cell.borrow_mut())
    }

    /// Makes `me` the owner if there is none yet; true if `me` owns the value now.
    #[cold]
    fn claim(&self, me: usize, owner: usize) -> bool {
        owner == 0
            && self
                .owner
                .compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire)
                .map_or_else(|now| now == me, |_| true)
    }
}

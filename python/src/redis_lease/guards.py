"""Sync guards: a held lease, its watchdog thread and its release."""

from __future__ import annotations

import os
import queue
import threading
import time
from types import TracebackType
from typing import Any, Callable, List, Optional, Type, TypeVar

from . import protocol
from .connector import Connector
from .errors import Fenced, LeaseLost, LossReason, ProtocolError
from .notify import OnLost, announce
from .spec import Spec, check_timeout

G = TypeVar("G", bound="Guard")


class LeaseState:
    """What a guard and its watchdog share. The watchdog never holds the guard itself, so a
    guard dropped without release can be collected (and then released)."""

    def __init__(self, valid_until: float, key: Any, token: int) -> None:
        self.lock = threading.Lock()
        self.valid_until = valid_until
        self.reason: Optional[LossReason] = None
        self.lost = threading.Event()
        self.stop = threading.Event()
        # Ends the watchdog's wait for its next renewal: set by halt(), and by the connector
        # when Sentinel switches the master (the watchdog then renews on the new one at once).
        self.wake = threading.Event()
        self.key = key
        self.token = token
        self.callbacks: List[OnLost] = []
        # Why the lease ends when valid_until passes (MAX_HOLD once it is the cap's).
        self.ends = LossReason.EXPIRED

    def publish(self, bound: Optional[float], reason: Optional[LossReason]) -> None:
        """A new validity bound (and, with ``reason``, why the lease ends there), or the loss."""
        with self.lock:
            if self.lost.is_set() or self.stop.is_set():
                return  # a loss is final, and after a release nothing matters
            if bound is not None:
                self.valid_until = bound
                self.ends = reason or self.ends
                return
            self.reason = reason or LossReason.FAILED
            self.lost.set()
            self.halt()
            callbacks = list(self.callbacks)
        announce(self.key, self.token, self.reason, callbacks)

    def halt(self) -> None:
        """Stops the watchdog (at once, also from its wait for the next renewal)."""
        self.stop.set()
        self.wake.set()

    def on_lost(self, callback: OnLost) -> None:
        with self.lock:
            if not self.lost.is_set():
                self.callbacks.append(callback)
                return
            reason = self.reason or LossReason.FAILED
        callback(reason)

    def expire_if_due(self) -> None:
        """Declares the loss when the validity bound has passed (should the watchdog be late)."""
        if not self.lost.is_set() and time.monotonic() >= self.valid_until:
            self.publish(None, self.ends)


def _watch(conn: Connector, machine: protocol.Machine[LossReason], state: LeaseState) -> None:
    try:
        conn.run(machine, stop=state.stop, wake=state.wake)
    except BaseException:  # noqa: BLE001 - a watchdog that dies must not leave the lease "held"
        state.publish(None, LossReason.FAILED)


# Background releases (a dropped guard, an interrupted acquisition) go through one queue to a
# daemon thread: a finalizer may run anywhere (inside threading's own locks, or while the
# interpreter shuts down), where starting a thread or taking a lock can hang forever, but
# SimpleQueue.put is safe there.
_jobs: "queue.SimpleQueue[Callable[[], None]]" = queue.SimpleQueue()
_reaper_lock = threading.Lock()
_reaper: Optional[threading.Thread] = None


def _after_fork_in_child() -> None:
    """A forked child has no releasing thread, and the parent's queued releases are the
    parent's to run: the child starts with an empty queue and its own lock."""
    global _jobs, _reaper, _reaper_lock
    _jobs = queue.SimpleQueue()
    _reaper = None
    _reaper_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _ensure_reaper() -> None:
    """Starts the releasing thread (from ordinary code, never from a finalizer)."""
    global _reaper
    if _reaper is not None:
        return
    with _reaper_lock:
        if _reaper is None:
            t = threading.Thread(target=_reap, name="redis-lease releaser", daemon=True)
            t.start()
            _reaper = t


def _reap() -> None:
    while True:
        job = _jobs.get()
        try:
            threading.Thread(target=job, name="redis-lease release", daemon=True).start()
        except RuntimeError:
            return  # interpreter shutting down: the leases lapse after their ttl


def release_quietly(
    conn: Connector, kind: protocol.Kind, sweep: bool, spec: Spec, state: Optional[LeaseState] = None
) -> None:
    """Best-effort release in the background (safe to call from a finalizer)."""

    def run() -> None:
        try:
            if state is not None:
                state.halt()
            conn.run(protocol.release(kind, sweep, spec.release_policy(), spec.command_timeout))
        except Exception:  # noqa: BLE001 - best effort: the lease lapses by itself
            pass

    _jobs.put(run)


class Guard:
    """A held lease. Its watchdog (a daemon thread) renews it every third of the ttl.

    ``lost`` (a ``threading.Event``) is set as soon as a renewal answers that the hold is gone,
    or when the lease can no longer be proven valid: the send time of the last successful grant
    or renewal + ttl - a drift margin (1% of the ttl + 2 ms), which is before the server could
    grant it to anyone else. A loss is final. Release with :meth:`release` or by leaving the
    ``with`` block; releasing twice is harmless; a guard dropped unreleased is released in the
    background.

    Leaving a ``with`` block whose hold was lost during it raises :class:`LeaseLost` (unless the
    block raised already), as redis-py's ``Lock`` raises ``LockNotOwnedError``: the work in the
    block may have overlapped another holder's. Opt out with ``raise_on_lost=False`` on the
    lock, semaphore or elector, or per guard (``guard.raise_on_lost = False``). Every loss is
    logged as a warning on the ``redis_lease`` logger and calls the :meth:`on_lost` callbacks.

    A guard belongs to the process that acquired it: in a child made by ``fork`` it neither
    renews nor releases (the hold is the parent's).
    """

    def __init__(self, conn: Connector, spec: Spec, kind: protocol.Kind, grant: protocol.Grant) -> None:
        self._conn = conn
        self._spec = spec
        self._kind = kind
        self._sweep = grant.sweep
        self._holds = 1  # holds of this guard's owner on the server (2 after an upgrade)
        self._released = False
        # A lost guard of a caller-chosen owner sends no release: a newer guard of the same id
        # (elected again, or granted again) would lose its hold. The lost hold lapses alone.
        self._release_when_lost = kind.generated
        self.key: Any = spec.key
        self.owner: str = kind.release[-1]
        self.token: int = grant.token
        self.raise_on_lost: bool = spec.raise_on_lost
        self._pid = os.getpid()
        self._state = LeaseState(spec.timing.valid_until(grant.sent), spec.key, grant.token)
        _ensure_reaper()
        dog = protocol.watchdog(
            kind.renew,
            spec.timing,
            spec.retry,
            spec.command_timeout,
            grant.sent,
            self._state.publish,
            route=kind.route,
            expect=kind.expect,
        )
        threading.Thread(
            target=_watch, args=(conn, dog, self._state), name=f"redis-lease watchdog {self.key!r}", daemon=True
        ).start()

    @property
    def lost(self) -> threading.Event:
        """Set when the lease is lost (see the class docs)."""
        self._state.expire_if_due()
        return self._state.lost

    @property
    def reason(self) -> Optional[LossReason]:
        """Why the lease was lost (None while held), or RELEASED after a release."""
        if self._released and not self._state.lost.is_set():
            return LossReason.RELEASED
        self._state.expire_if_due()
        return self._state.reason

    @property
    def valid_until(self) -> Optional[float]:
        """The ``time.monotonic()`` instant until which the lease is certainly valid, if held."""
        return self._state.valid_until if self.held else None

    @property
    def held(self) -> bool:
        """Whether the lease is certainly still valid right now."""
        self._state.expire_if_due()
        return not self._released and not self._state.lost.is_set()

    def check(self) -> None:
        """Raises :class:`LeaseLost` unless the lease is held: a check to make before each step
        of the protected work."""
        if not self.held:
            raise LeaseLost(self.reason or LossReason.RELEASED)

    def on_lost(self, callback: OnLost) -> None:
        """Calls ``callback(reason)`` once when the lease is lost (at once if it is already),
        from the watchdog thread or the thread that notices the loss. Not called on release."""
        self._state.on_lost(callback)

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Waits until the lease is lost (or released) or ``timeout`` passes; answers whether it
        is no longer held. Computed from the lease's monotonic validity bound, so a process
        frozen past it answers True at once, whether or not the watchdog has run since."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            if not self.held:
                return True
            left = self._state.valid_until - time.monotonic()
            if end is not None:
                left = min(left, end - time.monotonic())
            if self._state.lost.wait(max(left, 0.0)):
                return True
            if end is not None and time.monotonic() >= end:
                return not self.held

    def release(self) -> bool:
        """Stops renewing and releases the hold. Answers whether the server still counted it
        (False if the lease had already lapsed, or the guard was released before)."""
        with self._state.lock:
            if self._released:
                return False
            self._released = True
            self._state.halt()
            if self._state.lost.is_set() and not self._release_when_lost:
                return False
        if self._pid != os.getpid():
            return False  # a forked child's copy: the hold is the parent's
        n = 0
        for _ in range(1 if self._sweep else self._holds):
            n += self._conn.run(
                protocol.release(self._kind, self._sweep, self._spec.release_policy(), self._spec.command_timeout)
            )
        return n > 0

    def abandon(self) -> None:
        """Stops renewing without releasing: the server lets the lease lapse after its ttl
        (what a crashed holder looks like; also for handing a hold to a process that renews
        it with the same owner id)."""
        with self._state.lock:
            self._released = True
            self._state.halt()

    def exec(self, *command: Any) -> Any:
        """Runs ``command`` inside Redis only while this hold is live, atomically with the check
        (``LEASE.EXEC key token command...``). Raises :class:`~redis_lease.Fenced` (a
        :class:`LeaseLost`) when the server finds the hold not live; nothing ran then, and the
        guard is lost (``REVOKED``) from then on, unless it is a read lock's (whose token never
        fences a write)."""
        bound = max(self._state.valid_until, time.monotonic() + self._spec.command_timeout)
        try:
            return self._conn.run(
                protocol.fenced_exec(self.key, self.token, command, bound, self._spec.retry, self._spec.command_timeout)
            )
        except Fenced:
            if self._fences_writes:
                self._state.publish(None, LossReason.REVOKED)
            raise

    @property
    def _fences_writes(self) -> bool:
        """Whether the server accepts this hold's token for a fenced write."""
        return True

    def __enter__(self: G) -> G:
        return self

    def __exit__(
        self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        # Lost during the block? (released inside it: not a loss)
        lost = not self._released and not self.held
        try:
            self.release()
        except Exception:
            if et is None:
                raise  # a failed release surfaces unless the block already failed
        if lost and et is None and self.raise_on_lost:
            raise LeaseLost(
                self._state.reason or LossReason.FAILED,
                f"the lease on {self.key!r} (token {self.token}) was lost during the with block: {self._state.reason}",
            )

    def __del__(self) -> None:
        try:
            if self._released or self._pid != os.getpid():
                return
            self._released = True
            if self._state.lost.is_set() and not self._release_when_lost:
                _jobs.put(self._state.halt)
                return
            release_quietly(self._conn, self._kind, self._sweep, self._spec, self._state)
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} key={self.key!r} owner={self.owner!r} token={self.token} held={self.held}>"


class LockGuard(Guard):
    """A held read or write lock (see :class:`Guard`)."""

    def __init__(self, conn: Connector, spec: Spec, kind: protocol.Kind, grant: protocol.Grant, mode: str) -> None:
        self.mode = mode
        super().__init__(conn, spec, kind, grant)

    @property
    def _fences_writes(self) -> bool:
        return self.mode == "write"

    def upgrade(self, timeout: Optional[float] = None) -> bool:
        """Upgrades a read guard to the write lock without letting go of the read hold, waiting
        at most ``timeout`` seconds (None: as long as it takes; 0: try once). Granted at once
        when this is the only reader; a new token then. Answers whether it is now a write guard
        (False: still a read guard). Raises :class:`~redis_lease.Deadlock` if another reader
        already waits to upgrade (release and try again), :class:`LeaseLost` if lost."""
        if self.mode == "write":
            return True
        self.check()
        kind = protocol.lock_kind(self.key, self.owner, "write", self._spec.timing.ttl_ms, self._kind.generated)
        acq = protocol.Acquisition(
            kind, self._spec.timing, self._spec.retry, self._spec.command_timeout, check_timeout(timeout)
        )
        try:
            grant = self._conn.run(acq.run())
        except BaseException:
            if acq.armed:
                self._sweep = True  # a write hold may exist: the release gives back every hold
            raise
        if grant is None:
            return False
        self._holds += 1
        self._sweep = self._sweep or grant.sweep
        self._kind = kind
        self.mode = "write"
        self.token = self._state.token = grant.token
        return True

    def downgrade(self) -> None:
        """Turns a write guard into a read guard without letting go in between: takes a read
        hold under the write hold (granted at once), then gives the write hold back. Writers
        waiting stay waiting; readers waiting are let in."""
        if self.mode == "read":
            return
        self.check()
        spec = self._spec
        kind = protocol.lock_kind(self.key, self.owner, "read", spec.timing.ttl_ms, self._kind.generated)
        if self._holds < 2:
            acq = protocol.Acquisition(kind, spec.timing, spec.retry, spec.command_timeout, 0)
            try:
                grant = self._conn.run(acq.run())
            except BaseException:
                if acq.armed:
                    self._sweep = True
                raise
            if grant is None:
                raise ProtocolError(f"a writer's read request on {self.key!r} was refused")
            self._holds += 1
        # UNLOCK gives back the owner's write hold first.
        self._conn.run(protocol.release(self._kind, False, spec.release_policy(), spec.command_timeout))
        self._holds -= 1
        self._kind = kind
        self.mode = "read"


class Leadership(Guard):
    """Leadership of an election (see :class:`Guard`); ``term`` is its fencing token.
    :meth:`release` (or :meth:`resign`) resigns, so the next candidate takes over at once."""

    @property
    def term(self) -> int:
        return self.token

    @property
    def candidate(self) -> str:
        return self.owner

    def resign(self) -> bool:
        return self.release()


class SemaphoreGuard(Guard):
    """Permits held on a semaphore (see :class:`Guard`)."""

    def __init__(self, conn: Connector, spec: Spec, kind: protocol.Kind, grant: protocol.Grant, permits: int) -> None:
        self.permits = permits
        super().__init__(conn, spec, kind, grant)


class MultiGuard(Guard):
    """The holds of one owner on every key of a multi-key lock, granted, renewed
    (``RWLOCK.MRENEW``), lost and released (``RWLOCK.MUNLOCK``) together (see :class:`Guard`).
    ``key`` and ``token`` are the first key's, and :meth:`exec` is fenced on it; ``tokens``
    has every key's, in key order. The hold is lost (``REVOKED``) when any key's is gone."""

    def __init__(
        self, conn: Connector, spec: Spec, kind: protocol.Kind, grant: protocol.Grant, keys: List[Any], mode: str
    ) -> None:
        self.keys: List[Any] = list(keys)
        self.mode = mode
        self.tokens: List[int] = list(grant.tokens)
        super().__init__(conn, spec, kind, grant)

    @property
    def _fences_writes(self) -> bool:
        return self.mode == "write"

    def __repr__(self) -> str:
        return f"<MultiGuard keys={self.keys!r} owner={self.owner!r} tokens={self.tokens} held={self.held}>"


def acquire(
    conn: Connector,
    spec: Spec,
    kind: protocol.Kind,
    wait: Optional[float],
    make: Callable[[protocol.Grant], G],
) -> Optional[G]:
    """Runs one acquisition; a grant becomes a guard (``make``). If the acquisition ends
    abnormally while a grant of ours may exist, that grant is released in the background."""
    acq = protocol.Acquisition(kind, spec.timing, spec.retry, spec.command_timeout, wait)
    try:
        grant = conn.run(acq.run())
        return None if grant is None else make(grant)
    except BaseException:
        if acq.armed:
            _ensure_reaper()
            release_quietly(conn, kind, True, spec)
        raise

"""asyncio guards: a held lease, its watchdog task and its release."""

from __future__ import annotations

import asyncio
import time
from types import TracebackType
from typing import Any, Awaitable, Callable, Coroutine, Generator, List, Optional, Set, Type, TypeVar

from .. import protocol
from ..errors import Fenced, LeaseLost, LossReason, ProtocolError
from ..notify import OnLost, announce
from ..spec import Spec, check_timeout
from .connector import Connector

G = TypeVar("G", bound="Guard")

# Background tasks (watchdogs, best-effort releases) are kept here so that they are not
# collected while they run.
_tasks: Set["asyncio.Task[Any]"] = set()


def spawn(coro: Awaitable[Any]) -> Optional["asyncio.Task[Any]"]:
    try:
        task = asyncio.ensure_future(coro)
    except RuntimeError:  # no running loop: the lease lapses after its ttl
        if asyncio.iscoroutine(coro):
            coro.close()
        return None
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
    return task


class LeaseState:
    """What a guard and its watchdog share (never the guard itself, so a guard dropped without
    release can be collected and then released)."""

    def __init__(self, valid_until: float, key: Any, token: int) -> None:
        self.valid_until = valid_until
        self.reason: Optional[LossReason] = None
        self.lost = asyncio.Event()
        self.stop = asyncio.Event()
        self.wake = asyncio.Event()  # see redis_lease.guards.LeaseState
        self.key = key
        self.token = token
        self.callbacks: List[OnLost] = []
        self.ends = LossReason.EXPIRED  # see redis_lease.guards.LeaseState

    def publish(self, bound: Optional[float], reason: Optional[LossReason]) -> None:
        if self.lost.is_set() or self.stop.is_set():
            return
        if bound is not None:
            self.valid_until = bound
            self.ends = reason or self.ends
            return
        self.reason = reason or LossReason.FAILED
        self.lost.set()
        self.halt()
        announce(self.key, self.token, self.reason, self.callbacks)

    def halt(self) -> None:
        """Stops the watchdog (at once, also from its wait for the next renewal)."""
        self.stop.set()
        self.wake.set()

    def expire_if_due(self) -> None:
        if not self.lost.is_set() and time.monotonic() >= self.valid_until:
            self.publish(None, self.ends)


async def _watch(conn: Connector, machine: protocol.Machine[LossReason], state: LeaseState) -> None:
    try:
        await conn.run(machine, stop=state.stop, wake=state.wake)
    except asyncio.CancelledError:
        raise
    except BaseException:  # noqa: BLE001 - a watchdog that dies must not leave the lease "held"
        state.publish(None, LossReason.FAILED)


async def _release(conn: Connector, kind: protocol.Kind, sweep: bool, spec: Spec) -> int:
    return await conn.run(protocol.release(kind, sweep, spec.release_policy(), spec.command_timeout))


async def _release_quietly(conn: Connector, kind: protocol.Kind, sweep: bool, spec: Spec) -> None:
    try:
        await _release(conn, kind, sweep, spec)
    except Exception:  # noqa: BLE001 - best effort: the lease lapses by itself
        pass


class Guard:
    """A held lease; its watchdog (an asyncio task) renews it every third of the ttl.

    ``lost`` (an ``asyncio.Event``) is set as soon as a renewal answers that the hold is gone,
    or when the lease can no longer be proven valid (send time of the last grant or renewal +
    ttl - drift margin), before the server could grant it to anyone else. A loss is final.
    Release with ``await guard.release()`` or by leaving the ``async with`` block; releasing
    twice is harmless; a guard dropped unreleased is released by a background task.
    """

    def __init__(self, conn: Connector, spec: Spec, kind: protocol.Kind, grant: protocol.Grant) -> None:
        self._conn = conn
        self._spec = spec
        self._kind = kind
        self._sweep = grant.sweep
        self._released = False
        # A lost guard of a caller-chosen owner sends no release: a newer guard of the same id
        # (elected again, or granted again) would lose its hold. The lost hold lapses alone.
        self._release_when_lost = kind.generated
        self.key: Any = spec.key
        self.owner: str = kind.release[-1]
        self.token: int = grant.token
        self.raise_on_lost: bool = spec.raise_on_lost
        self._holds = 1  # holds of this guard's owner on the server (2 after an upgrade)
        self._state = LeaseState(spec.timing.valid_until(grant.sent), spec.key, grant.token)
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
        self._task = spawn(_watch(conn, dog, self._state))

    @property
    def lost(self) -> asyncio.Event:
        self._state.expire_if_due()
        return self._state.lost

    @property
    def reason(self) -> Optional[LossReason]:
        if self._released and not self._state.lost.is_set():
            return LossReason.RELEASED
        self._state.expire_if_due()
        return self._state.reason

    @property
    def valid_until(self) -> Optional[float]:
        return self._state.valid_until if self.held else None

    @property
    def held(self) -> bool:
        self._state.expire_if_due()
        return not self._released and not self._state.lost.is_set()

    def check(self) -> None:
        """Raises :class:`LeaseLost` unless the lease is held."""
        if not self.held:
            raise LeaseLost(self.reason or LossReason.RELEASED)

    def on_lost(self, callback: OnLost) -> None:
        """Calls ``callback(reason)`` once when the lease is lost (at once if it is already),
        on the event loop. Not called on release."""
        if self._state.lost.is_set():
            callback(self._state.reason or LossReason.FAILED)
        else:
            self._state.callbacks.append(callback)

    async def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Waits until the lease is lost (or released) or ``timeout`` passes; answers whether
        it is no longer held."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            if not self.held:
                return True
            left = self._state.valid_until - time.monotonic()
            if end is not None:
                left = min(left, end - time.monotonic())
            try:
                await asyncio.wait_for(self._state.lost.wait(), max(left, 0.0))
                return True
            except asyncio.TimeoutError:
                pass
            if end is not None and time.monotonic() >= end:
                return not self.held

    async def release(self) -> bool:
        """Stops renewing and releases the hold. Answers whether the server still counted it."""
        if self._released:
            return False
        self._released = True
        await self._stop_watchdog()
        if self._state.lost.is_set() and not self._release_when_lost:
            return False
        n = 0
        for _ in range(1 if self._sweep else self._holds):
            n += await _release(self._conn, self._kind, self._sweep, self._spec)
        return n > 0

    async def _stop_watchdog(self) -> None:
        # Cancelled mid-renewal, its connection is closed rather than left to the idle pool.
        self._state.halt()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def abandon(self) -> None:
        """Stops renewing without releasing: the lease lapses on the server after its ttl."""
        self._released = True
        self._state.halt()
        if self._task is not None:
            self._task.cancel()

    async def exec(self, *command: Any) -> Any:
        """``LEASE.EXEC key token command...``: runs ``command`` only while this hold is live.
        Raises :class:`~redis_lease.Fenced` when it is not (nothing ran); the guard is lost
        (``REVOKED``) from then on, unless it is a read lock's."""
        bound = max(self._state.valid_until, time.monotonic() + self._spec.command_timeout)
        try:
            return await self._conn.run(
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

    async def __aenter__(self: G) -> G:
        return self

    async def __aexit__(
        self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        # Lost during the block? (released inside it: not a loss) See redis_lease.Guard.
        lost = not self._released and not self.held
        try:
            await self.release()
        except Exception:
            if et is None:
                raise
        if lost and et is None and self.raise_on_lost:
            raise LeaseLost(
                self._state.reason or LossReason.FAILED,
                f"the lease on {self.key!r} (token {self.token}) was lost during the async with block: "
                f"{self._state.reason}",
            )

    def __del__(self) -> None:
        try:
            if self._released:
                return
            self._released = True
            self._state.halt()
            if self._state.lost.is_set() and not self._release_when_lost:
                return
            loop = self._task.get_loop() if self._task is not None else None
            if loop is not None and not loop.is_closed():
                conn, kind, sweep, spec = self._conn, self._kind, self._sweep, self._spec
                loop.call_soon_threadsafe(lambda: spawn(_release_quietly(conn, kind, sweep, spec)))
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

    async def upgrade(self, timeout: Optional[float] = None) -> bool:
        """Upgrades to the write lock without letting go of the read hold (see
        :meth:`redis_lease.LockGuard.upgrade`). Answers whether it is now a write guard."""
        if self.mode == "write":
            return True
        self.check()
        kind = protocol.lock_kind(self.key, self.owner, "write", self._spec.timing.ttl_ms, self._kind.generated)
        acq = protocol.Acquisition(
            kind, self._spec.timing, self._spec.retry, self._spec.command_timeout, check_timeout(timeout)
        )
        try:
            grant = await self._conn.run(acq.run())
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

    async def downgrade(self) -> None:
        """Turns a write guard into a read guard without letting go in between (see
        :meth:`redis_lease.LockGuard.downgrade`)."""
        if self.mode == "read":
            return
        self.check()
        spec = self._spec
        kind = protocol.lock_kind(self.key, self.owner, "read", spec.timing.ttl_ms, self._kind.generated)
        if self._holds < 2:
            acq = protocol.Acquisition(kind, spec.timing, spec.retry, spec.command_timeout, 0)
            try:
                grant = await self._conn.run(acq.run())
            except BaseException:
                if acq.armed:
                    self._sweep = True
                raise
            if grant is None:
                raise ProtocolError(f"a writer's read request on {self.key!r} was refused")
            self._holds += 1
        # UNLOCK gives back the owner's write hold first.
        await self._conn.run(protocol.release(self._kind, False, spec.release_policy(), spec.command_timeout))
        self._holds -= 1
        self._kind = kind
        self.mode = "read"


class Leadership(Guard):
    """Leadership of an election; ``term`` is its fencing token. ``release()`` resigns."""

    @property
    def term(self) -> int:
        return self.token

    @property
    def candidate(self) -> str:
        return self.owner

    async def resign(self) -> bool:
        return await self.release()


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


async def acquire(
    conn: Connector, spec: Spec, kind: protocol.Kind, wait: Optional[float], make: Callable[[protocol.Grant], G]
) -> Optional[G]:
    """Runs one acquisition; a grant becomes a guard. If it ends abnormally (an error, a
    cancellation) while a grant of ours may exist, that grant is released in the background."""
    acq = protocol.Acquisition(kind, spec.timing, spec.retry, spec.command_timeout, wait)
    try:
        grant = await conn.run(acq.run())
        return None if grant is None else make(grant)
    except BaseException:
        if acq.armed:
            spawn(_release_quietly(conn, kind, True, spec))
        raise


class Acquiring(Coroutine[Any, Any, G]):
    """What ``lock.write()`` and friends answer: ``await`` it for the guard, hand it to
    ``asyncio.create_task`` (it is a coroutine), or use it as ``async with lock.write() as
    guard:`` (released on exit). Nothing is sent until one of these starts it."""

    def __init__(self, start: Callable[[], Coroutine[Any, Any, G]]) -> None:
        self._start = start
        self._coro: Optional[Coroutine[Any, Any, G]] = None
        self._guard: Optional[G] = None

    def _started(self) -> Coroutine[Any, Any, G]:
        if self._coro is None:
            self._coro = self._start()
        return self._coro

    def __await__(self) -> Generator[Any, None, G]:
        return self._started().__await__()

    def send(self, value: Any) -> Any:
        return self._started().send(value)

    def throw(self, *args: Any) -> Any:
        return self._started().throw(*args)

    def close(self) -> None:
        if self._coro is not None:
            self._coro.close()

    async def __aenter__(self) -> G:
        self._guard = await self._start()
        return self._guard

    async def __aexit__(
        self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        if self._guard is not None:
            await self._guard.__aexit__(et, ev, tb)

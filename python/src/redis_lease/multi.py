"""Several lock keys at once, all or nothing (``RWLOCK.MLOCK``): one guard, one watchdog thread
renewing every key with ``RWLOCK.MRENEW``, one lost signal.

>>> import redis
>>> from redis_lease import MultiLock
>>> lock = MultiLock(redis.Redis(), ["{acct}:1", "{acct}:2"], ttl=5.0)  # doctest: +SKIP
>>> with lock.write(timeout=10.0) as guard:                         # doctest: +SKIP
...     guard.tokens
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, List, Optional, Sequence

import redis

from .errors import LeaseLost, LossReason, NotAcquired
from .retry import Fatal, classify, error_code

#: The most keys one request takes (the module's limit).
MAX_KEYS = 64


class MultiGuard:
    """The holds of one owner on every key of a :class:`MultiLock`, renewed together. ``lost``
    is set (and ``reason`` says why) when any hold can no longer be proven live."""

    def __init__(self, lock: "MultiLock", owner: str, mode: str, tokens: List[int], sent: float) -> None:
        self._lock = lock
        self.owner = owner
        self.mode = mode
        self.tokens = tokens
        self.lost = threading.Event()
        self.reason: Optional[LossReason] = None
        self._valid_until = sent + lock.ttl - lock.drift
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="redis-lease-multi", daemon=True)
        self._thread.start()

    @property
    def keys(self) -> List[Any]:
        return list(self._lock.keys)

    def _lose(self, reason: LossReason) -> None:
        if self.reason is None:
            self.reason = reason
            self.lost.set()

    def _watch(self) -> None:
        lock = self._lock
        every = lock.ttl / 3
        last = time.monotonic()
        while not self._stop.wait(max(0.0, last + every - time.monotonic())):
            sent = time.monotonic()
            if sent >= self._valid_until:
                self._lose(LossReason.EXPIRED)
                return
            try:
                n = lock._client.execute_command("RWLOCK.MRENEW", *lock._mrenew_args(self.owner))
            except redis.ResponseError as e:
                self._lose(LossReason.MAX_HOLD if error_code(e) == "MAXHOLD" else LossReason.FAILED)
                return
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                continue  # retried at the next period, until the local bound passes
            if int(n) < len(lock.keys):
                self._lose(LossReason.REVOKED)
                return
            last = sent
            self._valid_until = sent + lock.ttl - lock.drift

    @property
    def held(self) -> bool:
        return self.reason is None and time.monotonic() < self._valid_until

    def check(self) -> None:
        """Raises :class:`LeaseLost` unless every hold is still live by the local bound."""
        if self.reason is not None:
            raise LeaseLost(self.reason)
        if time.monotonic() >= self._valid_until:
            raise LeaseLost(LossReason.EXPIRED)

    def release(self) -> bool:
        """Releases every key (``RWLOCK.MUNLOCK``); True if every key was still held."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=self._lock.ttl)
        n = self._lock._client.execute_command("RWLOCK.MUNLOCK", len(self._lock.keys), *self._lock.keys, self.owner)
        if self.reason is None:
            self.reason = LossReason.RELEASED
        return int(n) == len(self._lock.keys)

    def __enter__(self) -> "MultiGuard":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"MultiGuard(keys={self._lock.keys!r}, owner={self.owner!r}, tokens={self.tokens!r})"


class MultiLock:
    """A lock on several keys taken together: granted on every key at once or not at all, and
    while it waits it keeps its place in every key's queue (the server's FIFO order), so two
    multi-key locks never deadlock each other. Every acquisition uses a fresh UUIDv4 owner.

    ``ttl`` and ``max_hold`` are in seconds; ``max_hold`` caps each hold from its grant,
    renewals included (``MAXHOLD``): at the cap the guard is lost with
    :attr:`LossReason.MAX_HOLD`. A wait that would deadlock raises :class:`Deadlock`."""

    def __init__(
        self,
        client: Any,
        keys: Sequence[Any],
        ttl: float = 10.0,
        max_hold: Optional[float] = None,
        drift: Optional[float] = None,
    ) -> None:
        keys = list(keys)
        if not keys or len(keys) > MAX_KEYS or len(set(keys)) != len(keys):
            raise ValueError("a MultiLock takes 1 to 64 distinct keys")
        self._client: Any = client
        self.keys = keys
        self.ttl = ttl
        self.max_hold = max_hold
        self.drift = drift if drift is not None else 0.002 + ttl * 0.01

    def _ms(self, seconds: float) -> int:
        return max(1, int(seconds * 1000))

    def _mrenew_args(self, owner: str) -> List[Any]:
        return [len(self.keys), *self.keys, owner, self._ms(self.ttl)]

    def acquire(self, mode: str = "write", timeout: Optional[float] = None) -> Optional[MultiGuard]:
        """Takes every key in ``mode`` ("read" or "write"); None if not granted within
        ``timeout`` seconds (None: wait without limit; 0: try once)."""
        if mode not in ("read", "write"):
            raise ValueError(f"mode must be 'read' or 'write', not {mode!r}")
        owner = str(uuid.uuid4())
        args: List[Any] = [len(self.keys), *self.keys, owner, self._ms(self.ttl)]
        if mode == "read":
            args.append("READ")
        if timeout is None:
            args += ["WAIT", 0]
        elif timeout > 0:
            args += ["WAIT", self._ms(timeout)]
        if self.max_hold is not None:
            args += ["MAXHOLD", self._ms(self.max_hold)]
        sent = time.monotonic()
        try:
            reply = self._client.execute_command("RWLOCK.MLOCK", *args)
        except Exception as e:  # noqa: BLE001 - sorted just below
            failure = classify(e)
            if isinstance(failure, Fatal):
                raise failure.error from e
            # A lost reply may hide a grant: give it back (the owner is fresh, so these holds
            # are this request's only), then report the failure.
            try:
                self._client.execute_command("RWLOCK.MUNLOCK", len(self.keys), *self.keys, owner)
            finally:
                raise
        if reply is None:
            return None
        return MultiGuard(self, owner, mode, [int(t) for t in reply], sent)

    def write(self, timeout: Optional[float] = None) -> MultiGuard:
        """Takes every key for writing; :class:`NotAcquired` if not granted in time."""
        g = self.acquire("write", timeout)
        if g is None:
            raise NotAcquired(f"the write locks on {self.keys!r} were not granted in time")
        return g

    def read(self, timeout: Optional[float] = None) -> MultiGuard:
        """Takes a read lock on every key; :class:`NotAcquired` if not granted in time."""
        g = self.acquire("read", timeout)
        if g is None:
            raise NotAcquired(f"the read locks on {self.keys!r} were not granted in time")
        return g

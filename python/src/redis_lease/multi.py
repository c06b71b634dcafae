"""Several lock keys at once, all or nothing (``RWLOCK.MLOCK``): one guard, one watchdog
renewing every key with ``RWLOCK.MRENEW``, one lost signal.

>>> import redis
>>> from redis_lease import MultiLock
>>> lock = MultiLock(redis.Redis(), ["{acct}:1", "{acct}:2"], ttl=5.0)  # doctest: +SKIP
>>> with lock.write(timeout=10.0) as guard:                         # doctest: +SKIP
...     guard.tokens
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .connector import Connector
from .errors import NotAcquired
from .guards import MultiGuard, acquire
from .retry import RetryPolicy
from .spec import MAX_KEYS, Spec, check_keys, check_timeout

__all__ = ["MAX_KEYS", "MultiGuard", "MultiLock"]


class MultiLock:
    """A lock on several keys taken together: granted on every key at once or not at all, and
    while it waits it keeps its place in every key's queue (the server's FIFO order), so two
    multi-key locks never deadlock each other. In a cluster every key must hash to one slot
    (a hash tag: ``{acct}:1``, ``{acct}:2``); requests are routed by the first key.

    The options are :class:`~redis_lease.RwLock`'s, but every acquisition uses a fresh UUIDv4
    owner (no ``owner=``). ``max_hold`` caps each hold from its grant, renewals included
    (``MAXHOLD``): the guard is renewed up to the cap and lost there with
    :attr:`LossReason.MAX_HOLD`. A wait that would deadlock raises :class:`Deadlock`.
    Transient failures are retried within the caller's timeout; after a lost reply whatever
    may have been granted is given back (``RWLOCK.MUNLOCK``) and asked for again.
    """

    def __init__(
        self,
        client: Any,
        keys: Sequence[Any],
        ttl: float = 10.0,
        *,
        renew_every: Optional[float] = None,
        retry: Optional[RetryPolicy] = None,
        command_timeout: float = 2.0,
        raise_on_lost: bool = True,
        max_hold: Optional[float] = None,
    ) -> None:
        self.keys = check_keys(keys)
        self.connector = Connector.of(client)
        self.spec = Spec.of(self.keys[0], ttl, None, renew_every, retry, command_timeout, raise_on_lost, max_hold)

    def acquire(self, mode: str = "write", timeout: Optional[float] = None) -> Optional[MultiGuard]:
        """Takes every key in ``mode`` ("read" or "write"), waiting at most ``timeout`` seconds
        (None: without a limit; 0: try once). Answers None if not granted in time."""
        kind = self.spec.multi_kind(self.keys, mode)
        return acquire(
            self.connector,
            self.spec,
            kind,
            check_timeout(timeout),
            lambda g: MultiGuard(self.connector, self.spec, kind, g, self.keys, mode),
        )

    def _must(self, mode: str, timeout: Optional[float]) -> MultiGuard:
        g = self.acquire(mode, timeout)
        if g is None:
            raise NotAcquired(f"{mode} locks on {self.keys!r} not granted within {timeout}s")
        return g

    def write(self, timeout: Optional[float] = None) -> MultiGuard:
        """Takes every key for writing; :class:`NotAcquired` if not granted in time."""
        return self._must("write", timeout)

    def read(self, timeout: Optional[float] = None) -> MultiGuard:
        """Takes a read lock on every key; :class:`NotAcquired` if not granted in time."""
        return self._must("read", timeout)

    def try_write(self) -> Optional[MultiGuard]:
        """Every key's write lock if all are free now, else None."""
        return self.acquire("write", 0)

    def try_read(self) -> Optional[MultiGuard]:
        """A read lock on every key if all can be had now, else None."""
        return self.acquire("read", 0)

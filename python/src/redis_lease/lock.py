"""Sync read-write locks (``RWLOCK.*``)."""

from __future__ import annotations

from typing import Any, Optional

from . import protocol, replies
from .connector import Connector
from .errors import NotAcquired
from .guards import LockGuard, acquire
from .retry import RetryPolicy
from .spec import Spec, check_timeout


class RwLock:
    """A distributed read-write lock on one key.

    ``client``: a ``redis.Redis``, a ``redis.cluster.RedisCluster``, a Sentinel
    ``master_for(...)`` client, or a :class:`Connector`. ``ttl``: the lease in seconds (sent to
    the server as whole ms, rounded up). Every acquisition uses a fresh UUIDv4 owner, so guards
    of one ``RwLock`` shared by threads exclude each other like guards of different processes;
    with ``owner=...`` every acquisition uses that id and the server's reentrancy applies (each
    grant needs its own release).

    Acquisition is one request that waits inside the server (``WAIT``), on a connection of its
    own: no polling. Only transient failures are retried, with exponential backoff and full
    jitter, within the caller's timeout; after a lost reply the client adopts the hold it may
    have been granted (read from ``RWLOCK.INFO``) instead of taking a second one.
    """

    def __init__(
        self,
        client: Any,
        key: Any,
        ttl: float = 10.0,
        *,
        owner: Optional[str] = None,
        renew_every: Optional[float] = None,
        retry: Optional[RetryPolicy] = None,
        command_timeout: float = 2.0,
        raise_on_lost: bool = True,
        max_hold: Optional[float] = None,
    ) -> None:
        self.connector = Connector.of(client)
        self.spec = Spec.of(key, ttl, owner, renew_every, retry, command_timeout, raise_on_lost, max_hold)

    @property
    def key(self) -> Any:
        return self.spec.key

    def acquire(self, mode: str, timeout: Optional[float] = None) -> Optional[LockGuard]:
        """Acquires in ``mode`` ("read" or "write"), waiting at most ``timeout`` seconds (None:
        without a limit; 0: try once). Answers None if not granted in time."""
        kind = self.spec.lock_kind(mode)
        return acquire(
            self.connector,
            self.spec,
            kind,
            check_timeout(timeout),
            lambda g: LockGuard(self.connector, self.spec, kind, g, mode),
        )

    def _must(self, mode: str, timeout: Optional[float]) -> LockGuard:
        g = self.acquire(mode, timeout)
        if g is None:
            raise NotAcquired(f"{mode} lock on {self.key!r} not granted within {timeout}s")
        return g

    def read(self, timeout: Optional[float] = None) -> LockGuard:
        """Takes a read lock, waiting at most ``timeout`` seconds (None: as long as it takes).
        Raises :class:`NotAcquired` on timeout. Use as ``with lock.read() as guard: ...``."""
        return self._must("read", timeout)

    def write(self, timeout: Optional[float] = None) -> LockGuard:
        """Takes the write lock, waiting at most ``timeout`` seconds (None: as long as it
        takes). Raises :class:`NotAcquired` on timeout."""
        return self._must("write", timeout)

    def try_read(self) -> Optional[LockGuard]:
        """A read lock if it is free now, else None."""
        return self.acquire("read", 0)

    def try_write(self) -> Optional[LockGuard]:
        """The write lock if it is free now, else None."""
        return self.acquire("write", 0)

    def info(self) -> replies.LockInfo:
        """``RWLOCK.INFO`` (transient failures retried)."""
        call = protocol.Call(("RWLOCK.INFO", self.key), self.spec.command_timeout)
        return replies.lock_info(self.connector.run(protocol.query_retry(call, None, self.spec.retry)))

"""Sync counting semaphores (``SEMAPHORE.*``)."""

from __future__ import annotations

from typing import Any, Optional

from . import protocol, replies
from .connector import Connector
from .errors import NotAcquired
from .guards import SemaphoreGuard, acquire
from .retry import RetryPolicy
from .spec import Spec, check_limit, check_timeout


class Semaphore:
    """A counting semaphore with a lease per holder: at most ``limit`` permits held at once.

    Each acquisition uses a fresh UUIDv4 owner (or ``owner=...``) and takes ``permits``
    permits as one hold. Waiters are served in arrival order inside the server. A retry after
    a lost reply is exact (the server answers a current holder's token again).
    """

    def __init__(
        self,
        client: Any,
        key: Any,
        limit: int,
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
        self.limit = check_limit(limit)
        self.spec = Spec.of(key, ttl, owner, renew_every, retry, command_timeout, raise_on_lost, max_hold)

    @property
    def key(self) -> Any:
        return self.spec.key

    def acquire(self, permits: int = 1, timeout: Optional[float] = None) -> SemaphoreGuard:
        """Takes ``permits`` permits, waiting at most ``timeout`` seconds (None: as long as it
        takes). Raises :class:`NotAcquired` on timeout. ``with sem.acquire() as g: ...``."""
        g = self._acquire(permits, check_timeout(timeout))
        if g is None:
            raise NotAcquired(f"{permits} permits of {self.key!r} not granted within {timeout}s")
        return g

    def try_acquire(self, permits: int = 1) -> Optional[SemaphoreGuard]:
        """``permits`` permits if they are free now (and nobody waits before us), else None."""
        return self._acquire(permits, 0.0)

    def _acquire(self, permits: int, wait: Optional[float]) -> Optional[SemaphoreGuard]:
        kind = self.spec.semaphore_kind(self.limit, permits)
        return acquire(
            self.connector, self.spec, kind, wait, lambda g: SemaphoreGuard(self.connector, self.spec, kind, g, permits)
        )

    def info(self) -> replies.SemaphoreInfo:
        """``SEMAPHORE.INFO`` (transient failures retried)."""
        call = protocol.Call(("SEMAPHORE.INFO", self.key), self.spec.command_timeout)
        return replies.semaphore_info(self.connector.run(protocol.query_retry(call, None, self.spec.retry)))

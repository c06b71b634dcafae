"""asyncio read-write locks (``RWLOCK.*``): the same as :class:`redis_lease.RwLock`."""

from __future__ import annotations

from typing import Any, Optional

from .. import protocol, replies
from ..errors import NotAcquired
from ..retry import RetryPolicy
from ..spec import Spec, check_timeout
from .connector import Connector
from .guards import Acquiring, LockGuard, acquire


class RwLock:
    """A distributed read-write lock on one key, on ``redis.asyncio``
    (see :class:`redis_lease.RwLock`)::

        async with lock.write(timeout=10.0) as guard: ...
        guard = await lock.try_write()
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

    async def acquire(self, mode: str, timeout: Optional[float] = None) -> Optional[LockGuard]:
        """Acquires in ``mode``, waiting at most ``timeout`` seconds (None: no limit; 0: try
        once). Answers None if not granted in time."""
        kind = self.spec.lock_kind(mode)
        return await acquire(
            self.connector,
            self.spec,
            kind,
            check_timeout(timeout),
            lambda g: LockGuard(self.connector, self.spec, kind, g, mode),
        )

    async def _must(self, mode: str, timeout: Optional[float]) -> LockGuard:
        g = await self.acquire(mode, timeout)
        if g is None:
            raise NotAcquired(f"{mode} lock on {self.key!r} not granted within {timeout}s")
        return g

    def read(self, timeout: Optional[float] = None) -> Acquiring[LockGuard]:
        """A read lock (:class:`NotAcquired` on timeout): ``await`` it or ``async with`` it."""
        return Acquiring(lambda: self._must("read", timeout))

    def write(self, timeout: Optional[float] = None) -> Acquiring[LockGuard]:
        """The write lock (:class:`NotAcquired` on timeout): ``await`` it or ``async with`` it."""
        return Acquiring(lambda: self._must("write", timeout))

    async def try_read(self) -> Optional[LockGuard]:
        return await self.acquire("read", 0)

    async def try_write(self) -> Optional[LockGuard]:
        return await self.acquire("write", 0)

    async def info(self) -> replies.LockInfo:
        call = protocol.Call(("RWLOCK.INFO", self.key), self.spec.command_timeout)
        return replies.lock_info(await self.connector.run(protocol.query_retry(call, None, self.spec.retry)))

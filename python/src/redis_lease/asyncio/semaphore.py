"""asyncio counting semaphores (``SEMAPHORE.*``): the same as :class:`redis_lease.Semaphore`."""

from __future__ import annotations

from typing import Any, Optional

from .. import protocol, replies
from ..errors import NotAcquired
from ..retry import RetryPolicy
from ..spec import Spec, check_limit, check_timeout
from .connector import Connector
from .guards import Acquiring, SemaphoreGuard, acquire


class Semaphore:
    """``async with Semaphore(r, "api", limit=5, ttl=5.0).acquire(permits=1) as g: ...``"""

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

    def acquire(self, permits: int = 1, timeout: Optional[float] = None) -> Acquiring[SemaphoreGuard]:
        """``permits`` permits (:class:`NotAcquired` on timeout): ``await`` or ``async with``."""

        async def start() -> SemaphoreGuard:
            g = await self._acquire(permits, check_timeout(timeout))
            if g is None:
                raise NotAcquired(f"{permits} permits of {self.key!r} not granted within {timeout}s")
            return g

        return Acquiring(start)

    async def try_acquire(self, permits: int = 1) -> Optional[SemaphoreGuard]:
        return await self._acquire(permits, 0.0)

    async def _acquire(self, permits: int, wait: Optional[float]) -> Optional[SemaphoreGuard]:
        kind = self.spec.semaphore_kind(self.limit, permits)
        return await acquire(
            self.connector, self.spec, kind, wait, lambda g: SemaphoreGuard(self.connector, self.spec, kind, g, permits)
        )

    async def info(self) -> replies.SemaphoreInfo:
        call = protocol.Call(("SEMAPHORE.INFO", self.key), self.spec.command_timeout)
        return replies.semaphore_info(await self.connector.run(protocol.query_retry(call, None, self.spec.retry)))

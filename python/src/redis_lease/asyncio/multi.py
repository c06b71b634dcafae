"""asyncio multi-key locks (``RWLOCK.MLOCK``): the same as :class:`redis_lease.MultiLock`."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ..errors import NotAcquired
from ..retry import RetryPolicy
from ..spec import Spec, check_keys, check_timeout
from .connector import Connector
from .guards import Acquiring, MultiGuard, acquire


class MultiLock:
    """A lock on several keys taken together, on ``redis.asyncio``
    (see :class:`redis_lease.MultiLock`)::

        async with MultiLock(client, ["{acct}:1", "{acct}:2"]).write(timeout=10.0) as guard:
            guard.tokens
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

    async def acquire(self, mode: str = "write", timeout: Optional[float] = None) -> Optional[MultiGuard]:
        """Takes every key in ``mode``, waiting at most ``timeout`` seconds (None: no limit; 0:
        try once). Answers None if not granted in time."""
        kind = self.spec.multi_kind(self.keys, mode)
        return await acquire(
            self.connector,
            self.spec,
            kind,
            check_timeout(timeout),
            lambda g: MultiGuard(self.connector, self.spec, kind, g, self.keys, mode),
        )

    async def _must(self, mode: str, timeout: Optional[float]) -> MultiGuard:
        g = await self.acquire(mode, timeout)
        if g is None:
            raise NotAcquired(f"{mode} locks on {self.keys!r} not granted within {timeout}s")
        return g

    def write(self, timeout: Optional[float] = None) -> Acquiring[MultiGuard]:
        """Every key's write lock (:class:`NotAcquired` on timeout): ``await`` or ``async with``."""
        return Acquiring(lambda: self._must("write", timeout))

    def read(self, timeout: Optional[float] = None) -> Acquiring[MultiGuard]:
        """A read lock on every key (:class:`NotAcquired` on timeout)."""
        return Acquiring(lambda: self._must("read", timeout))

    async def try_write(self) -> Optional[MultiGuard]:
        return await self.acquire("write", 0)

    async def try_read(self) -> Optional[MultiGuard]:
        return await self.acquire("read", 0)

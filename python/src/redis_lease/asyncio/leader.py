"""asyncio leader election and observation: the same as :mod:`redis_lease.leader`."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, AsyncIterator, Optional, Type

from redis import exceptions as rx

from .. import protocol, replies
from ..errors import NotAcquired
from ..leader import _same
from ..retry import Backoff, RetryPolicy
from ..spec import Spec, check_timeout
from .connector import Connector
from .guards import Acquiring, Leadership, acquire, spawn


async def current_leader(
    connector: Connector, key: Any, command_timeout: float = 2.0, retry: Optional[RetryPolicy] = None
) -> Optional[replies.LeaderInfo]:
    call = protocol.Call(("LEADER.CURRENT", key), command_timeout)
    return replies.leader_info(await connector.run(protocol.query_retry(call, None, retry or RetryPolicy())))


async def election_info(
    client: Any, key: Any, command_timeout: float = 2.0, retry: Optional[RetryPolicy] = None
) -> replies.ElectionInfo:
    """``LEADER.INFO key`` (see :func:`redis_lease.election_info`)."""
    call = protocol.Call(("LEADER.INFO", key), command_timeout)
    return replies.election_info(
        await Connector.of(client).run(protocol.query_retry(call, None, retry or RetryPolicy()))
    )


class LeaderElector:
    """``async with LeaderElector(r, "scheduler", ttl=5.0).leadership() as lead: ...``
    (see :class:`redis_lease.LeaderElector`)."""

    def __init__(
        self,
        client: Any,
        key: Any,
        ttl: float = 10.0,
        *,
        candidate: Optional[str] = None,
        renew_every: Optional[float] = None,
        retry: Optional[RetryPolicy] = None,
        command_timeout: float = 2.0,
        raise_on_lost: bool = True,
        max_hold: Optional[float] = None,
    ) -> None:
        self.connector = Connector.of(client)
        self.spec = Spec.of(key, ttl, candidate, renew_every, retry, command_timeout, raise_on_lost, max_hold)
        #: The caller's candidate id; None: a fresh UUIDv4 per campaign (per Leadership).
        self.candidate: Optional[str] = candidate

    @property
    def key(self) -> Any:
        return self.spec.key

    async def campaign(self, timeout: Optional[float] = None) -> Optional[Leadership]:
        kind = self.spec.leader_kind()
        return await acquire(
            self.connector,
            self.spec,
            kind,
            check_timeout(timeout),
            lambda g: Leadership(self.connector, self.spec, kind, g),
        )

    def leadership(self, timeout: Optional[float] = None) -> Acquiring[Leadership]:
        async def start() -> Leadership:
            lead = await self.campaign(timeout)
            if lead is None:
                raise NotAcquired(f"not elected leader of {self.key!r} within {timeout}s")
            return lead

        return Acquiring(start)

    async def try_lead(self) -> Optional[Leadership]:
        return await self.campaign(0)

    async def current(self) -> Optional[replies.LeaderInfo]:
        return await current_leader(self.connector, self.key, self.spec.command_timeout, self.spec.retry)

    async def observe(self, configure_notifications: bool = True) -> "LeaderObserver":
        return await LeaderObserver.start(self.connector, self.key, configure_notifications=configure_notifications)


async def ensure_notifications(connector: Connector, key: Any, command_timeout: float) -> None:
    get = protocol.Call(("CONFIG", "GET", "notify-keyspace-events"), command_timeout, route=key)
    policy = RetryPolicy(budget=command_timeout)
    current = protocol.notify_flags(await connector.run(protocol.query_retry(get, None, policy)))
    missing = protocol.missing_notify_flags(current)
    if missing:
        set_ = protocol.Call(("CONFIG", "SET", "notify-keyspace-events", current + missing), command_timeout, route=key)
        await connector.run(protocol.query_retry(set_, None, policy))


class LeaderObserver:
    """Follows who leads an election without polling (see :class:`redis_lease.LeaderObserver`).
    Start it with ``await LeaderObserver.start(r, key)`` (or ``async with``)."""

    def __init__(
        self, connector: Connector, key: Any, configure: bool, retry: RetryPolicy, command_timeout: float
    ) -> None:
        self.connector = connector
        self.key = key
        self._configure = configure
        self._retry = retry
        self._timeout = command_timeout
        self._current: Optional[replies.LeaderInfo] = None
        self._version = 0
        self._seen = 0
        self._changed = asyncio.Condition()
        self._sub: Any = None
        self._task: Optional["asyncio.Task[Any]"] = None
        self._closed = False

    @classmethod
    async def start(
        cls,
        client: Any,
        key: Any,
        *,
        configure_notifications: bool = True,
        retry: Optional[RetryPolicy] = None,
        command_timeout: float = 2.0,
    ) -> "LeaderObserver":
        obs = cls(Connector.of(client), key, configure_notifications, retry or RetryPolicy(), command_timeout)
        obs._sub = await obs._subscribe()
        obs._current = await obs._read()
        obs._task = spawn(obs._loop())
        return obs

    @property
    def current(self) -> Optional[replies.LeaderInfo]:
        return self._current

    async def next_change(self, timeout: Optional[float] = None) -> Optional[replies.LeaderInfo]:
        """Waits for the next change since the last one answered (or the start); raises
        ``TimeoutError`` if none comes within ``timeout`` seconds."""
        async with self._changed:
            seen = self._seen
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: self._version != seen or self._closed), timeout)
            except asyncio.TimeoutError:
                raise TimeoutError(f"no change of leader of {self.key!r} within {timeout}s") from None
            if self._version == seen:
                raise RuntimeError("the observer is closed")
            self._seen = self._version
            return self._current

    async def changes(self) -> AsyncIterator[Optional[replies.LeaderInfo]]:
        while not self._closed:
            try:
                yield await self.next_change()
            except RuntimeError:
                return

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if self._sub is not None:
            await self._sub.disconnect(nowait=True)
        async with self._changed:
            self._changed.notify_all()

    async def __aenter__(self) -> "LeaderObserver":
        return self

    async def __aexit__(
        self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.close()

    async def _subscribe(self) -> Any:
        if self._configure:
            await ensure_notifications(self.connector, self.key, self._timeout)
        conn, channel = await self.connector.subscriber(self.key)
        try:
            await asyncio.wait_for(conn.connect(), self._timeout)
            await conn.send_command("SUBSCRIBE", channel)
            await asyncio.wait_for(conn.read_response(), self._timeout)
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        return conn

    async def _read(self) -> Optional[replies.LeaderInfo]:
        return await current_leader(self.connector, self.key, self._timeout, self._retry)

    async def _publish(self, info: Optional[replies.LeaderInfo]) -> None:
        if not _same(self._current, info):
            async with self._changed:
                self._current = info
                self._version += 1
                self._changed.notify_all()

    async def _loop(self) -> None:
        while not self._closed:
            try:
                while True:
                    # No timeout: nothing is asked of the server; close() cancels this task.
                    msg = await self._sub.read_response()
                    if isinstance(msg, (list, tuple)) and msg and replies.text(msg[0]) == "message":
                        await self._reread()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - any failure of the subscription: subscribe again
                await self._sub.disconnect(nowait=True)
            backoff = Backoff(self._retry)
            while not self._closed:
                try:
                    self._sub = await self._subscribe()
                    break
                except (rx.RedisError, OSError, asyncio.TimeoutError):
                    d = backoff.next_delay(None)
                    await asyncio.sleep(d if d is not None else self._retry.max_delay)
            await self._reread()

    async def _reread(self) -> None:
        try:
            await self._publish(await self._read())
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the next event reads again
            pass

"""The asyncio connector: this package's own ``redis.asyncio`` connections to the deployment
behind a client (``redis.asyncio.Redis``, ``redis.asyncio.cluster.RedisCluster``, or a
Sentinel ``master_for(...)``), and the driver that runs the generators of
:mod:`redis_lease.protocol` on them. See :class:`redis_lease.Connector` for the design."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
from typing import Any, Dict, List, Optional, Set, Tuple, TypeVar

import redis.asyncio.connection as aconn
from redis import exceptions as rx
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from ..errors import LeaseError, typed_reply_error
from ..protocol import Call, Failed, Machine, Sleep
from ..routing import (
    SWITCH_MASTER,
    Address,
    HostPort,
    keyspace_channel,
    master_switch,
    redirection,
    sentinel_pool,
    subscriber_kwargs,
    tuned_kwargs,
)

T = TypeVar("T")

_log = logging.getLogger("redis_lease")

MAX_IDLE = 8

#: See :data:`redis_lease.connector.DEMOTED_FOR`.
DEMOTED_FOR = 60.0

# Where a client keeps its connector.
_ATTR = "_redis_lease_connector"
# Where a connection of ours keeps the connector's epoch (master switches seen) it was made in.
_EPOCH = "_redis_lease_epoch"


def interrupt(conn: Any) -> None:
    """Ends the request another task has in flight on ``conn``: its read sees the connection
    closed (that task disconnects it)."""
    writer = getattr(conn, "_writer", None)
    if writer is not None:
        writer.transport.abort()


class _SentinelWatch:
    """Follows the sentinels' ``+switch-master`` for the service of a Sentinel-managed client
    (see :class:`redis_lease.connector._SentinelWatch`): a task and a subscription of its own
    per sentinel, on the loop that started it. It holds the connector weakly; :meth:`close`
    (from :meth:`Connector.close`) ends it, and so does the connector's collection."""

    def __init__(self, connector: "Connector", pool: Any) -> None:
        manager = pool.sentinel_manager
        force_ip = getattr(manager, "_force_master_ip", None)
        ref = weakref.ref(connector)
        loop = asyncio.get_running_loop()
        self.tasks: List["asyncio.Task[None]"] = [
            loop.create_task(
                self._follow(ref, s.connection_pool, str(pool.service_name), force_ip, connector.command_timeout)
            )
            for s in list(manager.sentinels)
        ]
        # A connector dropped without close(): its tasks end with it.
        self._finalizer = weakref.finalize(connector, _cancel_soon, loop, list(self.tasks))

    async def close(self) -> None:
        self._finalizer.detach()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _follow(
        self, ref: "weakref.ref[Connector]", spool: Any, service: str, force_ip: Optional[str], timeout: float
    ) -> None:
        delay = 0.05
        subscribed = False
        while ref() is not None:
            cls = spool.connection_class
            conn = cls(**subscriber_kwargs(spool.connection_kwargs, None, issubclass(cls, aconn.Connection)))
            try:
                await asyncio.wait_for(conn.connect(), timeout)
                await conn.send_command("SUBSCRIBE", SWITCH_MASTER)
                await asyncio.wait_for(conn.read_response(), timeout)
                if subscribed:
                    # A failover may have been announced while this subscription was down.
                    c = ref()
                    if c is not None:
                        await c._resubscribed()
                    del c
                subscribed, delay = True, 0.05
                while True:
                    # No timeout: nothing is asked of the sentinel; close() cancels this task.
                    switch = master_switch(service, await conn.read_response(), force_ip)
                    if switch is not None:
                        c = ref()
                        if c is None:
                            return
                        await c._switched(*switch)
                        del c
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - any failure of the subscription: subscribe again
                pass
            finally:
                await conn.disconnect(nowait=True)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


def _cancel_soon(loop: asyncio.AbstractEventLoop, tasks: List["asyncio.Task[None]"]) -> None:
    """Cancels ``tasks`` on their loop, from wherever a finalizer runs."""
    try:
        for t in tasks:
            loop.call_soon_threadsafe(t.cancel)
    except RuntimeError:
        pass  # the loop is closed: so are its tasks


class Connector:
    """Connections of this package's own (see :class:`redis_lease.Connector`), on asyncio.
    Use it from one event loop. With a Sentinel-managed client it follows the sentinels'
    master switches, as the sync connector does; :meth:`close` stops that."""

    def __init__(self, client: Any, command_timeout: float = 2.0) -> None:
        if isinstance(client, Connector):
            raise TypeError("already a Connector")
        self.client = client
        self.command_timeout = command_timeout
        self.is_cluster = isinstance(client, RedisCluster)
        self._idle: Dict[Address, List[Any]] = {}
        self._pid = os.getpid()
        self._moved: Dict[int, Tuple[str, int]] = {}
        self._refresh = False
        # Sentinel (see redis_lease.Connector).
        self._sentinel = None if self.is_cluster else sentinel_pool(client)
        self._watch: Optional[_SentinelWatch] = None
        self._epoch = 0
        self._last_switch: Optional[Tuple[HostPort, HostPort]] = None
        self._demoted: Dict[HostPort, float] = {}
        self._busy: Set[Any] = set()
        self._wakes: "weakref.WeakSet[asyncio.Event]" = weakref.WeakSet()

    @classmethod
    def of(cls, client: Any) -> "Connector":
        """The shared connector of ``client`` (or ``client`` itself if it is a Connector). It
        is kept on the client object, so both are collected together."""
        if isinstance(client, Connector):
            return client
        c = getattr(client, _ATTR, None)
        if not isinstance(c, Connector):
            c = cls(client)
            try:
                setattr(client, _ATTR, c)
            except AttributeError:
                pass  # a client class with __slots__: a connector per lock then
        return c

    def db(self) -> int:
        if self.is_cluster:
            return 0
        return int(self.client.connection_pool.connection_kwargs.get("db", 0) or 0)

    def _node_pool(self, addr: Address) -> Tuple[type, Dict[str, Any]]:
        if addr is None:
            pool = self.client.connection_pool
            return pool.connection_class, dict(pool.connection_kwargs)
        node = self.client.get_node(host=addr[0], port=addr[1])
        if node is None:
            node = self.client.get_default_node() or self.client.get_nodes()[0]
        kw = dict(node.connection_kwargs)
        kw["host"], kw["port"] = addr
        return node.connection_class, kw

    def new_connection(self, addr: Address, protocol: Optional[int] = None) -> Any:
        cls, kw = self._node_pool(addr)
        # No socket timeout of its own: every read passes its limit (None: a wait without one).
        kw = tuned_kwargs(kw, None, issubclass(cls, aconn.Connection))
        kw["socket_connect_timeout"] = self.command_timeout
        if protocol is not None:
            kw["protocol"] = protocol
            if "maint_notifications_config" in kw:
                kw["maint_notifications_config"] = None
                kw.pop("maint_notifications_pool_handler", None)
        return cls(**kw)

    def _forked(self) -> None:
        """In a child made by ``fork``: forgets the parent's idle connections without touching
        them (see :class:`redis_lease.Connector`)."""
        if self._pid != os.getpid():
            self._idle = {}
            self._busy = set()
            self._wakes = weakref.WeakSet()
            self._watch = None
            self._pid = os.getpid()

    def _take(self, addr: Address) -> Any:
        self._forked()
        idle = self._idle.get(addr)
        if idle:
            return idle.pop()
        conn = self.new_connection(addr)
        setattr(conn, _EPOCH, self._epoch)
        return conn

    async def _put(self, addr: Address, conn: Any) -> None:
        self._forked()
        if getattr(conn, "pid", self._pid) != self._pid:
            return  # made before a fork, in the parent: not ours to reuse or close
        idle = self._idle.setdefault(addr, [])
        if len(idle) < MAX_IDLE and getattr(conn, _EPOCH, self._epoch) == self._epoch:
            idle.append(conn)
        else:
            await conn.disconnect()

    async def close(self) -> None:
        """Closes the idle connections and stops following the sentinels (a later request
        starts again)."""
        self._forked()
        idle, self._idle = self._idle, {}
        watch, self._watch = self._watch, None
        if watch is not None:
            await watch.close()
        for conns in idle.values():
            for c in conns:
                await c.disconnect()

    # -- Sentinel (see redis_lease.Connector) --------------------------------------------------

    def _follow_sentinels(self) -> None:
        if self._sentinel is None:
            return
        self._forked()
        if self._watch is None:
            self._watch = _SentinelWatch(self, self._sentinel)

    async def _switched(self, old: HostPort, new: HostPort) -> None:
        if self._last_switch == (old, new):
            return
        self._last_switch = (old, new)
        self._epoch += 1
        self._demoted.pop(new, None)
        self._demoted[old] = time.monotonic() + DEMOTED_FOR
        idle, self._idle = self._idle, {}
        _log.warning(
            "redis-lease: Sentinel switched the master from %s:%d to %s:%d: connections to the old one are closed",
            *old,
            *new,
        )
        for c in list(self._busy):
            interrupt(c)
        for w in list(self._wakes):
            w.set()
        for conns in idle.values():
            for c in conns:
                await c.disconnect(nowait=True)

    async def _resubscribed(self) -> None:
        idle, self._idle = self._idle, {}
        self._last_switch = None
        for conns in idle.values():
            for c in conns:
                await c.disconnect(nowait=True)

    def _refusal(self, conn: Any) -> Optional[BaseException]:
        if not self._demoted:
            return None
        addr = (str(conn.host), int(conn.port))
        until = self._demoted.get(addr)
        if until is None or time.monotonic() >= until:
            return None
        return rx.ConnectionError(f"{addr[0]}:{addr[1]} is no longer the master (Sentinel +switch-master)")

    async def _stale(self, conn: Any) -> Optional[Failed]:
        if getattr(conn, _EPOCH, self._epoch) == self._epoch:
            return None
        await conn.disconnect(nowait=True)
        return Failed(rx.ConnectionError("the master changed (Sentinel +switch-master) before the reply"))

    async def address(self, key: Any) -> Address:
        if not self.is_cluster:
            return None
        if not self.client.nodes_manager.slots_cache:
            await self.client.initialize()
        if self._refresh:
            self._refresh = False
            self._moved.clear()
            try:
                await self.client.nodes_manager.initialize()
            except (rx.RedisError, rx.RedisClusterException, OSError):
                self._refresh = True
        slot = key_slot(self.client.encoder.encode(key))
        moved = self._moved.get(slot)
        if moved is not None:
            return moved
        node = self.client.nodes_manager.get_node_from_slot(slot)
        return (node.host, int(node.port))

    async def perform(self, call: Call) -> Any:
        """Sends one request and answers its reply, or a :class:`Failed` for an error."""
        self._follow_sentinels()
        ask: Optional[Tuple[str, int]] = None
        r: Any = None
        for _ in range(5):
            try:
                addr = ask or await self.address(call.key)
            except (rx.RedisError, rx.RedisClusterException, OSError) as e:
                # No route now (a slot not covered during a failover, no node reachable).
                self._refresh = True
                return Failed(e, sent=False)
            r = await self._once(addr, call, asking=ask is not None)
            ask = None
            if isinstance(r, Failed) and self.is_cluster:
                red = redirection(r.error)
                if red is not None:
                    if red.ask:
                        ask = (red.host, red.port)
                    else:
                        self._moved[red.slot] = (red.host, red.port)
                    continue
                if not isinstance(r.error, (rx.ResponseError, LeaseError)):  # a reply: the route was right
                    self._refresh = True
            return r
        return r

    async def _once(self, addr: Address, call: Call, asking: bool) -> Any:
        start = time.monotonic()
        try:
            conn = self._take(addr)
        except (rx.RedisError, rx.RedisClusterException, OSError) as e:
            self._refresh = True
            return Failed(e, sent=False)
        if self._sentinel is None:
            return await self._exchange(addr, conn, call, asking, start)
        # A master switch interrupts the requests in flight.
        self._busy.add(conn)
        try:
            return await self._exchange(addr, conn, call, asking, start)
        finally:
            self._busy.discard(conn)

    async def _exchange(self, addr: Address, conn: Any, call: Call, asking: bool, start: float) -> Any:
        limit = call.limit
        try:
            # Bounds the connect and its handshake too (a frozen server accepts TCP).
            bound = self.command_timeout if limit is None else min(self.command_timeout, max(limit, 0.001))
            await asyncio.wait_for(conn.connect(), bound)
            refused = self._refusal(conn)
            if refused is not None:
                raise refused
        except (rx.RedisError, OSError, asyncio.TimeoutError) as e:
            await conn.disconnect(nowait=True)
            return Failed(
                rx.TimeoutError("connect timed out") if isinstance(e, asyncio.TimeoutError) else e, sent=False
            )
        except BaseException:
            await conn.disconnect(nowait=True)
            raise

        def left() -> Optional[float]:
            return None if limit is None else max(limit - (time.monotonic() - start), 0.001)

        try:
            # Limits by cancellation: redis-py's own read timeout answers None (a nil reply!)
            # instead of raising.
            if asking:
                await conn.send_command("ASKING")
                await asyncio.wait_for(conn.read_response(), left() or self.command_timeout)
            await conn.send_command(*call.args)
            value = await asyncio.wait_for(conn.read_response(), left())
        except rx.ResponseError as e:
            stale = await self._stale(conn)
            if stale is not None:
                return stale
            await self._put(addr, conn)
            return Failed(typed_reply_error(e, f"{conn.host}:{conn.port}", call.args))
        except (rx.RedisError, OSError, asyncio.TimeoutError) as e:
            # A connection that timed out may still have the request parked in the server:
            # closing it makes the server drop the waiter.
            await conn.disconnect(nowait=True)
            return Failed(e if not isinstance(e, asyncio.TimeoutError) else rx.TimeoutError("no reply in time"))
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        stale = await self._stale(conn)
        if stale is not None:
            return stale
        await self._put(addr, conn)
        return value

    async def run(
        self, machine: Machine[T], stop: Optional[asyncio.Event] = None, wake: Optional[asyncio.Event] = None
    ) -> T:
        """Runs a generator of :mod:`redis_lease.protocol` to its end. With ``stop``: sleeps end
        early when it is set, and the generator is closed (the answer is then None). With
        ``wake`` (set by whoever sets ``stop`` too): a sleep that may end early ends when
        Sentinel switches the master, or ``wake`` is set (see :class:`redis_lease.Connector`)."""
        if wake is not None and self._sentinel is not None:
            self._forked()
            self._wakes.add(wake)
        try:
            op = next(machine)
            while True:
                if stop is not None and stop.is_set():
                    return None  # type: ignore[return-value]
                if isinstance(op, Sleep):
                    event = wake if op.early and wake is not None else stop
                    if event is None:
                        await asyncio.sleep(op.seconds)
                    else:
                        try:
                            await asyncio.wait_for(event.wait(), op.seconds)
                        except asyncio.TimeoutError:
                            pass
                        if wake is not None and event is wake:
                            wake.clear()
                    value: Any = None
                else:
                    value = await self.perform(op)
                op = machine.send(value)
        except StopIteration as s:
            return s.value  # type: ignore[no-any-return]
        finally:
            machine.close()

    async def subscriber(self, key: Any) -> Tuple[Any, str]:
        return self.new_connection(await self.address(key), protocol=2), keyspace_channel(self.db(), key)

"""The asyncio connector: this package's own ``redis.asyncio`` connections to the deployment
behind a client (``redis.asyncio.Redis``, ``redis.asyncio.cluster.RedisCluster``, or a
Sentinel ``master_for(...)``), and the driver that runs the generators of
:mod:`redis_lease.protocol` on them. See :class:`redis_lease.Connector` for the design."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Dict, List, Optional, Tuple, TypeVar

import redis.asyncio.connection as aconn
from redis import exceptions as rx
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from ..errors import LeaseError, typed_reply_error
from ..protocol import Call, Failed, Machine, Sleep
from ..routing import Address, keyspace_channel, redirection, tuned_kwargs

T = TypeVar("T")

MAX_IDLE = 8

# Where a client keeps its connector.
_ATTR = "_redis_lease_connector"


class Connector:
    """Connections of this package's own (see :class:`redis_lease.Connector`), on asyncio.
    Use it from one event loop."""

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
            self._pid = os.getpid()

    def _take(self, addr: Address) -> Any:
        self._forked()
        idle = self._idle.get(addr)
        if idle:
            return idle.pop()
        return self.new_connection(addr)

    async def _put(self, addr: Address, conn: Any) -> None:
        self._forked()
        if getattr(conn, "pid", self._pid) != self._pid:
            return  # made before a fork, in the parent: not ours to reuse or close
        idle = self._idle.setdefault(addr, [])
        if len(idle) < MAX_IDLE:
            idle.append(conn)
        else:
            await conn.disconnect()

    async def close(self) -> None:
        self._forked()
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for c in conns:
                await c.disconnect()

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
        limit = call.limit
        try:
            # Bounds the connect and its handshake too (a frozen server accepts TCP).
            bound = self.command_timeout if limit is None else min(self.command_timeout, max(limit, 0.001))
            await asyncio.wait_for(conn.connect(), bound)
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
        await self._put(addr, conn)
        return value

    async def run(self, machine: Machine[T], stop: Optional[asyncio.Event] = None) -> T:
        """Runs a generator of :mod:`redis_lease.protocol` to its end. With ``stop``: sleeps end
        early when it is set, and the generator is closed (the answer is then None)."""
        try:
            op = next(machine)
            while True:
                if stop is not None and stop.is_set():
                    return None  # type: ignore[return-value]
                if isinstance(op, Sleep):
                    if stop is None:
                        await asyncio.sleep(op.seconds)
                    else:
                        try:
                            await asyncio.wait_for(stop.wait(), op.seconds)
                        except asyncio.TimeoutError:
                            pass
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

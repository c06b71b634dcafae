"""The sync connector: this package's own connections to the deployment behind a redis-py
client (``redis.Redis``, ``redis.cluster.RedisCluster``, or a Sentinel ``master_for(...)``),
and the driver that runs the generators of :mod:`redis_lease.protocol` on them."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple, TypeVar

import redis
from redis import exceptions as rx
from redis.cluster import RedisCluster
from redis.crc import key_slot

from .errors import LeaseError, typed_reply_error
from .protocol import Call, Failed, Machine, Sleep
from .routing import Address, keyspace_channel, redirection, tuned_kwargs

T = TypeVar("T")

#: How many idle connections per node are kept for reuse.
MAX_IDLE = 8

# Where a client keeps its connector.
_ATTR = "_redis_lease_connector"


class Connector:
    """Connections of this package's own, made with the settings of a redis-py client.

    Requests are never sent through the caller's client or pool: a request that waits inside
    the server (``WAIT``) takes a connection of its own for as long as it waits, so the
    caller's pool is never held up, and every request gets a reply limit of this package's
    choosing (the wait plus ``command_timeout`` for a waiting request), which redis-py's
    per-client ``socket_timeout`` cannot give. Idle connections (up to 8 per node) are kept for
    reuse by the process that made them: after a ``fork`` the child never touches the parent's
    sockets (the idle list is dropped, as redis-py's pools do, by process id). In a cluster, requests are routed by their key's slot (the module's commands have
    the key at position 1), following ``MOVED``/``ASK`` and refreshing the client's slot map
    after a connection failure.

    One connector per client is shared by everything built on it (:meth:`of`).
    """

    _shared_lock = threading.Lock()

    def __init__(self, client: Any, command_timeout: float = 2.0) -> None:
        if isinstance(client, Connector):
            raise TypeError("already a Connector")
        self.client = client
        self.command_timeout = command_timeout
        self.is_cluster = isinstance(client, RedisCluster)
        self._idle: Dict[Address, List[Any]] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._moved: Dict[int, Tuple[str, int]] = {}
        self._refresh = False

    @classmethod
    def of(cls, client: Any) -> "Connector":
        """The shared connector of ``client`` (or ``client`` itself if it is a Connector). It
        is kept on the client object, so both are collected together."""
        if isinstance(client, Connector):
            return client
        with cls._shared_lock:
            c = getattr(client, _ATTR, None)
            if not isinstance(c, Connector):
                c = cls(client)
                try:
                    setattr(client, _ATTR, c)
                except AttributeError:
                    pass  # a client class with __slots__: a connector per lock then
            return c

    # -- connections ---------------------------------------------------------------------

    def db(self) -> int:
        if self.is_cluster:
            return 0
        return int(self.client.connection_pool.connection_kwargs.get("db", 0) or 0)

    def _node_pool(self, addr: Address) -> Tuple[type, Dict[str, Any]]:
        """The connection class and settings for ``addr`` (None: the single server)."""
        if addr is None:
            pool = self.client.connection_pool
            return pool.connection_class, dict(pool.connection_kwargs)
        node = self.client.get_node(host=addr[0], port=addr[1])
        if node is None:
            # A node this client has not seen yet (a MOVED to a new node): any node's settings.
            node = self.client.get_default_node() or self.client.get_nodes()[0]
        pool = self.client.get_redis_connection(node).connection_pool
        kw = dict(pool.connection_kwargs)
        kw["host"], kw["port"] = addr
        return pool.connection_class, kw

    def new_connection(self, addr: Address, protocol: Optional[int] = None) -> Any:
        cls, kw = self._node_pool(addr)
        kw = tuned_kwargs(kw, self.command_timeout, issubclass(cls, redis.connection.Connection))
        if protocol is not None:
            kw["protocol"] = protocol
            if "maint_notifications_config" in kw:
                # redis-py 7+: maintenance notifications need RESP3; not for this connection.
                kw["maint_notifications_config"] = None
                kw.pop("maint_notifications_pool_handler", None)
        return cls(**kw)

    def _forked(self) -> None:
        """In a child made by ``fork``: forgets the parent's idle connections without touching
        them (a request on a shared socket would read the other process's reply) and takes a
        new lock (another thread of the parent may have held the old one at the fork)."""
        if self._pid != os.getpid():
            self._lock = threading.Lock()
            self._idle = {}
            self._pid = os.getpid()

    def _take(self, addr: Address) -> Any:
        self._forked()
        with self._lock:
            idle = self._idle.get(addr)
            if idle:
                return idle.pop()
        return self.new_connection(addr)

    def _put(self, addr: Address, conn: Any) -> None:
        self._forked()
        if getattr(conn, "pid", self._pid) != self._pid:
            return  # made before a fork, in the parent: not ours to reuse or close
        with self._lock:
            idle = self._idle.setdefault(addr, [])
            if len(idle) < MAX_IDLE:
                idle.append(conn)
                return
        conn.disconnect()

    def close(self) -> None:
        """Closes the idle connections (connections in use close when their request ends)."""
        self._forked()
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for c in conns:
                c.disconnect()

    def address(self, key: Any) -> Address:
        """The node serving ``key`` (None for a single server)."""
        if not self.is_cluster:
            return None
        if self._refresh:
            self._refresh = False
            self._moved.clear()
            try:
                self.client.nodes_manager.initialize()
            except (rx.RedisError, rx.RedisClusterException, OSError):
                self._refresh = True
        slot = key_slot(self.client.encoder.encode(key))
        moved = self._moved.get(slot)
        if moved is not None:
            return moved
        node = self.client.nodes_manager.get_node_from_slot(slot)
        return (node.host, int(node.port))

    # -- one request -----------------------------------------------------------------------

    def perform(self, call: Call) -> Any:
        """Sends one request and answers its reply, or a :class:`Failed` for an error."""
        ask: Optional[Tuple[str, int]] = None
        for _ in range(5):
            try:
                addr = ask or self.address(call.key)
            except (rx.RedisError, rx.RedisClusterException, OSError) as e:
                # No route now (a slot not covered during a failover, no node reachable).
                self._refresh = True
                return Failed(e, sent=False)
            r = self._once(addr, call, asking=ask is not None)
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

    def _once(self, addr: Address, call: Call, asking: bool) -> Any:
        start = time.monotonic()
        try:
            conn = self._take(addr)
        except (rx.RedisError, rx.RedisClusterException, OSError) as e:
            self._refresh = True
            return Failed(e, sent=False)
        limit = call.limit
        try:
            if limit is not None:
                # Bounds the connect and its handshake too (a frozen server accepts TCP).
                conn.socket_connect_timeout = min(self.command_timeout, max(limit, 0.001))
                conn.socket_timeout = conn.socket_connect_timeout
            conn.connect()
        except (rx.RedisError, OSError) as e:
            conn.disconnect()
            return Failed(e, sent=False)
        except BaseException:
            conn.disconnect()
            raise
        try:
            if asking:
                conn.send_command("ASKING")
                conn.read_response()
            conn.send_command(*call.args)
            left = None if limit is None else max(limit - (time.monotonic() - start), 0.0)
            if not conn.can_read(timeout=left):
                raise rx.TimeoutError("no reply in time")
            value = conn.read_response()
        except rx.ResponseError as e:
            self._put(addr, conn)
            return Failed(typed_reply_error(e, f"{conn.host}:{conn.port}", call.args))
        except (rx.RedisError, OSError) as e:
            # A connection that timed out may still have the request parked in the server:
            # closing it makes the server drop the waiter.
            conn.disconnect()
            return Failed(e)
        except BaseException:
            conn.disconnect()
            raise
        self._put(addr, conn)
        return value

    # -- the driver ------------------------------------------------------------------------

    def run(self, machine: Machine[T], stop: Optional[threading.Event] = None) -> T:
        """Runs a generator of :mod:`redis_lease.protocol` to its end. With ``stop``: sleeps end
        early when it is set, and the generator is closed (the answer is then None)."""
        try:
            op = next(machine)
            while True:
                if stop is not None and stop.is_set():
                    return None  # type: ignore[return-value]
                if isinstance(op, Sleep):
                    if stop is not None:
                        stop.wait(op.seconds)
                    else:
                        time.sleep(op.seconds)
                    value: Any = None
                else:
                    value = self.perform(op)
                op = machine.send(value)
        except StopIteration as s:
            return s.value  # type: ignore[no-any-return]
        finally:
            machine.close()

    def subscriber(self, key: Any) -> Tuple[Any, str]:
        """A new RESP2 connection to the node serving ``key`` and the key's keyspace channel."""
        return self.new_connection(self.address(key), protocol=2), keyspace_channel(self.db(), key)

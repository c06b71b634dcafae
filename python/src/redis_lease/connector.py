"""The sync connector: this package's own connections to the deployment behind a redis-py
client (``redis.Redis``, ``redis.cluster.RedisCluster``, or a Sentinel ``master_for(...)``),
and the driver that runs the generators of :mod:`redis_lease.protocol` on them."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from typing import Any, Dict, List, Optional, Set, Tuple, TypeVar

import redis
from redis import exceptions as rx
from redis.cluster import RedisCluster
from redis.crc import key_slot

from .errors import LeaseError, typed_reply_error
from .protocol import Call, Failed, Machine, Sleep
from .routing import (
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

#: How many idle connections per node are kept for reuse.
MAX_IDLE = 8

#: How long, in seconds, connections to a master that Sentinel replaced are refused (a sentinel
#: that has not heard of the failover yet still names the old master for a moment).
DEMOTED_FOR = 60.0

# Where a client keeps its connector.
_ATTR = "_redis_lease_connector"
# Where a connection of ours keeps the connector's epoch (master switches seen) it was made in.
_EPOCH = "_redis_lease_epoch"


def interrupt(conn: Any) -> None:
    """Ends the request another thread has in flight on ``conn``: its read sees the connection
    closed. Only shuts the socket down: the thread that uses it disconnects it, so its
    descriptor is never closed (and reused) under a blocked read."""
    sock = getattr(conn, "_sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _SentinelWatch:
    """Follows the sentinels' ``+switch-master`` for the service of a Sentinel-managed client
    (``Sentinel(...).master_for(...)``): a daemon thread and a subscription of its own per
    sentinel, each telling the connector of every failover of its master. It holds the
    connector weakly, so it ends (within a second) when the connector is collected, and at
    once when it is closed. It belongs to the process that started it (a forked child's
    connector forgets it and starts its own)."""

    def __init__(self, connector: "Connector", pool: Any) -> None:
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: List[Any] = []  # the live subscriptions (closed by close())
        manager = pool.sentinel_manager
        force_ip = getattr(manager, "_force_master_ip", None)
        ref = weakref.ref(connector)
        for s in list(manager.sentinels):
            spool = s.connection_pool
            name = f"redis-lease sentinel {spool.connection_kwargs.get('host')}:{spool.connection_kwargs.get('port')}"
            args = (ref, spool, str(pool.service_name), force_ip, connector.command_timeout)
            threading.Thread(target=self._follow, args=args, name=name, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            interrupt(c)

    def _follow(
        self, ref: "weakref.ref[Connector]", spool: Any, service: str, force_ip: Optional[str], timeout: float
    ) -> None:
        delay = 0.05
        subscribed = False
        while not self.stop.is_set() and ref() is not None:
            cls = spool.connection_class
            conn = cls(
                **subscriber_kwargs(spool.connection_kwargs, timeout, issubclass(cls, redis.connection.Connection))
            )
            with self._lock:
                self._conns.append(conn)
            try:
                if self.stop.is_set():
                    return
                conn.connect()
                conn.send_command("SUBSCRIBE", SWITCH_MASTER)
                if not conn.can_read(timeout=timeout):
                    raise rx.TimeoutError("no reply to SUBSCRIBE in time")
                conn.read_response()
                if subscribed:
                    # A failover may have been announced while this subscription was down.
                    c = ref()
                    if c is not None:
                        c._resubscribed()
                    del c
                subscribed, delay = True, 0.05
                while not self.stop.is_set():
                    # The timeout only lets close() and the connector's end be noticed.
                    if conn.can_read(timeout=1.0):
                        switch = master_switch(service, conn.read_response(), force_ip)
                        if switch is not None:
                            c = ref()
                            if c is not None:
                                c._switched(*switch)
                            del c
                    elif ref() is None:
                        return
            except Exception:  # noqa: BLE001 - any failure of the subscription: subscribe again
                pass
            finally:
                with self._lock:
                    self._conns.remove(conn)
                conn.disconnect()
            self.stop.wait(delay)
            delay = min(delay * 2, 2.0)


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

    With a Sentinel-managed client (``Sentinel(...).master_for(...)``) it follows the sentinels'
    ``+switch-master``: on a failover of the master it closes every connection made before
    (idle ones, and the ones a request is in flight on, parked waits included), a reply that
    arrives from the old master after that does not count (the request is retried, on the new
    master), connections to the old master are refused for a while (a sentinel that has not
    heard of the failover yet still names it), and the guards' watchdogs renew at once.
    Otherwise a connection made before the failover goes on renewing on the demoted master
    until Sentinel reconfigures it, while the hold lapses on the new master, where someone
    else may be granted it.

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
        # Sentinel: the client's pool (None without Sentinel) and the watch of its sentinels.
        self._sentinel = None if self.is_cluster else sentinel_pool(client)
        self._watch: Optional[_SentinelWatch] = None
        self._epoch = 0  # master switches seen; a connection made before the last one is stale
        self._last_switch: Optional[Tuple[HostPort, HostPort]] = None
        self._demoted: Dict[HostPort, float] = {}  # old master -> refused until (monotonic)
        self._busy: Set[Any] = set()  # connections with a request in flight (Sentinel only)
        self._wakes: "weakref.WeakSet[threading.Event]" = weakref.WeakSet()  # watchdogs to wake

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
        new lock (another thread of the parent may have held the old one at the fork). The
        parent's Sentinel watch is forgotten too (its threads do not exist here): the child
        starts its own on its first request."""
        if self._pid != os.getpid():
            self._lock = threading.Lock()
            self._idle = {}
            self._busy = set()
            self._wakes = weakref.WeakSet()
            self._watch = None
            self._pid = os.getpid()

    def _take(self, addr: Address) -> Any:
        self._forked()
        with self._lock:
            idle = self._idle.get(addr)
            if idle:
                return idle.pop()
            epoch = self._epoch
        conn = self.new_connection(addr)
        setattr(conn, _EPOCH, epoch)
        return conn

    def _put(self, addr: Address, conn: Any) -> None:
        self._forked()
        if getattr(conn, "pid", self._pid) != self._pid:
            return  # made before a fork, in the parent: not ours to reuse or close
        with self._lock:
            idle = self._idle.setdefault(addr, [])
            if len(idle) < MAX_IDLE and getattr(conn, _EPOCH, self._epoch) == self._epoch:
                idle.append(conn)
                return
        conn.disconnect()

    def close(self) -> None:
        """Closes the idle connections (connections in use close when their request ends) and
        stops following the sentinels (a later request starts again)."""
        self._forked()
        with self._lock:
            idle, self._idle = self._idle, {}
            watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()
        for conns in idle.values():
            for c in conns:
                c.disconnect()

    # -- Sentinel ------------------------------------------------------------------------------

    def _follow_sentinels(self) -> None:
        """With a Sentinel-managed client: makes sure this process follows its sentinels."""
        if self._sentinel is None:
            return
        self._forked()
        if self._watch is not None:
            return
        with self._lock:
            if self._watch is None:
                self._watch = _SentinelWatch(self, self._sentinel)

    def _switched(self, old: HostPort, new: HostPort) -> None:
        """A sentinel announced a failover of the master from ``old`` to ``new``. Every sentinel
        announces it, so repeats are ignored."""
        with self._lock:
            if self._last_switch == (old, new):
                return
            self._last_switch = (old, new)
            self._epoch += 1
            self._demoted.pop(new, None)
            self._demoted[old] = time.monotonic() + DEMOTED_FOR
            idle, self._idle = self._idle, {}
            busy = list(self._busy)
            wakes = list(self._wakes)
        _log.warning(
            "redis-lease: Sentinel switched the master from %s:%d to %s:%d: connections to the old one are closed",
            *old,
            *new,
        )
        for conns in idle.values():
            for c in conns:
                c.disconnect()
        for c in busy:
            interrupt(c)
        for w in wakes:
            w.set()

    def _resubscribed(self) -> None:
        """A sentinel subscription came back after a failure: a failover announced meanwhile was
        missed, so idle connections are closed (new ones ask the sentinels for the master)."""
        with self._lock:
            idle, self._idle = self._idle, {}
            self._last_switch = None
        for conns in idle.values():
            for c in conns:
                c.disconnect()

    def _refusal(self, conn: Any) -> Optional[BaseException]:
        """Why ``conn`` (connected) must not be used: it reached a master Sentinel replaced."""
        if not self._demoted:
            return None
        addr = (str(conn.host), int(conn.port))
        until = self._demoted.get(addr)
        if until is None or time.monotonic() >= until:
            return None
        return rx.ConnectionError(f"{addr[0]}:{addr[1]} is no longer the master (Sentinel +switch-master)")

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
        self._follow_sentinels()
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
        if self._sentinel is None:
            return self._exchange(addr, conn, call, asking, start)
        # A master switch interrupts the requests in flight.
        with self._lock:
            self._busy.add(conn)
        try:
            return self._exchange(addr, conn, call, asking, start)
        finally:
            with self._lock:
                self._busy.discard(conn)

    def _stale(self, conn: Any) -> Optional[Failed]:
        """A reply read on ``conn`` does not count if Sentinel switched the master since the
        connection was made: it may come from the old master, which no longer decides."""
        if getattr(conn, _EPOCH, self._epoch) == self._epoch:
            return None
        conn.disconnect()
        return Failed(rx.ConnectionError("the master changed (Sentinel +switch-master) before the reply"))

    def _exchange(self, addr: Address, conn: Any, call: Call, asking: bool, start: float) -> Any:
        limit = call.limit
        try:
            if limit is not None:
                # Bounds the connect and its handshake too (a frozen server accepts TCP).
                conn.socket_connect_timeout = min(self.command_timeout, max(limit, 0.001))
                conn.socket_timeout = conn.socket_connect_timeout
            conn.connect()
            refused = self._refusal(conn)
            if refused is not None:
                raise refused
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
            stale = self._stale(conn)
            if stale is not None:
                return stale
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
        stale = self._stale(conn)
        if stale is not None:
            return stale
        self._put(addr, conn)
        return value

    # -- the driver ------------------------------------------------------------------------

    def run(
        self, machine: Machine[T], stop: Optional[threading.Event] = None, wake: Optional[threading.Event] = None
    ) -> T:
        """Runs a generator of :mod:`redis_lease.protocol` to its end. With ``stop``: sleeps end
        early when it is set, and the generator is closed (the answer is then None). With
        ``wake`` (set by whoever sets ``stop`` too): a sleep that may end early (a watchdog's
        wait for its next renewal) ends when Sentinel switches the master, or ``wake`` is set."""
        if wake is not None and self._sentinel is not None:
            self._forked()
            with self._lock:
                self._wakes.add(wake)
        try:
            op = next(machine)
            while True:
                if stop is not None and stop.is_set():
                    return None  # type: ignore[return-value]
                if isinstance(op, Sleep):
                    if op.early and wake is not None:
                        if wake.wait(op.seconds):
                            wake.clear()
                    elif stop is not None:
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

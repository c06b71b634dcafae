"""Sync leader election (``LEADER.*``) and observation of who leads."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any, Iterator, Optional, Type

from redis import exceptions as rx

from . import protocol, replies
from .connector import Connector
from .errors import NotAcquired
from .guards import Leadership, acquire
from .retry import Backoff, RetryPolicy
from .spec import Spec, check_timeout


def current_leader(
    connector: Connector, key: Any, command_timeout: float = 2.0, retry: Optional[RetryPolicy] = None
) -> Optional[replies.LeaderInfo]:
    """``LEADER.CURRENT key`` (transient failures retried)."""
    call = protocol.Call(("LEADER.CURRENT", key), command_timeout)
    return replies.leader_info(connector.run(protocol.query_retry(call, None, retry or RetryPolicy())))


def election_info(
    client: Any, key: Any, command_timeout: float = 2.0, retry: Optional[RetryPolicy] = None
) -> replies.ElectionInfo:
    """``LEADER.INFO key``: the leader and the waiting candidates (transient failures retried).
    ``client``: a redis-py client or a :class:`Connector`."""
    call = protocol.Call(("LEADER.INFO", key), command_timeout)
    return replies.election_info(Connector.of(client).run(protocol.query_retry(call, None, retry or RetryPolicy())))


class LeaderElector:
    """Campaigns for leadership of one key. Each campaign uses a fresh UUIDv4 candidate id
    (so two leaderships of one elector exclude each other like two processes), unless
    ``candidate`` names a fixed one.

    :meth:`leadership` campaigns with ``LEADER.CAMPAIGN ... WAIT`` (the server parks the request
    and answers it the moment leadership passes to this candidate) and answers a
    :class:`Leadership`, a guard whose watchdog renews the lease every third of the ttl and
    sets ``lost`` as soon as the lease can no longer be proven, before anyone else can be
    elected. Leaving the ``with`` block resigns, so the next candidate takes over at once.
    """

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

    def campaign(self, timeout: Optional[float] = None) -> Optional[Leadership]:
        """Campaigns for at most ``timeout`` seconds (None: as long as it takes; 0: once).
        Answers the leadership, or None if another candidate led all that time."""
        kind = self.spec.leader_kind()
        return acquire(
            self.connector,
            self.spec,
            kind,
            check_timeout(timeout),
            lambda g: Leadership(self.connector, self.spec, kind, g),
        )

    def leadership(self, timeout: Optional[float] = None) -> Leadership:
        """Like :meth:`campaign`, but raises :class:`NotAcquired` when not elected in time.
        ``with elector.leadership() as lead: ... lead.term, lead.lost``."""
        lead = self.campaign(timeout)
        if lead is None:
            raise NotAcquired(f"not elected leader of {self.key!r} within {timeout}s")
        return lead

    def try_lead(self) -> Optional[Leadership]:
        """Leadership if nobody leads now (or the fixed candidate already does), else None."""
        return self.campaign(0)

    def current(self) -> Optional[replies.LeaderInfo]:
        """Who leads now."""
        return current_leader(self.connector, self.key, self.spec.command_timeout, self.spec.retry)

    def observe(self, configure_notifications: bool = True) -> "LeaderObserver":
        """A :class:`LeaderObserver` of this election."""
        return LeaderObserver(self.connector, self.key, configure_notifications=configure_notifications)


def ensure_notifications(connector: Connector, key: Any, command_timeout: float) -> None:
    """Adds the ``notify-keyspace-events`` classes the observer needs (``K``, ``d``, ``g``, ``x``)
    on the node serving ``key``."""
    get = protocol.Call(("CONFIG", "GET", "notify-keyspace-events"), command_timeout, route=key)
    current = protocol.notify_flags(connector.run(protocol.query_retry(get, None, RetryPolicy(budget=command_timeout))))
    missing = protocol.missing_notify_flags(current)
    if missing:
        set_ = protocol.Call(("CONFIG", "SET", "notify-keyspace-events", current + missing), command_timeout, route=key)
        connector.run(protocol.query_retry(set_, None, RetryPolicy(budget=command_timeout)))


def _same(a: Optional[replies.LeaderInfo], b: Optional[replies.LeaderInfo]) -> bool:
    if a is None or b is None:
        return a is b
    return (a.candidate, a.term) == (b.candidate, b.term)


class LeaderObserver:
    """Follows who leads an election, without polling.

    It subscribes to the key's keyspace channel (``__keyspace@<db>__:<key>``, on the node that
    serves the key), then reads ``LEADER.CURRENT``; every notification on the key
    (``leader.elect``, ``leader.resign``, ``leader.lapse``, ``expired``, ``del``, ...) triggers a
    new read. After a lost subscription it subscribes again (with backoff) and re-reads.
    Changes are reported when (candidate, term) differs from the last one reported; changes
    faster than a read may be coalesced (the latest state is always reported).

    Unless ``configure_notifications=False``, it adds the classes it needs to
    ``notify-keyspace-events`` with ``CONFIG SET`` (again after each re-subscription: a
    restarted server may have lost the setting).
    """

    def __init__(
        self,
        client: Any,
        key: Any,
        *,
        configure_notifications: bool = True,
        retry: Optional[RetryPolicy] = None,
        command_timeout: float = 2.0,
    ) -> None:
        self.connector = Connector.of(client)
        self.key = key
        self._configure = configure_notifications
        self._retry = retry or RetryPolicy()
        self._timeout = command_timeout
        self._cond = threading.Condition()
        self._version = 0  # bumped by every change
        self._seen = 0  # the version next_change last answered
        self._stop = threading.Event()
        self._sub: Any = self._subscribe()
        self._current = self._read()
        self._thread = threading.Thread(target=self._loop, name=f"redis-lease observer {key!r}", daemon=True)
        self._thread.start()

    @property
    def current(self) -> Optional[replies.LeaderInfo]:
        """The leader as last seen (None: nobody leads)."""
        with self._cond:
            return self._current

    def next_change(self, timeout: Optional[float] = None) -> Optional[replies.LeaderInfo]:
        """Waits for the next change of leader (or term) since the last one this method
        answered (or since the start) and answers the new state; raises ``TimeoutError`` if
        none comes within ``timeout`` seconds. Changes in between may be coalesced."""
        with self._cond:
            seen = self._seen
            if not self._cond.wait_for(lambda: self._version != seen or self._stop.is_set(), timeout):
                raise TimeoutError(f"no change of leader of {self.key!r} within {timeout}s")
            if self._version == seen:
                raise RuntimeError("the observer is closed")
            self._seen = self._version
            return self._current

    def changes(self) -> Iterator[Optional[replies.LeaderInfo]]:
        """Every change from now on, until :meth:`close`."""
        while not self._stop.is_set():
            try:
                yield self.next_change()
            except RuntimeError:
                return

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        # The thread notices within a second and closes the subscription itself.

    def __enter__(self) -> "LeaderObserver":
        return self

    def __exit__(
        self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()

    def _subscribe(self) -> Any:
        if self._configure:
            ensure_notifications(self.connector, self.key, self._timeout)
        conn, channel = self.connector.subscriber(self.key)
        try:
            conn.connect()
            conn.send_command("SUBSCRIBE", channel)
            if not conn.can_read(timeout=self._timeout):
                raise rx.TimeoutError("no reply to SUBSCRIBE in time")
            conn.read_response()
        except BaseException:
            conn.disconnect()
            raise
        return conn

    def _read(self) -> Optional[replies.LeaderInfo]:
        return current_leader(self.connector, self.key, self._timeout, self._retry)

    def _publish(self, info: Optional[replies.LeaderInfo]) -> None:
        with self._cond:
            if not _same(self._current, info):
                self._current = info
                self._version += 1
                self._cond.notify_all()

    def _loop(self) -> None:
        try:
            self._follow()
        finally:
            self._sub.disconnect()

    def _follow(self) -> None:
        while not self._stop.is_set():
            sub = self._sub
            try:
                while not self._stop.is_set():
                    # The timeout only lets close() be noticed; nothing is asked of the server.
                    if sub.can_read(timeout=1.0):
                        msg = sub.read_response()
                        if isinstance(msg, (list, tuple)) and msg and replies.text(msg[0]) == "message":
                            self._reread()
            except Exception:  # noqa: BLE001 - any failure of the subscription: subscribe again
                sub.disconnect()
            # The subscription is gone: subscribe again, then re-read what was missed.
            backoff = Backoff(self._retry)
            while not self._stop.is_set():
                try:
                    self._sub = self._subscribe()
                    break
                except (rx.RedisError, OSError):
                    d = backoff.next_delay(None)
                    self._stop.wait(d if d is not None else self._retry.max_delay)
            self._reread()

    def _reread(self) -> None:
        if self._stop.is_set():
            return
        try:
            self._publish(self._read())
        except (rx.RedisError, OSError, Exception):  # noqa: BLE001 - the next event reads again
            pass

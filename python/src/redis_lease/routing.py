"""Pure helpers shared by the sync and asyncio connectors: connection settings, cluster
redirections and Sentinel's master switches."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from redis.backoff import NoBackoff
from redis.retry import Retry

from .replies import text
from .retry import error_code

HostPort = Tuple[str, int]
Address = Optional[HostPort]


def tuned_kwargs(kwargs: Dict[str, Any], timeout: Optional[float], tcp: bool) -> Dict[str, Any]:
    """Settings for this package's own connections, from the caller's: reply and connect
    timeouts of our choosing, no retries inside redis-py (a resent grant request could take a
    second hold; this package retries itself, adopting what a lost reply may have granted),
    and TCP keepalive probes so that a request parked without a limit (``WAIT 0``) notices a
    peer that vanished without closing the connection."""
    kw = dict(kwargs)
    kw["socket_timeout"] = timeout
    kw["socket_connect_timeout"] = timeout
    kw["retry"] = Retry(NoBackoff(), 0)
    kw["retry_on_timeout"] = False
    kw["retry_on_error"] = []
    if tcp and not kw.get("socket_keepalive"):
        kw["socket_keepalive"] = True
        opts: Dict[int, int] = {}
        for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, name):
                opts[getattr(socket, name)] = value
        kw["socket_keepalive_options"] = opts
    return kw


@dataclass(frozen=True)
class Redirect:
    """A ``MOVED`` (``ask`` False) or ``ASK`` error reply: where the slot is served."""

    ask: bool
    slot: int
    host: str
    port: int


def redirection(err: BaseException) -> Optional[Redirect]:
    """The redirection an error reply carries, if it is ``MOVED`` or ``ASK``."""
    code = error_code(err)
    parts = str(err).split()
    if code in ("MOVED", "ASK") and len(parts) >= 3:
        slot_s, addr = parts[1], parts[2]
    else:
        # redis-py's cluster parser raises MovedError/AskError with the code stripped.
        cls = type(err).__name__
        if cls not in ("MovedError", "AskError") or len(parts) < 2:
            return None
        code = "MOVED" if cls == "MovedError" else "ASK"
        slot_s, addr = parts[0], parts[1]
    host, _, port = addr.rpartition(":")
    try:
        return Redirect(code == "ASK", int(slot_s), host or "127.0.0.1", int(port))
    except ValueError:
        return None


def keyspace_channel(db: int, key: Any) -> str:
    return f"__keyspace@{db}__:{text(key)}"


#: The channel on which every sentinel announces a failover's end: ``+switch-master <name>
#: <old-ip> <old-port> <new-ip> <new-port>`` (also when it learns of one from another sentinel).
SWITCH_MASTER = "+switch-master"


def sentinel_pool(client: Any) -> Any:
    """The ``SentinelConnectionPool`` of a client made by ``Sentinel(...).master_for(...)`` (sync
    or asyncio), else None (a plain client, a cluster, or a ``slave_for`` client)."""
    pool = getattr(client, "connection_pool", None)
    if pool is None or not getattr(pool, "is_master", False):
        return None
    manager = getattr(pool, "sentinel_manager", None)
    if getattr(pool, "service_name", None) is None or not getattr(manager, "sentinels", None):
        return None
    return pool


def subscriber_kwargs(kwargs: Dict[str, Any], timeout: Optional[float], tcp: bool) -> Dict[str, Any]:
    """Settings for a RESP2 subscription made from a client's (a sentinel's): as
    :func:`tuned_kwargs`, in RESP2, where pushes are plain replies."""
    kw = tuned_kwargs(kwargs, timeout, tcp)
    kw["protocol"] = 2
    if "maint_notifications_config" in kw:
        # redis-py 7+: maintenance notifications need RESP3; not for this connection.
        kw["maint_notifications_config"] = None
        kw.pop("maint_notifications_pool_handler", None)
    return kw


def master_switch(service: str, message: Any, force_ip: Optional[str] = None) -> Optional[Tuple[HostPort, HostPort]]:
    """The (old, new) master addresses of a ``+switch-master`` push (RESP2 ``[b"message",
    channel, data]``) if it is about ``service``, else None. ``force_ip``: the IP redis-py's
    ``Sentinel(force_master_ip=...)`` puts in place of every master's.

    >>> master_switch("m", [b"message", b"+switch-master", b"m 10.0.0.1 6379 10.0.0.2 6380"])
    (('10.0.0.1', 6379), ('10.0.0.2', 6380))
    >>> master_switch("other", [b"message", b"+switch-master", b"m 10.0.0.1 6379 10.0.0.2 6380"]) is None
    True
    """
    if not isinstance(message, (list, tuple)) or len(message) < 3 or text(message[0]) != "message":
        return None
    if text(message[1]) != SWITCH_MASTER:
        return None
    words = text(message[2]).split()
    if len(words) != 5 or words[0] != service:
        return None
    try:
        old = (force_ip or words[1], int(words[2]))
        new = (force_ip or words[3], int(words[4]))
    except ValueError:
        return None
    return old, new

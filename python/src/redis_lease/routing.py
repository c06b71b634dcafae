"""Pure helpers shared by the sync and asyncio connectors: connection settings and cluster
redirections."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from redis.backoff import NoBackoff
from redis.retry import Retry

from .replies import text
from .retry import error_code

Address = Optional[Tuple[str, int]]


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

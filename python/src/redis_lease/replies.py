"""Reading the module's replies, in RESP2 (flat field/value arrays) or RESP3 (maps) shape,
with or without ``decode_responses``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .errors import ProtocolError


def text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, str):
        return v
    return str(v)


def integer(v: Any, default: int = 0) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, (bytes, str)):
        try:
            return int(text(v).strip())
        except ValueError:
            pass
    return default


def token(v: Any, what: str = "token") -> int:
    """A token or term: a positive integer."""
    t = integer(v, 0) if v is not None else 0
    if t < 1:
        raise ProtocolError(f"expected a {what}, got {v!r}")
    return t


def fields(v: Any) -> Dict[str, Any]:
    """A map reply (RESP3 map, or RESP2 flat field/value array), keys lower-cased."""
    if isinstance(v, dict):
        return {text(k).lower(): x for k, x in v.items()}
    if isinstance(v, (list, tuple)) and len(v) % 2 == 0:
        return {text(v[i]).lower(): v[i + 1] for i in range(0, len(v), 2)}
    raise ProtocolError(f"expected a map, got {v!r}")


def items(v: Any) -> List[Any]:
    if isinstance(v, (list, tuple, set)):
        return list(v)
    raise ProtocolError(f"expected an array, got {v!r}")


@dataclass(frozen=True)
class Holder:
    """One holder in ``RWLOCK.INFO`` / ``SEMAPHORE.INFO``."""

    owner: str
    mode: str  # "read" or "write" for a lock; "" for a semaphore
    count: int  # reentrant grants (lock) or 1 (semaphore)
    ttl: float  # lease seconds left
    token: int
    permits: int = 0  # semaphore only
    cap: Optional[float] = None  # seconds left until the hold's max hold; None: no cap


@dataclass(frozen=True)
class Waiting:
    """One waiting request in the ``queue`` of ``RWLOCK.INFO`` / ``SEMAPHORE.INFO`` /
    ``LEADER.INFO`` (at most 100 per key are shown; ``waiters`` counts them all)."""

    owner: str  # an election's candidate
    mode: str  # "read" or "write" for a lock; "" otherwise
    permits: int  # semaphore only (0 otherwise)
    waited: float  # seconds since it was queued
    left: Optional[float]  # seconds until its wait ends; None: no limit (WAIT 0)


def _waiting(v: Any) -> Waiting:
    f = fields(v)
    left = integer(f.get("left", -1), -1)
    return Waiting(
        owner=text(f.get("owner", f.get("candidate", ""))),
        mode=text(f["mode"]) if "mode" in f else "",
        permits=max(integer(f.get("permits", 0)), 0),
        waited=max(integer(f.get("waited", 0)), 0) / 1000.0,
        left=None if left < 0 else left / 1000.0,
    )


def queue(v: Any) -> Tuple[Waiting, ...]:
    return tuple(_waiting(w) for w in items(v))


@dataclass(frozen=True)
class LockInfo:
    """The reply of ``RWLOCK.INFO``. ``mode`` is None when nobody holds the lock."""

    mode: Optional[str] = None
    holders: Tuple[Holder, ...] = ()
    waiters: int = 0
    token: int = 0
    queue: Tuple[Waiting, ...] = ()

    def hold_of(self, owner: str, mode: str) -> Optional[Holder]:
        for h in self.holders:
            if h.owner == owner and h.mode == mode:
                return h
        return None


def _holder(v: Any) -> Holder:
    f = fields(v)
    cap = integer(f.get("cap", -1), -1)
    return Holder(
        owner=text(f.get("owner", "")),
        mode=text(f.get("mode", "")) if "mode" in f else "",
        count=max(integer(f.get("count", 1), 1), 0),
        ttl=max(integer(f.get("ttl", 0)), 0) / 1000.0,
        token=max(integer(f.get("token", 0)), 0),
        permits=max(integer(f.get("permits", 0)), 0),
        cap=None if cap < 0 else cap / 1000.0,
    )


def lock_info(v: Any) -> LockInfo:
    f = fields(v)
    mode = text(f["mode"]) if "mode" in f else "none"
    return LockInfo(
        mode=None if mode == "none" else mode,
        holders=tuple(_holder(h) for h in items(f.get("holders", []))),
        waiters=max(integer(f.get("waiters", 0)), 0),
        token=max(integer(f.get("token", 0)), 0),
        queue=queue(f.get("queue", [])),
    )


@dataclass(frozen=True)
class LeaderInfo:
    """Who leads an election (the reply of ``LEADER.CURRENT``)."""

    candidate: str
    term: int
    ttl: float  # lease seconds it had left when read


def leader_info(v: Any) -> Optional[LeaderInfo]:
    if v is None:
        return None
    a = items(v)
    if len(a) < 3:
        raise ProtocolError(f"LEADER.CURRENT: expected [candidate, term, ttl], got {v!r}")
    return LeaderInfo(candidate=text(a[0]), term=token(a[1], "term"), ttl=max(integer(a[2]), 0) / 1000.0)


@dataclass(frozen=True)
class ElectionInfo:
    """The reply of ``LEADER.INFO``: the leader (None: nobody leads), the waiting candidates
    in queue order, and their count."""

    leader: Optional[LeaderInfo] = None
    queue: Tuple[Waiting, ...] = ()
    waiters: int = 0


def election_info(v: Any) -> ElectionInfo:
    f = fields(v)
    lead = f.get("leader")
    leader = None
    if lead is not None:
        lf = fields(lead)
        leader = LeaderInfo(
            candidate=text(lf.get("candidate", "")),
            term=token(lf.get("term"), "term"),
            ttl=max(integer(lf.get("ttl", 0)), 0) / 1000.0,
        )
    return ElectionInfo(leader=leader, queue=queue(f.get("queue", [])), waiters=max(integer(f.get("waiters", 0)), 0))


@dataclass(frozen=True)
class SemaphoreInfo:
    """The reply of ``SEMAPHORE.INFO``."""

    limit: int = 0
    used: int = 0
    holders: Tuple[Holder, ...] = ()
    waiters: int = 0
    token: int = 0
    queue: Tuple[Waiting, ...] = ()

    def hold_of(self, owner: str) -> Optional[Holder]:
        for h in self.holders:
            if h.owner == owner:
                return h
        return None


def semaphore_info(v: Any) -> SemaphoreInfo:
    f = fields(v)
    return SemaphoreInfo(
        limit=max(integer(f.get("limit", 0)), 0),
        used=max(integer(f.get("used", 0)), 0),
        holders=tuple(_holder(h) for h in items(f.get("holders", []))),
        waiters=max(integer(f.get("waiters", 0)), 0),
        token=max(integer(f.get("token", 0)), 0),
        queue=queue(f.get("queue", [])),
    )


@dataclass(frozen=True)
class Snapshot:
    """What an adoption check needs to know of one owner's hold."""

    count: int = 0
    token: int = 0
    extra: Dict[str, Any] = field(default_factory=dict)

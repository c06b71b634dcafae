"""Settings shared by the sync and asyncio classes: validation, owner ids and the
:class:`~redis_lease.protocol.Kind` of each request."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

from . import protocol
from .errors import MaxHold
from .retry import RetryPolicy
from .timing import LeaseTiming

#: The largest semaphore limit the module accepts.
MAX_LIMIT = 2**31 - 1
#: The most keys one multi-key request takes (the module's limit).
MAX_KEYS = 64


def check_timeout(timeout: Optional[float]) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout != timeout:
        raise ValueError(f"timeout must be None or a number of seconds, not {timeout!r}")
    return max(float(timeout), 0.0)


@dataclass(frozen=True)
class Spec:
    """What every lock, semaphore and elector is made of."""

    key: Any
    timing: LeaseTiming
    retry: RetryPolicy
    command_timeout: float
    owner: Optional[str]  # None: a fresh UUIDv4 per grant (per elector for an election)
    # Leaving a ``with`` block whose hold was lost during it raises LeaseLost.
    raise_on_lost: bool = True
    # The hold's cap in ms from its grant, renewals included (``MAXHOLD``); None: none.
    max_hold_ms: Optional[int] = None

    @classmethod
    def of(
        cls,
        key: Any,
        ttl: float,
        owner: Optional[str],
        renew_every: Optional[float],
        retry: Optional[RetryPolicy],
        command_timeout: float,
        raise_on_lost: bool = True,
        max_hold: Optional[float] = None,
    ) -> "Spec":
        if isinstance(key, (bytes, str)) and not key:
            raise ValueError("key must not be empty")
        if owner is not None and (not isinstance(owner, str) or not owner):
            raise ValueError("owner must be a non-empty string")
        if not command_timeout > 0:
            raise ValueError("command_timeout must be positive")
        timing = LeaseTiming.of(ttl, renew_every)
        return cls(
            key,
            timing,
            retry or RetryPolicy(),
            float(command_timeout),
            owner,
            bool(raise_on_lost),
            check_max_hold(max_hold, timing),
        )

    def owner_id(self) -> Tuple[str, bool]:
        """The owner for one grant, and whether it is ours alone (generated)."""
        if self.owner is not None:
            return self.owner, False
        return str(uuid.uuid4()), True

    def release_policy(self) -> RetryPolicy:
        """Releases retry for at most one ttl: after that the lease has lapsed anyway."""
        return RetryPolicy(self.retry.base_delay, self.retry.max_delay, self.timing.ttl)

    def lock_kind(self, mode: str) -> protocol.Kind:
        check_mode(mode)
        owner, generated = self.owner_id()
        return protocol.lock_kind(self.key, owner, mode, self.timing.ttl_ms, generated, self.max_hold_ms)

    def multi_kind(self, keys: Sequence[Any], mode: str) -> protocol.Kind:
        """Every key at once; always a fresh owner (see :class:`~redis_lease.MultiLock`)."""
        check_mode(mode)
        return protocol.multi_lock_kind(keys, str(uuid.uuid4()), mode, self.timing.ttl_ms, self.max_hold_ms)

    def semaphore_kind(self, limit: int, permits: int) -> protocol.Kind:
        check_permits(limit, permits)
        owner, generated = self.owner_id()
        return protocol.semaphore_kind(self.key, owner, limit, permits, self.timing.ttl_ms, generated, self.max_hold_ms)

    def leader_kind(self) -> protocol.Kind:
        candidate, generated = self.owner_id()
        return protocol.leader_kind(self.key, candidate, self.timing.ttl_ms, generated, self.max_hold_ms)


def check_max_hold(max_hold: Optional[float], timing: LeaseTiming) -> Optional[int]:
    """``max_hold`` in seconds as whole ms (rounded up), or None; it cannot be shorter than the
    ttl (no grant could give the lease asked for: :class:`MaxHold`, as the server would answer)."""
    if max_hold is None:
        return None
    if isinstance(max_hold, bool) or not isinstance(max_hold, (int, float)) or not max_hold > 0:
        raise ValueError(f"max_hold must be None or a positive number of seconds, not {max_hold!r}")
    ms = math.ceil(max_hold * 1000)
    if ms < timing.ttl_ms:
        raise MaxHold(f"max_hold ({max_hold}s) must not be shorter than the ttl ({timing.ttl}s)")
    return ms


def check_mode(mode: str) -> None:
    if mode not in ("read", "write"):
        raise ValueError(f"mode must be 'read' or 'write', not {mode!r}")


def check_keys(keys: Sequence[Any]) -> List[Any]:
    """The keys of a multi-key lock: 1 to 64, distinct, in the order given."""
    if isinstance(keys, (str, bytes)):
        raise TypeError("keys must be a sequence of keys, not one key")
    out = list(keys)
    if not out or len(out) > MAX_KEYS or len(set(out)) != len(out):
        raise ValueError(f"a MultiLock takes 1 to {MAX_KEYS} distinct keys, not {out!r}")
    return out


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an integer from 1 to {MAX_LIMIT}, not {limit!r}")
    return limit


def check_permits(limit: int, permits: int) -> None:
    if isinstance(permits, bool) or not isinstance(permits, int) or not 1 <= permits <= limit:
        raise ValueError(f"permits must be an integer from 1 to the limit {limit}, not {permits!r}")

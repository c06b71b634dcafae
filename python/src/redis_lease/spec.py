"""Settings shared by the sync and asyncio classes: validation, owner ids and the
:class:`~redis_lease.protocol.Kind` of each request."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from . import protocol
from .retry import RetryPolicy
from .timing import LeaseTiming

#: The largest semaphore limit the module accepts.
MAX_LIMIT = 2**31 - 1


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
    ) -> "Spec":
        if isinstance(key, (bytes, str)) and not key:
            raise ValueError("key must not be empty")
        if owner is not None and (not isinstance(owner, str) or not owner):
            raise ValueError("owner must be a non-empty string")
        if not command_timeout > 0:
            raise ValueError("command_timeout must be positive")
        return cls(
            key,
            LeaseTiming.of(ttl, renew_every),
            retry or RetryPolicy(),
            float(command_timeout),
            owner,
            bool(raise_on_lost),
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
        if mode not in ("read", "write"):
            raise ValueError(f"mode must be 'read' or 'write', not {mode!r}")
        owner, generated = self.owner_id()
        return protocol.lock_kind(self.key, owner, mode, self.timing.ttl_ms, generated)

    def semaphore_kind(self, limit: int, permits: int) -> protocol.Kind:
        check_permits(limit, permits)
        owner, generated = self.owner_id()
        return protocol.semaphore_kind(self.key, owner, limit, permits, self.timing.ttl_ms, generated)

    def leader_kind(self) -> protocol.Kind:
        candidate, generated = self.owner_id()
        return protocol.leader_kind(self.key, candidate, self.timing.ttl_ms, generated)


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an integer from 1 to {MAX_LIMIT}, not {limit!r}")
    return limit


def check_permits(limit: int, permits: int) -> None:
    if isinstance(permits, bool) or not isinstance(permits, int) or not 1 <= permits <= limit:
        raise ValueError(f"permits must be an integer from 1 to the limit {limit}, not {permits!r}")

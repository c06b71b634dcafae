"""The errors of this package. Fatal errors from Redis itself (WRONGTYPE, NOPERM, an unknown
command because the module is not loaded, ...) are raised as redis-py's own exceptions."""

from __future__ import annotations

import enum
from typing import Optional


class LossReason(enum.Enum):
    """Why a lease was lost."""

    #: No renewal succeeded before the local validity bound passed (the server was unreachable,
    #: frozen or too slow). Nobody else can have been granted the hold yet.
    EXPIRED = "it could not be renewed before it would lapse"
    #: The server answered that this owner holds nothing any more (lapsed on the server, the key
    #: was deleted, or LEASE.EXEC answered FENCED).
    REVOKED = "the server no longer counts this holder"
    #: A renewal was answered with an error that retrying cannot fix.
    FAILED = "a renewal failed with a permanent error"
    #: The hold reached its cap (its first grant + its max hold: ``max_hold`` on the acquisition,
    #: or the server's ``lease.max-hold``): the server renews it no further (``-MAXHOLD``).
    MAX_HOLD = "it reached its max hold: the server renews it no further"
    #: The holder released it.
    RELEASED = "it was released"

    def __str__(self) -> str:
        return self.value


class LeaseError(Exception):
    """Base class of this package's errors."""


class NotAcquired(LeaseError):
    """The lock, leadership or permits were not granted within the timeout."""


class LeaseLost(LeaseError):
    """The lease can no longer be proven valid: stop the protected work."""

    def __init__(self, reason: LossReason, message: Optional[str] = None) -> None:
        super().__init__(message or f"lease lost: {reason}")
        self.reason = reason


class Fenced(LeaseLost):
    """``LEASE.EXEC`` refused to run the command: the hold with this token is not live."""

    def __init__(self, message: str) -> None:
        super().__init__(LossReason.REVOKED, message)


class Deadlock(LeaseError):
    """The server refused to let the request wait because the wait would deadlock
    (``-DEADLOCK``): another reader of the same key already waits to upgrade, or the wait would
    close a cycle in the server's wait-for graph. Nothing was queued: release what this owner
    holds and try again."""


class MaxHold(LeaseError):
    """The ttl asked for would pass the hold's cap (``max_hold`` or the server's
    ``lease.max-hold``; ``-MAXHOLD``, whose text gives the ms left)."""


class LockGone(LeaseError):
    """The key was deleted, renamed, moved or flushed while this request waited (``-LOCKGONE``)."""


class Unavailable(LeaseError):
    """Only transient failures were seen until the deadline (or the retry budget) ran out."""

    def __init__(self, attempts: int, elapsed: float, last: BaseException) -> None:
        super().__init__(
            f"redis unavailable after {attempts} attempts over {elapsed:.3f}s: {last!r}"
        )
        self.attempts = attempts
        self.elapsed = elapsed
        self.last = last


class ProtocolError(LeaseError):
    """The server answered something this client does not understand (a contract mismatch)."""

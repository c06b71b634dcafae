"""Retry of transient failures: classification, and exponential backoff with full jitter."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from redis import exceptions as rx

from .errors import Deadlock, Fenced, LockGone, MaxHold, Unavailable


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried (as the Rust client's ``RetryPolicy``).

    The delay before retry ``n`` (from 0) is uniformly random between zero and
    ``min(max_delay, base_delay * 2**n)`` ("full jitter"), and never reaches past the caller's
    deadline. Without a deadline of its own (a ``try_*`` call, an unlimited wait, a renewal
    loop, a release) an operation gives up after ``budget`` seconds of uninterrupted failures.
    """

    base_delay: float = 0.02
    max_delay: float = 1.0
    budget: float = 30.0


@dataclass
class Backoff:
    """One run of retries under a policy."""

    policy: RetryPolicy
    now: Callable[[], float] = time.monotonic
    rng: Callable[[float, float], float] = random.uniform
    attempt: int = 0
    since: float = field(default=-1.0)

    def __post_init__(self) -> None:
        if self.since < 0:
            self.since = self.now()

    def next_delay(self, deadline: Optional[float]) -> Optional[float]:
        """The next delay, or None if ``deadline`` (or, without one, the budget) leaves no room
        for another try."""
        limit = deadline if deadline is not None else self.since + self.policy.budget
        now = self.now()
        if now >= limit:
            return None
        ceiling = min(self.policy.max_delay, self.policy.base_delay * (2 ** min(self.attempt, 30)))
        self.attempt += 1
        return min(self.rng(0.0, ceiling), limit - now)

    def give_up(self, last: BaseException) -> Unavailable:
        return Unavailable(self.attempt + 1, self.now() - self.since, last)


@dataclass(frozen=True)
class Transient:
    """Worth retrying. ``uncertain``: the request may have run (its reply was lost)."""

    uncertain: bool
    error: BaseException


@dataclass(frozen=True)
class Fatal:
    """Not worth retrying: raise ``error``."""

    error: BaseException


Failure = Union[Transient, Fatal]

# Error codes after which the request certainly did not run and asking again can succeed.
_RETRY_CODES = frozenset({"LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MOVED", "ASK", "BUSY"})
# redis-py strips the code from some replies and raises a class of its own instead.
_RETRY_CLASSES = (
    rx.BusyLoadingError,
    rx.ReadOnlyError,
    rx.TryAgainError,
    rx.ClusterDownError,
    rx.MasterDownError,
    rx.MovedError,
    rx.AskError,
)

# Connection errors that asking again cannot fix (a wrong password, a missing ACL permission).
_NEVER_RETRY = tuple(
    c for c in (getattr(rx, "AuthenticationError", None), getattr(rx, "AuthorizationError", None)) if c
)


def error_code(err: BaseException) -> str:
    """The first word of an error reply (``"DEADLOCK"`` for ``-DEADLOCK ...``)."""
    text = str(err).strip()
    return text.split(" ", 1)[0] if text else ""


def classify(err: BaseException, sent: bool = True) -> Failure:
    """Sorts an error into transient (and whether the request may have run) or fatal.
    ``sent``: whether the request may have reached the server (False when connecting failed)."""
    if isinstance(err, _NEVER_RETRY):
        return Fatal(err)
    if isinstance(err, _RETRY_CLASSES):  # before ConnectionError: BusyLoadingError is one
        return Transient(uncertain=False, error=err)
    if isinstance(err, rx.RedisClusterException) and not sent:
        return Transient(uncertain=False, error=err)  # no route to a node yet: nothing was sent
    if isinstance(err, (rx.ConnectionError, rx.TimeoutError, OSError)):
        # A refused or failed connection never carried the request; a reset, a timeout or a
        # dropped connection after sending may have lost the reply of an executed request.
        return Transient(uncertain=sent, error=err)
    if isinstance(err, rx.ResponseError):
        code = error_code(err)
        if code in _RETRY_CODES:
            return Transient(uncertain=False, error=err)
        if code == "DEADLOCK":
            return Fatal(Deadlock(str(err)))
        if code == "LOCKGONE":
            return Fatal(LockGone(str(err)))
        if code == "MAXHOLD":
            return Fatal(MaxHold(str(err)))
        if code == "FENCED":
            return Fatal(Fenced(str(err)))
        # A master demoted to replica (a failover) unblocks its waiters; they were not granted
        # there, so ask again. An operator's CLIENT UNBLOCK ... ERROR stays an error.
        if code == "UNBLOCKED" and "instance state changed" in str(err):
            return Transient(uncertain=False, error=err)
    return Fatal(err)

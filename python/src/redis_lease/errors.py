"""The errors of this package. Fatal errors from Redis itself (WRONGTYPE, NOPERM, an unknown
command because the module is not loaded, ...) are raised as redis-py's own exceptions."""

from __future__ import annotations

import enum
import os
import re
from typing import Any, Optional, Tuple


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


class MaxHold(LeaseError, ValueError):
    """The ttl asked for would pass the hold's cap (``max_hold`` or the server's
    ``lease.max-hold``; ``-MAXHOLD``, whose text gives the ms left). Also a ``ValueError``, as
    :class:`TtlTooLong`: a ``max_hold`` shorter than the ttl is refused before any request."""


class LockGone(LeaseError):
    """The key was deleted, renamed, moved or flushed while this request waited (``-LOCKGONE``)."""


class Unavailable(LeaseError):
    """Only transient failures were seen until the deadline (or the retry budget) ran out."""

    def __init__(self, attempts: int, elapsed: float, last: BaseException) -> None:
        super().__init__(f"redis unavailable after {attempts} attempts over {elapsed:.3f}s: {describe(last)}")
        self.attempts = attempts
        self.elapsed = elapsed
        self.last = last


def describe(err: BaseException) -> str:
    """``Type: text`` of an error, with the operating system's name for its cause when the text
    gives only a number (redis.asyncio says "Error 111 connecting to host:port. Connect call
    failed"; this adds "Connection refused")."""
    text = f"{type(err).__name__}: {err}"
    m = re.search(r"Error (\d+) connecting", text)
    errno = int(m.group(1)) if m else None
    cause: Optional[BaseException] = err
    while errno is None and cause is not None:
        if isinstance(cause, OSError) and cause.errno:
            errno = cause.errno
        cause = cause.__cause__ or cause.__context__
    if errno is not None:
        name = os.strerror(errno)
        if name.lower() not in text.lower():
            text += f" ({name})"
    return text


class ProtocolError(LeaseError):
    """The server answered something this client does not understand (a contract mismatch)."""


class ModuleNotLoaded(LeaseError):
    """The server does not know the module's commands: the redis-lease module is not loaded."""

    def __init__(self, where: str, reply: str) -> None:
        super().__init__(
            f"the redis-lease module is not loaded on {where} (the server answered: {reply}); load it "
            "with `loadmodule /path/to/libredis_lease.so` in redis.conf, `--loadmodule "
            "/path/to/libredis_lease.so` on redis-server's command line, or `MODULE LOAD "
            "/path/to/libredis_lease.so` at runtime"
        )
        self.where = where


class TtlTooLong(LeaseError, ValueError):
    """The server refused the ttl: above its ``lease.max-ttl`` (or ``lease.quarantine`` while
    that is set). ``max_ms``: the server's limit in ms, when it said it."""

    def __init__(self, reply: str, max_ms: Optional[int], ttl_ms: Optional[int] = None) -> None:
        asked = f"a ttl of {ttl_ms} ms ({ttl_ms / 1000:g} s)" if ttl_ms is not None else "the ttl"
        limit = f"{max_ms} ms ({max_ms / 1000:g} s)" if max_ms is not None else "its limit"
        super().__init__(
            f"the server refused {asked}: above its lease.max-ttl (or lease.quarantine) of {limit}. "
            f"This client takes ttl in seconds. (server: {reply})"
        )
        self.max_ms = max_ms
        self.ttl_ms = ttl_ms


class LimitMismatch(LeaseError):
    """The semaphore exists with another limit (``-LIMIT``): every request must name the same
    limit."""


class PermitsMismatch(LeaseError):
    """This owner already holds another number of permits of the semaphore (``-PERMITS``)."""


_MAX_TTL = re.compile(r"from 1 to (\d+) ms")


def typed_reply_error(err: Exception, where: str, args: Tuple[Any, ...] = ()) -> Exception:
    """This package's error for an error reply that has one (the module not loaded, a ttl
    above the server's limit, the semaphore's LIMIT and PERMITS refusals, by their codes and
    by the wording of servers that predate the codes), else ``err`` itself."""
    text = str(err)
    code = text.split(" ", 1)[0]
    # redis-py strips the "ERR " of most replies; a server may also send it.
    body = text[4:] if code == "ERR" else text
    command = str(args[0]).upper() if args else ""
    if body.startswith("unknown command") and command.split(".")[0] in ("RWLOCK", "LEADER", "SEMAPHORE", "LEASE"):
        return ModuleNotLoaded(where, text)
    if body.startswith("ttl must be"):
        m = _MAX_TTL.search(body)
        # The ttl follows the owner (RWLOCK.*LOCK, LEADER.CAMPAIGN, *.RENEW, after numkeys and
        # the keys for MLOCK / MRENEW) or the limit (SEMAPHORE.ACQUIRE).
        at = 4 if command == "SEMAPHORE.ACQUIRE" else 3
        if command in ("RWLOCK.MLOCK", "RWLOCK.MRENEW") and len(args) > 1 and str(args[1]).isdigit():
            at += int(args[1])
        ttl_ms = int(args[at]) if len(args) > at and str(args[at]).isdigit() else None
        return TtlTooLong(text, int(m.group(1)) if m else None, ttl_ms)
    if code == "LIMIT" or body.startswith("this semaphore's limit is"):
        return LimitMismatch(text)
    if code == "PERMITS" or (body.startswith("this owner holds") and "permits" in body):
        return PermitsMismatch(text)
    return err

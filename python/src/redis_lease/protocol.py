"""The client's behaviour as plain generators, free of I/O ("sans-I/O").

Each generator yields operations, a :class:`Call` (one request) or a :class:`Sleep`, and is
sent back the reply of each call (or a :class:`Failed`). The sync and asyncio connectors drive
the very same generators, so both have one implementation of acquisition with ``WAIT``,
adoption of a grant whose reply was lost (through ``RWLOCK.INFO``, ``SEMAPHORE.INFO`` or
``LEADER.CURRENT``), confirmation of a late grant, retries with backoff, the watchdog's renewal
loop and release. This mirrors the Rust client (client/src/lock.rs, lease.rs, retry.rs).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Generator, Optional, Sequence, Tuple, TypeVar, Union

from . import replies
from .errors import LeaseLost, LossReason, MaxHold, ProtocolError
from .retry import Backoff, Fatal, RetryPolicy, Transient, classify
from .timing import LeaseTiming, wait_ms

_log = logging.getLogger("redis_lease")

#: How long a call that does not wait (``try_*``) retries transient failures, in seconds.
TRY_BUDGET = 1.0

T = TypeVar("T")
Clock = Callable[[], float]


@dataclass(frozen=True)
class Call:
    """One request. ``limit``: seconds to wait for the reply (None: no limit). ``dedicated``: it
    waits inside the server, so it gets a connection of its own. ``route``: the key that
    chooses the cluster node (default: ``args[1]``, where every module command has its key)."""

    args: Tuple[Any, ...]
    limit: Optional[float]
    dedicated: bool = False
    route: Any = None

    @property
    def key(self) -> Any:
        return self.route if self.route is not None else self.args[1]


@dataclass(frozen=True)
class Sleep:
    """A pause. ``early``: the driver may end it early, when the route to the server changed
    (Sentinel announced a new master), so that the watchdog renews on the new one at once."""

    seconds: float
    early: bool = False


@dataclass(frozen=True)
class Failed:
    """What a driver sends back for a call that raised. ``sent``: whether the request may
    have reached the server (False when connecting failed)."""

    error: BaseException
    sent: bool = True


Op = Union[Call, Sleep]
Machine = Generator[Op, Any, T]


def one_token(v: Any) -> Tuple[int, ...]:
    return (replies.token(v),)


@dataclass(frozen=True)
class Kind:
    """What distinguishes a lock, a semaphore, an election and a multi-key lock for the shared
    machinery. Every release command ends with the owner."""

    request: Tuple[Any, ...]  # the grant request, without WAIT
    # The state read that adoption checks; None: nothing to adopt from (a multi-key grant),
    # so after a lost reply whatever may have been granted is given back and asked for again.
    info: Optional[Tuple[Any, ...]]
    renew: Tuple[Any, ...]  # ends with the ttl
    release: Tuple[Any, ...]
    hold: Callable[[Any], Tuple[int, int]]  # info reply -> (holds of ours, token) to adopt
    # Each grant adds a hold (RWLOCK reentrancy): a duplicated grant must be swept on release,
    # and a caller-chosen owner's existing holds are counted before the first attempt.
    reentrant: bool
    generated: bool  # the owner id is ours alone (a fresh UUIDv4)
    release_counts: bool = False  # release answers the number released (0/1 per call)
    route: Any = None  # the key that routes every request (None: args[1]; MLOCK's is numkeys)
    tokens: Callable[[Any], Tuple[int, ...]] = one_token  # grant reply -> its tokens
    # What renew and release answer when every hold was there (MRENEW / MUNLOCK count keys):
    # a renewal answering fewer found a hold gone.
    expect: int = 1


def _max_hold(max_hold_ms: Optional[int]) -> Tuple[Any, ...]:
    return ("MAXHOLD", max_hold_ms) if max_hold_ms is not None else ()


def lock_kind(key: Any, owner: str, mode: str, ttl_ms: int, generated: bool, max_hold_ms: Optional[int] = None) -> Kind:
    def hold(v: Any) -> Tuple[int, int]:
        h = replies.lock_info(v).hold_of(owner, mode)
        return (h.count, h.token) if h else (0, 0)

    cmd = "RWLOCK.WLOCK" if mode == "write" else "RWLOCK.RLOCK"
    return Kind(
        request=(cmd, key, owner, ttl_ms) + _max_hold(max_hold_ms),
        info=("RWLOCK.INFO", key),
        renew=("RWLOCK.RENEW", key, owner, ttl_ms),
        release=("RWLOCK.UNLOCK", key, owner),
        hold=hold,
        reentrant=True,
        generated=generated,
        release_counts=True,
    )


def semaphore_kind(
    key: Any,
    owner: str,
    limit: int,
    permits: int,
    ttl_ms: int,
    generated: bool,
    max_hold_ms: Optional[int] = None,
) -> Kind:
    def hold(v: Any) -> Tuple[int, int]:
        # A hold of other permits is not what was asked for: asking again gets the server's
        # refusal instead of adopting it.
        h = replies.semaphore_info(v).hold_of(owner)
        return (1, h.token) if h and h.permits == permits else (0, 0)

    return Kind(
        request=("SEMAPHORE.ACQUIRE", key, owner, limit, ttl_ms, "PERMITS", permits) + _max_hold(max_hold_ms),
        info=("SEMAPHORE.INFO", key),
        renew=("SEMAPHORE.RENEW", key, owner, ttl_ms),
        release=("SEMAPHORE.RELEASE", key, owner),
        hold=hold,
        reentrant=False,
        generated=generated,
    )


def leader_kind(key: Any, candidate: str, ttl_ms: int, generated: bool, max_hold_ms: Optional[int] = None) -> Kind:
    def hold(v: Any) -> Tuple[int, int]:
        cur = replies.leader_info(v)
        return (1, cur.term) if cur is not None and cur.candidate == candidate else (0, 0)

    return Kind(
        request=("LEADER.CAMPAIGN", key, candidate, ttl_ms) + _max_hold(max_hold_ms),
        info=("LEADER.CURRENT", key),
        renew=("LEADER.RENEW", key, candidate, ttl_ms),
        release=("LEADER.RESIGN", key, candidate),
        hold=hold,
        reentrant=False,
        generated=generated,
    )


def multi_lock_kind(keys: Sequence[Any], owner: str, mode: str, ttl_ms: int, max_hold_ms: Optional[int] = None) -> Kind:
    """Every key of ``keys`` at once (``RWLOCK.MLOCK``), routed by the first; ``owner`` must be
    fresh (its holds are this request's only, which is what lets a lost reply be given back)."""
    n = len(keys)

    def tokens(v: Any) -> Tuple[int, ...]:
        t = tuple(replies.token(x) for x in replies.items(v))
        if len(t) != n:
            raise ProtocolError(f"RWLOCK.MLOCK answered {v!r} for {n} keys")
        return t

    return Kind(
        request=("RWLOCK.MLOCK", n, *keys, owner, ttl_ms)
        + (("READ",) if mode == "read" else ())
        + _max_hold(max_hold_ms),
        info=None,
        renew=("RWLOCK.MRENEW", n, *keys, owner, ttl_ms),
        release=("RWLOCK.MUNLOCK", n, *keys, owner),
        hold=lambda v: (0, 0),  # the reply of the give-back (``info`` None): nothing to adopt
        reentrant=True,
        generated=True,
        route=keys[0],
        tokens=tokens,
        expect=n,
    )


@dataclass(frozen=True)
class Grant:
    """A confirmed grant. ``sent``: when the request that last proved the lease was sent (the
    watchdog's starting point). ``sweep``: release until the server answers 0 (a surplus hold
    may exist after an unknown outcome). ``tokens``: one per key of a multi-key grant."""

    token: int
    sent: float
    sweep: bool
    tokens: Tuple[int, ...] = ()


class _Again:
    """Marker: go round the acquisition loop once more."""


_AGAIN = _Again()


def query_retry(
    call: Call, deadline: Optional[float], policy: RetryPolicy, now: Clock = time.monotonic
) -> Machine[Any]:
    """A short request, retried on transient failures until ``deadline`` (or the budget)."""
    backoff = Backoff(policy, now)
    while True:
        r = yield call
        if not isinstance(r, Failed):
            return r
        f = classify(r.error, r.sent)
        if isinstance(f, Fatal):
            raise f.error
        d = backoff.next_delay(deadline)
        if d is None:
            raise backoff.give_up(f.error) from f.error
        yield Sleep(d)


@dataclass(frozen=True)
class Capped:
    """A renewal the server refused at the hold's cap (``-MAXHOLD``): ``left_ms`` remained
    until it when the refused request was ``sent``. Nothing changed on the server."""

    left_ms: int
    sent: float

    def ttl_ms(self, now: float) -> int:
        """A lease that ends a little before the cap if asked for at ``now``: less the time
        since the refusal's request was sent, and a few ms more (the server refuses a lease
        past the cap by even one, and the next request takes a moment to arrive)."""
        return int(self.left_ms - (now - self.sent) * 1000) - 5 - self.left_ms // 100


def ms_left(error: BaseException) -> int:
    """The ms a ``MAXHOLD <ms> ms left ...`` refusal gives."""
    words = str(error).split()
    for i, w in enumerate(words[:-1]):
        if w.upper().endswith("MAXHOLD") and words[i + 1].isdigit():
            return int(words[i + 1])
    return 0


def renew_once(
    args: Tuple[Any, ...],
    valid_until: float,
    policy: RetryPolicy,
    command_timeout: float,
    now: Clock = time.monotonic,
    route: Any = None,
    expect: int = 1,
) -> Machine[Union[float, LossReason, Capped]]:
    """Renews until success (answers the send time of the renewing request), a definitive
    answer, or ``valid_until`` (answers the reason of the loss); at the hold's cap it answers
    :class:`Capped`. ``route``, ``expect``: as in :class:`Kind`."""
    backoff = Backoff(policy, now)
    key = args[1] if route is None else route
    while True:
        t = now()
        if t >= valid_until:
            return LossReason.EXPIRED
        r = yield Call(args, min(command_timeout, valid_until - t), route=route)
        if r is None:
            return LossReason.REVOKED
        if isinstance(r, Failed):
            f = classify(r.error, r.sent)
            if isinstance(f, Transient):
                _log.warning("redis-lease: renewing %r failed, retrying until the lease would lapse: %s", key, f.error)
                d = backoff.next_delay(valid_until)
                if d is None:
                    return LossReason.EXPIRED
                yield Sleep(d)
                continue
            if isinstance(f.error, MaxHold):
                return Capped(ms_left(f.error), t)
            if not isinstance(f.error, LeaseLost):
                _log.warning("redis-lease: renewing %r failed for good: %s", key, f.error)
                return LossReason.FAILED
            return LossReason.REVOKED
        if isinstance(r, int) and not isinstance(r, bool):
            # RENEW answers a token; MRENEW how many keys it renewed: fewer is a hold gone.
            return t if r >= expect else LossReason.REVOKED
        return LossReason.FAILED


def watchdog(
    renew: Tuple[Any, ...],
    timing: LeaseTiming,
    policy: RetryPolicy,
    command_timeout: float,
    last_sent: float,
    publish: Callable[[Optional[float], Optional[LossReason]], None],
    now: Clock = time.monotonic,
    route: Any = None,
    expect: int = 1,
) -> Machine[LossReason]:
    """Keeps a lease alive until it is lost: renews every ``renew_every`` (at once when the
    driver ends the wait early: Sentinel switched the master), publishes each new
    validity bound (``publish(bound, None)``; at the cap ``publish(bound, MAX_HOLD)``: it ends
    there, so a clock check that beats the watchdog to it reports MAX_HOLD too) and finally the
    loss (``publish(None, reason)``). A driver stops it by closing it (on release).
    ``route``, ``expect``: as in :class:`Kind`."""
    valid_until = timing.valid_until(last_sent)
    while True:
        renew_at = min(last_sent + timing.renew_every, valid_until)
        yield Sleep(max(0.0, renew_at - now()), early=True)
        r = yield from renew_once(renew, valid_until, policy, command_timeout, now, route, expect)
        if isinstance(r, Capped):
            # The last renewal, up to the cap exactly; the lease ends there and is reported
            # lost (MAX_HOLD) just before its bound.
            bound = yield from last_renewal(renew, r, valid_until, policy, command_timeout, now, route, expect)
            if bound is not None:
                valid_until = bound
            publish(valid_until, LossReason.MAX_HOLD)
            yield Sleep(max(0.0, valid_until - min(0.005, max(0.0, valid_until - now())) - now()))
            publish(None, LossReason.MAX_HOLD)
            return LossReason.MAX_HOLD
        if isinstance(r, LossReason):
            publish(None, r)
            return r
        last_sent = r
        valid_until = timing.valid_until(r)
        publish(valid_until, None)


def last_renewal(
    renew: Tuple[Any, ...],
    capped: Capped,
    valid_until: float,
    policy: RetryPolicy,
    command_timeout: float,
    now: Clock = time.monotonic,
    route: Any = None,
    expect: int = 1,
) -> Machine[Optional[float]]:
    """Renews once more, up to the hold's cap (every renewal ends with its ttl; asked again
    from a new refusal if this one came too late): the new validity bound, or None where none
    can be had (too short to be worth it, or it failed: the lease ends at its current bound)."""
    for _ in range(3):
        try:
            timing = LeaseTiming.of(capped.ttl_ms(now()) / 1000)
        except ValueError:
            return None
        if timing.valid_until(now()) <= valid_until:
            return None
        r = yield from renew_once(
            renew[:-1] + (timing.ttl_ms,), valid_until, policy, command_timeout, now, route, expect
        )
        if isinstance(r, float):
            return timing.valid_until(r)
        if not isinstance(r, Capped):
            return None
        capped = r
    return None


class Acquisition:
    """One acquisition: a lock hold (of one key or several), a semaphore hold or leadership.

    ``wait``: None waits without a limit (``WAIT 0``); a number <= 0 tries once (no ``WAIT``);
    else the longest wait in seconds (``WAIT ms``), which also bounds retries.

    After a lost reply (the request may have been granted) it does not simply ask again: it
    reads the state (``kind.info``) and adopts a hold of its owner if there is one, also once
    more when out of time. A multi-key grant is not adopted (``kind.info`` None): its fresh
    owner's holds are this request's only, so giving them all back (``kind.release``) before
    asking again is as safe, and simpler than reading every key's token. ``armed`` tells the
    driver, when the machine ends abnormally (an error, a cancellation), that a hold of ours
    may exist: it must release it.
    """

    def __init__(
        self,
        kind: Kind,
        timing: LeaseTiming,
        policy: RetryPolicy,
        command_timeout: float,
        wait: Optional[float],
        now: Clock = time.monotonic,
    ) -> None:
        self.kind = kind
        self.timing = timing
        self.policy = policy
        self.command_timeout = command_timeout
        self.wait = wait
        self.now = now
        self.armed = False
        # When the first request whose outcome is unknown was sent.
        self.uncertain_since: Optional[float] = None
        # Whether any request's outcome was unknown (only then can a surplus hold exist).
        self.had_uncertain = False
        # Set when out of time with an unknown outcome: the error to report unless the final
        # state check finds a hold to adopt.
        self.last_error: Optional[BaseException] = None

    @property
    def trying(self) -> bool:
        return self.wait is not None and self.wait <= 0

    def run(self) -> Machine[Optional[Grant]]:
        k = self.kind
        deadline = None if self.wait is None or self.trying else self.now() + self.wait
        baseline = 0
        if k.reentrant and not k.generated and k.info is not None:
            # Holds of a caller-chosen owner that existed before (reentrancy), so that an
            # uncertain failure can tell a grant of ours from an older one.
            v = yield from query_retry(Call(k.info, self.command_timeout), None, self.policy, self.now)
            baseline = k.hold(v)[0]
        # A call that does not wait gives transient failures (a refused connection, LOADING)
        # a second or so, not the whole budget: its caller asked for an answer now.
        policy = replace(self.policy, budget=min(self.policy.budget, TRY_BUDGET)) if self.trying else self.policy
        backoff = Backoff(policy, self.now)
        while True:
            if self.uncertain_since is not None:
                # Read the state to adopt from, or give back what may have been granted.
                r = yield Call(k.release if k.info is None else k.info, self.command_timeout, route=k.route)
                if isinstance(r, Failed):
                    f = classify(r.error, r.sent)
                    if isinstance(f, Fatal):
                        raise f.error
                    d = None if self.last_error is not None else backoff.next_delay(deadline)
                    if d is None:
                        raise backoff.give_up(f.error) from f.error
                    yield Sleep(d)
                    continue
                count, tok = k.hold(r)
                if count > baseline:
                    out = yield from self._on_grant((tok,), self.uncertain_since, deadline, backoff)
                    if isinstance(out, _Again):
                        continue
                    return out
                self.uncertain_since = None
                if self.last_error is not None:
                    # The deadline has passed and nothing was granted after all.
                    self.armed = False
                    err = self.last_error
                    raise backoff.give_up(err) from err
            sent = self.now()
            if self.wait is None:
                call = Call(k.request + ("WAIT", 0), None, dedicated=True, route=k.route)
            elif deadline is not None and deadline > sent + 0.001:
                left = deadline - sent
                call = Call(
                    k.request + ("WAIT", wait_ms(left)), left + self.command_timeout, dedicated=True, route=k.route
                )
            else:
                call = Call(k.request, self.command_timeout, route=k.route)
            self.armed = k.generated
            r = yield call
            if r is None:
                if self.wait is None:
                    continue  # WAIT 0 answers nil only where it cannot block: ask again
                self.armed = False
                return None
            if not isinstance(r, Failed):
                since = self.uncertain_since if self.uncertain_since is not None else sent
                out = yield from self._on_grant(k.tokens(r), since, deadline, backoff)
                if isinstance(out, _Again):
                    continue
                return out
            f = classify(r.error, r.sent)
            if isinstance(f, Fatal):
                if self.uncertain_since is None:
                    self.armed = False
                raise f.error
            if f.uncertain:
                self.had_uncertain = True
                if self.uncertain_since is None:
                    self.uncertain_since = sent
            elif self.uncertain_since is None:
                self.armed = False
            d = backoff.next_delay(deadline)
            if d is not None:
                yield Sleep(d)
            elif self.uncertain_since is not None:
                # Out of time; but a request whose reply was lost may have been granted: one
                # last look at the state adopts such a hold.
                self.last_error = f.error
            else:
                raise backoff.give_up(f.error) from f.error

    def _on_grant(
        self, tokens: Tuple[int, ...], since: float, deadline: Optional[float], backoff: Backoff
    ) -> Machine[Union[Grant, None, _Again]]:
        """A grant (by a request sent at ``since`` or later) becomes a Grant, unless its lease
        could not be confirmed: lapsed already (ask again while the deadline allows), or
        unknown (check the state, as after a lost reply)."""
        k = self.kind
        sweep = k.reentrant and k.generated and self.had_uncertain
        confirmed = yield from self._confirm(since)
        if not isinstance(confirmed, LossReason):
            self.armed = False
            return Grant(tokens[0], confirmed, sweep, tokens)
        if confirmed is LossReason.REVOKED:
            self.uncertain_since = None
            if k.expect > 1:
                # Only some keys' holds may be gone: give back the others.
                yield from query_retry(
                    Call(k.release, self.command_timeout, route=k.route), None, self.policy, self.now
                )
            if self.trying or (deadline is not None and self.now() >= deadline):
                self.armed = False
                return None
            return _AGAIN
        self.had_uncertain = True
        self.uncertain_since = since
        d = backoff.next_delay(deadline)
        if d is None:
            raise LeaseLost(confirmed)
        yield Sleep(d)
        return _AGAIN

    def _confirm(self, sent: float) -> Machine[Union[float, LossReason]]:
        """Renews at once if the wait used up much of the lease (the server's answer is
        authoritative even when the local bound has passed: a renewal that finds the hold
        proves it from its own send time on). Answers the send time that proves the lease."""
        t = self.timing
        now = self.now()
        if t.valid_until(sent) - now >= t.ttl * 2 / 3:
            return sent
        until = t.confirm_deadline(sent, now, self.command_timeout)
        k = self.kind
        r = yield from renew_once(k.renew, until, self.policy, self.command_timeout, self.now, k.route, k.expect)
        # Refused only at the hold's cap: the server holds it, as granted.
        return sent if isinstance(r, Capped) else r


def release(
    kind: Kind, sweep: bool, policy: RetryPolicy, command_timeout: float, now: Clock = time.monotonic
) -> Machine[int]:
    """Releases: one request, or (``sweep``) until the server answers 0, at most 64 times.
    Answers how many holds were released (a multi-key one counts if every key's was there)."""
    released = 0
    for _ in range(64 if sweep else 1):
        v = yield from query_retry(Call(kind.release, command_timeout, route=kind.route), None, policy, now)
        n = replies.integer(v, -1)
        if n == kind.expect:
            released += 1
        elif n == 0:
            break
        elif not 0 < n < kind.expect:  # fewer: some keys' holds were gone already
            raise ProtocolError(f"{kind.release[0]} answered {v!r}")
    return released


def fenced_exec(
    key: Any,
    token: int,
    command: Tuple[Any, ...],
    deadline: Optional[float],
    policy: RetryPolicy,
    command_timeout: float,
    now: Clock = time.monotonic,
) -> Machine[Any]:
    """``LEASE.EXEC key token command...``: retried only where the command certainly did not
    run (a refused connection, LOADING, TRYAGAIN, READONLY, ...), until ``deadline``. A lost
    reply is not retried (the write may have run): it raises ``Unavailable``."""
    if not command:
        raise ValueError("exec needs a command")
    backoff = Backoff(policy, now)
    while True:
        r = yield Call(("LEASE.EXEC", key, token) + tuple(command), command_timeout)
        if not isinstance(r, Failed):
            return r
        f = classify(r.error, r.sent)
        if isinstance(f, Fatal):
            raise f.error
        d = None if f.uncertain else backoff.next_delay(deadline)
        if d is None:
            raise backoff.give_up(f.error) from f.error
        yield Sleep(d)


def missing_notify_flags(current: str) -> str:
    """The ``notify-keyspace-events`` classes a leader observer needs that ``current`` lacks:
    ``K`` (keyspace channel), ``d`` (module events), ``g`` (del, rename, ...), ``x`` (expired).

    >>> missing_notify_flags(""), missing_notify_flags("KEA"), missing_notify_flags("Kd")
    ('Kdgx', '', 'gx')
    """

    def has(c: str) -> bool:
        return c in current or (c in "g$lshzxetd" and "A" in current)

    return "".join(c for c in "Kdgx" if not has(c))


def notify_flags(config_get_reply: Any) -> str:
    """The value of ``CONFIG GET notify-keyspace-events`` (RESP2 list or RESP3 map)."""
    if isinstance(config_get_reply, dict):
        vals = list(config_get_reply.values())
        return replies.text(vals[0]) if vals else ""
    if isinstance(config_get_reply, (list, tuple)) and len(config_get_reply) >= 2:
        return replies.text(config_get_reply[1])
    return ""

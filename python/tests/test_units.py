"""Unit tests of the pure parts (no server): timing, backoff, error classification, reply
parsing, and the sans-I/O machines driven by a script with a fake clock."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, List, Optional

import pytest
import redis
import redis.asyncio as aredis
from redis import exceptions as rx
from redis_lease import (
    Connector,
    Deadlock,
    Fenced,
    LeaseTiming,
    LockGone,
    LossReason,
    RetryPolicy,
    Unavailable,
    protocol,
    replies,
)
from redis_lease.asyncio import Connector as AsyncConnector
from redis_lease.protocol import Acquisition, Call, Failed, Grant, Sleep
from redis_lease.retry import Backoff, Transient, classify
from redis_lease.routing import master_switch, redirection
from redis_lease.timing import seconds_to_ms, wait_ms


class Script:
    """Drives a machine with a fake clock; ``respond(call)`` answers each call (and may move
    the clock, as a timeout would)."""

    def __init__(self, respond: Callable[["Script", Call], Any]) -> None:
        self.t = 1000.0
        self.calls: List[Call] = []
        self.respond = respond

    def now(self) -> float:
        return self.t

    def run(self, machine: protocol.Machine[Any]) -> Any:
        try:
            op = next(machine)
            while True:
                if isinstance(op, Sleep):
                    assert op.seconds >= 0
                    self.t += op.seconds
                    value = None
                else:
                    self.calls.append(op)
                    value = self.respond(self, op)
                op = machine.send(value)
        except StopIteration as s:
            return s.value

    def names(self) -> List[str]:
        return [str(c.args[0]) for c in self.calls]


def lost_reply(s: Script, c: Call) -> Failed:
    """The reply did not come within the call's limit."""
    s.t += c.limit if c.limit is not None else 10.0
    return Failed(rx.TimeoutError("no reply in time"))


def reset(s: Script, c: Call, after: float = 1.0) -> Failed:
    """The connection was reset while waiting: the request may have run."""
    s.t += after
    return Failed(rx.ConnectionError("Connection reset by peer"))


POLICY = RetryPolicy(base_delay=0.01, max_delay=0.1, budget=5.0)
TIMING = LeaseTiming.of(3.0)


def info_with(owner: str, mode: str = "write", count: int = 1, token: int = 42) -> List[Any]:
    holder = [b"owner", owner.encode(), b"mode", mode.encode(), b"count", count, b"ttl", 2900, b"token", token]
    return [b"mode", mode.encode(), b"holders", [holder], b"waiters", 0, b"token", token]


# -- timing ------------------------------------------------------------------------------


def test_ttl_rounds_up_to_whole_ms_and_never_down() -> None:
    assert [seconds_to_ms(x) for x in (1.1, 0.0001, 5, 1.0001, 2.5)] == [1100, 1, 5000, 1001, 2500]
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            seconds_to_ms(bad)
    with pytest.raises(TypeError):
        seconds_to_ms("1")  # type: ignore[arg-type]


def test_validity_bound_is_send_time_plus_ttl_minus_margin() -> None:
    t = LeaseTiming.of(1.0)
    assert t.renew_every == pytest.approx(1 / 3)
    assert t.margin == pytest.approx(0.012)  # 1% + 2 ms
    assert t.valid_until(50.0) == pytest.approx(50.988)
    assert LeaseTiming.of(10.0).margin == pytest.approx(0.102)
    with pytest.raises(ValueError):
        LeaseTiming.of(0.002)
    with pytest.raises(ValueError):
        LeaseTiming.of(1.0, renew_every=0.995)


def test_wait_is_whole_ms_within_the_servers_range() -> None:
    assert (wait_ms(0.5999), wait_ms(0.0), wait_ms(1e15)) == (599, 1, 10**12)


# -- backoff and classification ------------------------------------------------------------


def test_delays_stay_under_the_cap_and_the_deadline() -> None:
    now = [0.0]
    b = Backoff(RetryPolicy(0.01, 0.04, 60.0), now=lambda: now[0], rng=lambda lo, hi: hi)
    assert [round(b.next_delay(None) or 0, 3) for _ in range(4)] == [0.01, 0.02, 0.04, 0.04]
    assert b.next_delay(-1.0) is None
    assert b.next_delay(0.002) == pytest.approx(0.002)
    now[0] = 61.0
    assert b.next_delay(None) is None, "out of budget"
    full = Backoff(RetryPolicy(0.01, 0.04, 60.0))
    assert all(0 <= (full.next_delay(None) or 0) <= 0.04 for _ in range(50))


def test_classification() -> None:
    def kind(e: BaseException, sent: bool = True) -> Any:
        f = classify(e, sent)
        return ("transient", f.uncertain) if isinstance(f, Transient) else ("fatal", type(f.error).__name__)

    assert kind(rx.ConnectionError("refused"), sent=False) == ("transient", False)
    assert kind(rx.ConnectionError("reset")) == ("transient", True)
    assert kind(rx.TimeoutError("late")) == ("transient", True)
    for text in ("LOADING x", "TRYAGAIN x", "CLUSTERDOWN x", "MASTERDOWN x", "READONLY x", "MOVED 1 h:1", "ASK 1 h:1"):
        assert kind(rx.ResponseError(text)) == ("transient", False), text
    for cls in (rx.BusyLoadingError, rx.ReadOnlyError, rx.TryAgainError, rx.ClusterDownError, rx.MasterDownError):
        assert kind(cls("code stripped by redis-py")) == ("transient", False), cls
    assert kind(rx.ResponseError("UNBLOCKED the instance state changed")) == ("transient", False)
    assert kind(rx.ResponseError("UNBLOCKED client unblocked via CLIENT UNBLOCK")) == ("fatal", "ResponseError")
    assert kind(rx.ResponseError("DEADLOCK two upgrades")) == ("fatal", "Deadlock")
    assert kind(rx.ResponseError("LOCKGONE deleted")) == ("fatal", "LockGone")
    assert kind(rx.ResponseError("FENCED not live")) == ("fatal", "Fenced")
    assert kind(rx.ResponseError("WRONGTYPE x")) == ("fatal", "ResponseError")
    assert kind(rx.AuthenticationError("bad password")) == ("fatal", "AuthenticationError")
    assert kind(rx.SlotNotCoveredError("slot 7 not covered"), sent=False) == ("transient", False)


def test_redirections_are_parsed_with_or_without_the_code() -> None:
    m = redirection(rx.ResponseError("MOVED 3999 127.0.0.1:7002"))
    assert m is not None and (m.ask, m.slot, m.host, m.port) == (False, 3999, "127.0.0.1", 7002)
    a = redirection(rx.AskError("3999 127.0.0.1:7003"))
    assert a is not None and (a.ask, a.port) == (True, 7003)
    assert redirection(rx.ResponseError("ERR nope")) is None


# -- replies --------------------------------------------------------------------------------


def test_info_replies_parse_in_resp2_and_resp3_shapes() -> None:
    resp2 = info_with("me", "read", 2, 7)
    resp3 = {
        "mode": "read",
        "holders": [{"owner": "me", "mode": "read", "count": 2, "ttl": 2900, "token": 7}],
        "waiters": 1,
        "token": 7,
    }
    for v in (resp2, resp3):
        info = replies.lock_info(v)
        h = info.hold_of("me", "read")
        assert info.mode == "read" and h is not None and (h.count, h.token, h.ttl) == (2, 7, 2.9)
    assert replies.lock_info([b"mode", b"none", b"holders", [], b"waiters", 0, b"token", 0]).mode is None
    sem = replies.semaphore_info(
        {
            "limit": 5,
            "used": 3,
            "holders": [{"owner": "o", "permits": 3, "ttl": 10, "token": 9}],
            "waiters": 2,
            "token": 9,
        }
    )
    assert (sem.limit, sem.used, sem.waiters) == (5, 3, 2) and sem.hold_of("o") is not None
    cur = replies.leader_info([b"node-1", 17, 4991])
    assert cur is not None and (cur.candidate, cur.term, cur.ttl) == ("node-1", 17, 4.991)
    assert replies.leader_info(None) is None
    with pytest.raises(replies.ProtocolError):
        replies.token(b"OK")


def test_the_observer_adds_only_missing_notification_classes() -> None:
    assert protocol.missing_notify_flags("") == "Kdgx"
    assert protocol.missing_notify_flags("KEA") == ""
    assert protocol.missing_notify_flags("Ex") == "Kdg"
    assert protocol.notify_flags([b"notify-keyspace-events", b"KEd"]) == "KEd"
    assert protocol.notify_flags({"notify-keyspace-events": "xE"}) == "xE"


# -- machines -------------------------------------------------------------------------------


def lock_acq(wait: Optional[float], s: Script, owner: str = "me", generated: bool = True) -> Acquisition:
    kind = protocol.lock_kind("k", owner, "write", TIMING.ttl_ms, generated)
    return Acquisition(kind, TIMING, POLICY, 1.5, wait, now=s.now)


def test_a_lost_reply_is_adopted_through_info_not_asked_again() -> None:
    def respond(s: Script, c: Call) -> Any:
        if c.args[0] == "RWLOCK.WLOCK":
            return lost_reply(s, c)
        if c.args[0] == "RWLOCK.INFO":
            return info_with("me", token=42)
        return 42  # the confirming RENEW

    s = Script(respond)
    acq = lock_acq(5.0, s)
    g = s.run(acq.run())
    assert isinstance(g, Grant) and g.token == 42 and g.sweep, "adopted; released with a sweep"
    assert s.names().count("RWLOCK.WLOCK") == 1, "no second grant request"
    assert s.calls[0].dedicated and s.calls[0].args[-2:] == ("WAIT", 5000)
    assert not acq.armed


def test_after_a_lost_reply_with_nothing_granted_it_asks_again_for_the_time_left() -> None:
    wlocks = []

    def respond(s: Script, c: Call) -> Any:
        if c.args[0] == "RWLOCK.WLOCK":
            wlocks.append(c)
            return reset(s, c) if len(wlocks) == 1 else 77
        return info_with("someone-else")

    s = Script(respond)
    g = s.run(lock_acq(5.0, s).run())
    assert g.token == 77 and g.sweep
    assert len(wlocks) == 2 and 3800 < int(wlocks[1].args[-1]) < 4000, wlocks[1].args


def test_out_of_time_after_a_lost_reply_one_last_look_adopts() -> None:
    def respond(s: Script, c: Call) -> Any:
        if c.args[0] == "RWLOCK.WLOCK":
            return lost_reply(s, c)  # the limit (wait + 1.5 s) is past the deadline
        if c.args[0] == "RWLOCK.INFO":
            return info_with("me", token=5)
        return 5

    s = Script(respond)
    g = s.run(lock_acq(0.5, s).run())
    assert g.token == 5 and s.names() == ["RWLOCK.WLOCK", "RWLOCK.INFO", "RWLOCK.RENEW"]


def test_out_of_time_with_nothing_granted_is_unavailable_and_leaves_nothing_armed() -> None:
    def respond(s: Script, c: Call) -> Any:
        return lost_reply(s, c) if c.args[0] == "RWLOCK.WLOCK" else info_with("other")

    s = Script(respond)
    acq = lock_acq(0.5, s)
    with pytest.raises(Unavailable):
        s.run(acq.run())
    assert not acq.armed


def test_a_refused_connection_is_retried_without_a_state_check() -> None:
    n = [0]

    def respond(s: Script, c: Call) -> Any:
        n[0] += 1
        return Failed(rx.ConnectionError("refused"), sent=False) if n[0] < 3 else 9

    s = Script(respond)
    g = s.run(lock_acq(0.0, s).run())
    assert g.token == 9 and not g.sweep and s.names() == ["RWLOCK.WLOCK"] * 3
    assert all(not c.dedicated and "WAIT" not in c.args for c in s.calls), "try: no WAIT"


def test_a_late_grant_is_confirmed_by_a_renewal() -> None:
    def respond(s: Script, c: Call) -> Any:
        if c.args[0] == "RWLOCK.WLOCK":
            s.t += 2.0  # granted after two thirds of the ttl in the queue
            return 11
        assert c.args[0] == "RWLOCK.RENEW"
        return 11

    s = Script(respond)
    g = s.run(lock_acq(None, s).run())
    assert s.names() == ["RWLOCK.WLOCK", "RWLOCK.RENEW"] and g.sent == 1002.0
    assert s.calls[0].args[-2:] == ("WAIT", 0) and s.calls[0].limit is None


def test_errors_that_retrying_cannot_fix_are_raised() -> None:
    for text, exc in (("DEADLOCK x", Deadlock), ("LOCKGONE x", LockGone), ("WRONGTYPE x", rx.ResponseError)):
        s = Script(lambda s, c, text=text: Failed(rx.ResponseError(text)))
        acq = lock_acq(1.0, s)
        with pytest.raises(exc):
            s.run(acq.run())
        assert not acq.armed and len(s.calls) == 1


def test_a_caller_chosen_owner_adopts_only_a_hold_beyond_its_existing_ones() -> None:
    infos = iter(
        [info_with("me", count=1, token=3), info_with("me", count=1, token=3), info_with("me", count=2, token=3)]
    )

    def respond(s: Script, c: Call) -> Any:
        if c.args[0] == "RWLOCK.INFO":
            return next(infos)
        return reset(s, c) if c.args[0] == "RWLOCK.WLOCK" else 3

    s = Script(respond)
    g = s.run(lock_acq(10.0, s, generated=False).run())
    assert g.token == 3 and not g.sweep
    assert s.names()[:4] == ["RWLOCK.INFO", "RWLOCK.WLOCK", "RWLOCK.INFO", "RWLOCK.WLOCK"]


def test_semaphore_requests_carry_the_limit_and_permits_and_adopt_by_info() -> None:
    kind = protocol.semaphore_kind("s", "me", 5, 2, 3000, True)

    def respond(s: Script, c: Call) -> Any:
        if c.args[0] == "SEMAPHORE.ACQUIRE":
            return lost_reply(s, c)
        if c.args[0] == "SEMAPHORE.INFO":
            return {
                "limit": 5,
                "used": 2,
                "holders": [{"owner": "me", "permits": 2, "ttl": 2000, "token": 8}],
                "waiters": 0,
                "token": 8,
            }
        return 8

    s = Script(respond)
    g = s.run(Acquisition(kind, TIMING, POLICY, 1.5, 5.0, now=s.now).run())
    assert s.calls[0].args == ("SEMAPHORE.ACQUIRE", "s", "me", 5, 3000, "PERMITS", 2, "WAIT", 5000)
    assert g.token == 8 and not g.sweep, "one hold per owner: nothing to sweep"
    assert kind.renew == ("SEMAPHORE.RENEW", "s", "me", 3000) and kind.release == ("SEMAPHORE.RELEASE", "s", "me")


def test_a_semaphore_hold_of_other_permits_is_not_adopted() -> None:
    """One hold per owner: after a lost reply, a hold of the owner with other permits is not
    what was asked for; asking again gets the server's answer (here: a grant)."""
    kind = protocol.semaphore_kind("s", "me", 5, 2, 3000, False)
    acquires = 0

    def respond(s: Script, c: Call) -> Any:
        nonlocal acquires
        if c.args[0] == "SEMAPHORE.ACQUIRE":
            acquires += 1
            return reset(s, c) if acquires == 1 else 8
        if c.args[0] == "SEMAPHORE.INFO":
            return {
                "limit": 5,
                "used": 1,
                "holders": [{"owner": "me", "permits": 1, "ttl": 2000, "token": 7}],
                "waiters": 0,
                "token": 7,
            }
        return 8

    s = Script(respond)
    g = s.run(Acquisition(kind, TIMING, POLICY, 1.5, 5.0, now=s.now).run())
    assert g.token == 8 and acquires == 2
    assert s.names()[:3] == ["SEMAPHORE.ACQUIRE", "SEMAPHORE.INFO", "SEMAPHORE.ACQUIRE"]


def test_leadership_after_a_lost_reply_is_adopted_from_current() -> None:
    kind = protocol.leader_kind("e", "cand", 3000, True)

    def respond(s: Script, c: Call) -> Any:
        if c.args[0] == "LEADER.CAMPAIGN":
            return lost_reply(s, c)
        if c.args[0] == "LEADER.CURRENT":
            return [b"cand", 21, 2500]
        return 21

    s = Script(respond)
    g = s.run(Acquisition(kind, TIMING, POLICY, 1.5, 5.0, now=s.now).run())
    assert g.token == 21 and "LEADER.CAMPAIGN" == s.names()[0] and "LEADER.CURRENT" in s.names()


def test_watchdog_renews_every_third_and_signals_expiry_at_the_bound() -> None:
    bounds: List[Any] = []
    sends: List[float] = []

    def respond(s: Script, c: Call) -> Any:
        sends.append(s.t)
        if len(sends) <= 3:
            return 1
        return lost_reply(s, c)  # the server stops answering

    s = Script(respond)
    reason = s.run(
        protocol.watchdog(
            ("RWLOCK.RENEW", "k", "me", 3000),
            TIMING,
            POLICY,
            1.5,
            1000.0,
            lambda b, r: bounds.append((b, r)),
            now=s.now,
        )
    )
    assert reason is LossReason.EXPIRED
    assert sends[:3] == pytest.approx([1001.0, 1002.0, 1003.0]), "every third of the ttl"
    assert bounds[:3] == [(pytest.approx(t + 3.0 - 0.032), None) for t in (1001.0, 1002.0, 1003.0)]
    assert bounds[-1] == (None, LossReason.EXPIRED)
    # No request is given a limit past the last bound, and the loss comes at that bound.
    last = 1003.0 + 3.0 - 0.032
    assert all(c.limit is not None and t + c.limit <= last + 1e-9 for c, t in zip(s.calls[3:], sends[3:]))
    assert s.t == pytest.approx(last)


def test_watchdog_reports_revocation_on_nil() -> None:
    seen: List[Any] = []
    s = Script(lambda s, c: None)
    assert (
        s.run(
            protocol.watchdog(
                ("RWLOCK.RENEW", "k", "me", 3000), TIMING, POLICY, 1.5, 1000.0, lambda b, r: seen.append(r), now=s.now
            )
        )
        is LossReason.REVOKED
    )
    assert seen == [LossReason.REVOKED]


def test_release_with_a_sweep_unlocks_until_nothing_is_left() -> None:
    left = [3]

    def respond(s: Script, c: Call) -> Any:
        left[0] -= 1
        return 1 if left[0] >= 0 else 0

    s = Script(respond)
    kind = protocol.lock_kind("k", "me", "write", 3000, True)
    assert s.run(protocol.release(kind, True, POLICY, 1.5, now=s.now)) == 3 and len(s.calls) == 4
    s2 = Script(lambda s, c: 1)
    assert s2.run(protocol.release(kind, False, POLICY, 1.5, now=s2.now)) == 1 and len(s2.calls) == 1


MULTI = protocol.multi_lock_kind(["a", "b"], "me", "read", 3000, 9000)


def test_a_multi_key_grant_whose_reply_was_lost_is_given_back_and_asked_for_again() -> None:
    mlocks: List[Call] = []

    def respond(s: Script, c: Call) -> Any:
        if c.args[0] == "RWLOCK.MLOCK":
            mlocks.append(c)
            return reset(s, c) if len(mlocks) == 1 else [7, 8]
        assert c.args[0] == "RWLOCK.MUNLOCK"
        return 2  # it had been granted

    s = Script(respond)
    acq = Acquisition(MULTI, TIMING, POLICY, 1.5, 5.0, now=s.now)
    g = s.run(acq.run())
    assert g.tokens == (7, 8) and g.token == 7 and g.sweep and not acq.armed
    assert s.names() == ["RWLOCK.MLOCK", "RWLOCK.MUNLOCK", "RWLOCK.MLOCK"]
    assert mlocks[0].args[:8] == ("RWLOCK.MLOCK", 2, "a", "b", "me", 3000, "READ", "MAXHOLD")
    assert s.calls[1].args == ("RWLOCK.MUNLOCK", 2, "a", "b", "me")
    assert all(c.key == "a" for c in s.calls), "routed by the first key, not by numkeys"
    # Out of time: given back once more, then Unavailable with nothing armed.
    s = Script(lambda s, c: lost_reply(s, c) if c.args[0] == "RWLOCK.MLOCK" else 0)
    acq = Acquisition(MULTI, TIMING, POLICY, 1.5, 0.5, now=s.now)
    with pytest.raises(Unavailable):
        s.run(acq.run())
    assert s.names() == ["RWLOCK.MLOCK", "RWLOCK.MUNLOCK"] and not acq.armed


def test_a_late_multi_key_grant_found_partly_gone_is_given_back_before_asking_again() -> None:
    def respond(s: Script, c: Call) -> Any:
        if c.args[0] == "RWLOCK.MLOCK":
            s.t += 2.0  # granted after two thirds of the ttl in the queue
            return [3, 4] if s.names().count("RWLOCK.MLOCK") == 1 else [5, 6]
        if c.args[0] == "RWLOCK.MRENEW":  # the first renews one key of two: the other is gone
            return 1 if s.names().count("RWLOCK.MRENEW") == 1 else 2
        return 1  # the MUNLOCK gives the one left back

    s = Script(respond)
    g = s.run(Acquisition(MULTI, TIMING, POLICY, 1.5, 10.0, now=s.now).run())
    assert s.names() == ["RWLOCK.MLOCK", "RWLOCK.MRENEW", "RWLOCK.MUNLOCK", "RWLOCK.MLOCK", "RWLOCK.MRENEW"]
    assert g.tokens == (5, 6) and not g.sweep


def test_a_multi_key_renewal_that_renews_fewer_keys_is_a_loss_and_the_last_one_is_capped() -> None:
    seen: List[Any] = []
    s = Script(lambda s, c: 2 if len(s.calls) == 1 else 1)
    dog = protocol.watchdog(
        MULTI.renew, TIMING, POLICY, 1.5, 1000.0, lambda b, r: seen.append(r), now=s.now, route="a", expect=2
    )
    assert s.run(dog) is LossReason.REVOKED and seen == [None, LossReason.REVOKED]
    assert [c.key for c in s.calls] == ["a", "a"]
    # At the cap: one more renewal, shorter, still every key's (MRENEW, its ttl last).
    answers = iter([Failed(rx.ResponseError("MAXHOLD 2500 ms left until the cap")), 2])
    s = Script(lambda s, c: next(answers))
    seen = []
    dog = protocol.watchdog(
        MULTI.renew, TIMING, POLICY, 1.5, 1000.0, lambda b, r: seen.append((b, r)), now=s.now, route="a", expect=2
    )
    assert s.run(dog) is LossReason.MAX_HOLD
    assert s.calls[1].args[:5] == MULTI.renew[:5] and 2400 < s.calls[1].args[5] < 2500, s.calls[1].args
    assert 1003.4 < s.t < 1003.5, "lost just before the cap (2.5 s after 1001)"
    # The last bound comes with its reason, so a clock check past it says MAX_HOLD too.
    assert seen[0][1] is LossReason.MAX_HOLD and s.t < seen[0][0] < 1003.5 and seen[1] == (None, LossReason.MAX_HOLD)


def test_a_multi_key_release_counts_only_when_every_key_was_held() -> None:
    for answers, sweep, released, calls in (([2], False, 1, 1), ([1], False, 0, 1), ([2, 1, 0], True, 1, 3)):
        it = iter(answers)
        s = Script(lambda s, c, it=it: next(it))
        assert s.run(protocol.release(MULTI, sweep, POLICY, 1.5, now=s.now)) == released
        assert len(s.calls) == calls and s.calls[0].key == "a"


def test_exec_retries_only_where_the_command_certainly_did_not_run() -> None:
    replies_ = iter([Failed(rx.BusyLoadingError("loading")), Failed(rx.ConnectionError("refused"), sent=False), b"OK"])
    s = Script(lambda s, c: next(replies_))
    assert s.run(protocol.fenced_exec("k", 7, ("SET", "d", "v"), 1010.0, POLICY, 1.5, now=s.now)) == b"OK"
    assert s.calls[0].args == ("LEASE.EXEC", "k", 7, "SET", "d", "v") and len(s.calls) == 3
    s = Script(lost_reply)
    with pytest.raises(Unavailable):
        s.run(protocol.fenced_exec("k", 7, ("INCR", "n"), 1010.0, POLICY, 1.5, now=s.now))
    assert len(s.calls) == 1, "a write whose reply was lost is not sent again"
    s = Script(lambda s, c: Failed(rx.ResponseError("FENCED the hold is not live")))
    with pytest.raises(Fenced):
        s.run(protocol.fenced_exec("k", 7, ("INCR", "n"), 1010.0, POLICY, 1.5, now=s.now))


@pytest.mark.parametrize(
    "reply, cls",
    [
        ("LIMIT this semaphore's limit is 3; a request must name the same limit", "LimitMismatch"),
        ("this semaphore's limit is 3; a request must name the same limit", "LimitMismatch"),
        ("PERMITS this owner holds 1 permits of this semaphore; release them first", "PermitsMismatch"),
        (
            "this owner holds 1 permits of this semaphore; release them before asking for another number",
            "PermitsMismatch",
        ),
        ("unknown command 'RWLOCK.WLOCK', with args beginning with: 'k'", "ModuleNotLoaded"),
        (
            "ttl must be an integer from 1 to 60000 ms (lease.max-ttl, and lease.quarantine while it is set), got '5000000'",
            "TtlTooLong",
        ),
    ],
)
def test_reply_errors_are_typed_by_code_and_by_todays_wording(reply: str, cls: str) -> None:
    import redis_lease
    from redis_lease.errors import typed_reply_error

    args = ("SEMAPHORE.ACQUIRE", "k", "o", 3, 5000000) if "ttl" in reply else ("RWLOCK.WLOCK", "k", "o", 5000)
    got = typed_reply_error(rx.ResponseError(reply), "127.0.0.1:6379", args)
    assert type(got) is getattr(redis_lease, cls), got
    if cls == "TtlTooLong":
        assert got.max_ms == 60000 and got.ttl_ms == 5000000  # type: ignore[attr-defined]
    assert typed_reply_error(rx.ResponseError("WRONGTYPE x"), "h:1", args).__class__ is rx.ResponseError


def test_a_multi_key_requests_ttl_is_read_after_its_keys() -> None:
    from redis_lease import TtlTooLong
    from redis_lease.errors import typed_reply_error

    reply = rx.ResponseError("ttl must be an integer from 1 to 60000 ms (lease.max-ttl), got '90000'")
    got = typed_reply_error(reply, "h:1", ("RWLOCK.MLOCK", 2, "1", "2", "owner", 90000, "READ"))
    assert isinstance(got, TtlTooLong) and got.ttl_ms == 90000 and got.max_ms == 60000


def test_a_clock_check_past_the_bound_at_the_cap_reports_max_hold() -> None:
    import time

    from redis_lease.guards import LeaseState

    st = LeaseState(time.monotonic() + 60.0, "k", 1)
    st.publish(time.monotonic() - 0.001, LossReason.MAX_HOLD)  # the watchdog's last bound
    assert not st.lost.is_set()
    st.expire_if_due()  # before the watchdog's own report
    assert st.lost.is_set() and st.reason is LossReason.MAX_HOLD


# -- Sentinel master switches --------------------------------------------------------------


def test_a_switch_master_push_names_the_old_and_new_master_of_its_service_only() -> None:
    push = [b"message", b"+switch-master", b"mymaster 10.0.0.1 6379 10.0.0.2 6380"]
    assert master_switch("mymaster", push) == (("10.0.0.1", 6379), ("10.0.0.2", 6380))
    assert master_switch("other", push) is None
    assert master_switch("mymaster", push, force_ip="1.2.3.4") == (("1.2.3.4", 6379), ("1.2.3.4", 6380))
    assert master_switch("mymaster", [b"subscribe", b"+switch-master", 1]) is None
    assert master_switch("mymaster", [b"message", b"+switch-master", b"mymaster 10.0.0.1 x 10.0.0.2 6380"]) is None


def test_a_master_switch_voids_replies_on_older_connections_and_refuses_the_old_master() -> None:
    """No server: the connector's bookkeeping after Sentinel's ``+switch-master``."""
    c = Connector(redis.Redis(host="10.0.0.1", port=6379))
    before = c._take(None)  # made before the switch (never connected)
    c._put(None, c._take(None))
    assert len(c._idle[None]) == 1
    wake = threading.Event()
    c._wakes.add(wake)
    c._switched(("10.0.0.1", 6379), ("10.0.0.2", 6380))
    assert c._idle == {}, "idle connections are closed"
    assert wake.is_set(), "watchdogs renew at once"
    stale = c._stale(before)
    assert isinstance(stale, Failed) and stale.sent, "its reply does not count: retried, as a lost reply"
    assert c._stale(c._take(None)) is None, "a connection made after the switch counts"
    old, new = c._take(None), c._take(None)
    old.host, old.port, new.host, new.port = "10.0.0.1", 6379, "10.0.0.2", 6380
    assert isinstance(c._refusal(old), rx.ConnectionError), "a sentinel that lags behind names the old one"
    assert c._refusal(new) is None
    epoch = c._epoch
    c._switched(("10.0.0.1", 6379), ("10.0.0.2", 6380))  # the same failover, from another sentinel
    assert c._epoch == epoch, "announced once per sentinel: counted once"
    c._switched(("10.0.0.2", 6380), ("10.0.0.1", 6379))  # and back
    assert c._refusal(old) is None and isinstance(c._refusal(new), rx.ConnectionError)
    c._demoted[("10.0.0.2", 6380)] = time.monotonic() - 1
    assert c._refusal(new) is None, "refused for a while only"


def test_the_watchdog_waits_for_its_next_renewal_in_a_sleep_a_master_switch_may_end() -> None:
    dog = protocol.watchdog(
        ("RWLOCK.RENEW", "k", "o", 3000), TIMING, POLICY, 1.0, 1000.0, lambda b, r: None, now=lambda: 1000.0
    )
    assert next(dog) == Sleep(TIMING.renew_every, early=True)


def test_the_drivers_end_an_early_sleep_when_woken_and_only_then() -> None:
    def machine() -> protocol.Machine[str]:
        yield Sleep(30.0, early=True)
        yield Sleep(0.01)
        return "renewed"

    c = Connector(redis.Redis(host="10.0.0.1", port=6379))
    wake = threading.Event()
    threading.Timer(0.2, wake.set).start()
    t = time.monotonic()
    assert c.run(machine(), stop=threading.Event(), wake=wake) == "renewed"
    assert time.monotonic() - t < 10, "woken, not after 30 s"
    assert not wake.is_set(), "cleared for the next sleep"

    async def main() -> str:
        ac = AsyncConnector(aredis.Redis(host="10.0.0.1", port=6379))
        awake = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, awake.set)
        return await asyncio.wait_for(ac.run(machine(), stop=asyncio.Event(), wake=awake), 10)

    assert asyncio.run(main()) == "renewed"

"""Leader election and observation (sync) against a real redis-server with the module; names
follow client/tests/leader.rs."""

from __future__ import annotations

import threading
import time
from typing import List

import pytest
import redis
from redis_lease import LeaderElector, LeaderObserver, Leadership, LossReason, NotAcquired, RetryPolicy
from servers import Server

FAST = RetryPolicy(base_delay=0.01, max_delay=0.2, budget=15.0)


def elector(r: "redis.Redis[bytes]", key: str, candidate: str, ttl: float = 1.0) -> LeaderElector:
    return LeaderElector(r, key, ttl=ttl, candidate=candidate, retry=FAST)


def calls(r: "redis.Redis[bytes]", command: str) -> int:
    stats = r.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def test_one_leader_then_handover_on_resign(r: "redis.Redis[bytes]") -> None:
    ea, eb = elector(r, "election:a", "a"), elector(r, "election:a", "b")
    a = ea.leadership(timeout=5.0)
    got: List[Leadership] = []
    t = threading.Thread(target=lambda: got.append(eb.leadership(timeout=10.0)))
    t.start()
    # b waits while a renews, through several ttls.
    time.sleep(2.5)
    assert a.held and not got
    cur = ea.current()
    assert cur is not None and (cur.candidate, cur.term) == ("a", a.term)
    start = time.monotonic()
    assert a.resign()
    t.join(5)
    b = got[0]
    assert time.monotonic() - start < 1.0, "handover at once"
    assert b.term > a.term and b.candidate == "b"
    again = eb.try_lead()
    assert again is not None and again.term == b.term, "the leader campaigning again keeps its term"
    again.abandon()  # one lease, two guards: only one may resign it
    assert b.resign()
    assert ea.current() is None
    with elector(r, "election:a", "c").leadership(timeout=0.2) as c:
        assert c.held, "nobody leads: c wins at once"
    with ea.leadership(timeout=0.0):
        t0 = time.monotonic()
        with pytest.raises(NotAcquired):
            eb.leadership(timeout=0.3)  # a leads: b times out
        assert time.monotonic() - t0 >= 0.28


def test_observer_sees_every_change_without_polling(r: "redis.Redis[bytes]") -> None:
    key = "election:obs"
    with LeaderObserver(r, key) as obs:
        assert obs.current is None
        a = elector(r, key, "a").leadership(timeout=5.0)
        seen = obs.next_change(5.0)
        assert seen is not None and seen.candidate == "a"

        got: List[Leadership] = []
        t = threading.Thread(target=lambda: got.append(elector(r, key, "b").leadership(timeout=10.0)))
        t.start()
        time.sleep(0.2)
        a.resign()
        seen_b = obs.next_change(5.0)
        assert seen_b is not None and seen_b.candidate == "b" and seen_b.term > seen.term
        t.join(5)
        b = got[0]

        # Quiet: the observer asks nothing of the server while nothing changes (renewals send
        # no event). The hand-over sent two events (resign, elect): let the second read land.
        time.sleep(0.5)
        before = calls(r, "leader.current")
        time.sleep(1.5)
        assert calls(r, "leader.current") == before, "no polling"
        assert obs.current == seen_b

        # The leader's lease lapses (it stops renewing without resigning): seen too.
        start = time.monotonic()
        b.abandon()
        gone = obs.next_change(5.0)
        assert gone is None, gone
        assert time.monotonic() - start < 2.5
        with pytest.raises(TimeoutError):
            obs.next_change(0.2)


def test_leader_steps_down_when_the_server_stops_answering(server: Server, r: "redis.Redis[bytes]") -> None:
    e = elector(r, "election:pause", "a")
    lead = e.leadership(timeout=5.0)

    def sleep() -> None:
        try:
            server.client().execute_command("DEBUG", "SLEEP", 2)
        except redis.RedisError:
            pass

    s = threading.Thread(target=sleep)
    start = time.monotonic()
    s.start()
    assert lead.wait_lost(5.0), "stepped down"
    assert time.monotonic() - start <= 1.3, time.monotonic() - start
    assert lead.lost.is_set() and lead.reason is LossReason.EXPIRED and not lead.held
    s.join(10)
    # Once the server answers again, a campaigns and wins again.
    again = e.leadership(timeout=10.0)
    assert again.held and again.term > lead.term
    # The lost leadership of the same candidate id does not resign its successor.
    assert lead.release() is False
    cur = e.current()
    assert again.held and cur is not None and cur.term == again.term
    assert again.resign()


def test_leaderships_of_one_elector_exclude_each_other(r: "redis.Redis[bytes]") -> None:
    e = LeaderElector(r, "election:ids", ttl=2.0, retry=FAST)  # a fresh candidate id per campaign
    first = e.try_lead()
    assert first is not None
    assert e.try_lead() is None, "a second campaign of the same elector is another candidate"
    cur = e.current()
    assert cur is not None and cur.candidate == first.candidate
    assert first.resign()

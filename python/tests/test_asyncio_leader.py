"""Leader election and observation on redis.asyncio; the same rules (and names) as
test_leader.py and client/tests/leader.rs."""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

import pytest
import redis.asyncio as aredis
from redis_lease.asyncio import Connector, LeaderElector, LeaderObserver, LossReason, NotAcquired, RetryPolicy
from servers import Server

FAST = RetryPolicy(base_delay=0.01, max_delay=0.2, budget=15.0)


@pytest.fixture
async def ar(server: Server) -> AsyncIterator["aredis.Redis[bytes]"]:
    c = aredis.Redis(host="127.0.0.1", port=server.port, socket_timeout=10)
    try:
        yield c
    finally:
        await Connector.of(c).close()  # this package's idle connections, before the loop ends
        await c.aclose() if hasattr(c, "aclose") else await c.close()


def elector(ar: "aredis.Redis[bytes]", key: str, candidate: str, ttl: float = 1.0) -> LeaderElector:
    return LeaderElector(ar, key, ttl=ttl, candidate=candidate, retry=FAST)


async def test_one_leader_then_handover_on_resign(ar: "aredis.Redis[bytes]") -> None:
    ea, eb = elector(ar, "election:a", "a"), elector(ar, "election:a", "b")
    a = await ea.leadership(timeout=5.0)
    b_task = asyncio.ensure_future(eb.leadership(timeout=10.0))
    await asyncio.sleep(2.5)  # b waits while a renews, through several ttls
    assert a.held and not b_task.done()
    cur = await ea.current()
    assert cur is not None and (cur.candidate, cur.term) == ("a", a.term)
    start = time.monotonic()
    assert await a.resign()
    b = await asyncio.wait_for(b_task, 5)
    assert time.monotonic() - start < 1.0, "handover at once"
    assert b.term > a.term
    with pytest.raises(NotAcquired):
        await ea.leadership(timeout=0.5)  # b leads
    assert await b.resign()
    assert await ea.current() is None


async def test_observer_sees_every_change_without_polling(ar: "aredis.Redis[bytes]") -> None:
    key = "election:obs"
    async with await LeaderObserver.start(ar, key) as obs:
        assert obs.current is None
        a = await elector(ar, key, "a").leadership(timeout=5.0)
        seen = await obs.next_change(5.0)
        assert seen is not None and seen.candidate == "a"
        b_task = asyncio.ensure_future(elector(ar, key, "b").leadership(timeout=10.0))
        await asyncio.sleep(0.2)
        await a.resign()
        seen_b = await obs.next_change(5.0)
        assert seen_b is not None and seen_b.candidate == "b" and seen_b.term > seen.term
        b = await asyncio.wait_for(b_task, 5)
        await asyncio.sleep(0.5)  # the hand-over sent two events: let the second read land
        before = int((await ar.info("commandstats"))["cmdstat_leader.current"]["calls"])
        await asyncio.sleep(1.5)
        after = int((await ar.info("commandstats"))["cmdstat_leader.current"]["calls"])
        assert after == before, "no polling"
        start = time.monotonic()
        b.abandon()  # the leader stops renewing without resigning: its lease lapses
        assert await obs.next_change(5.0) is None
        assert time.monotonic() - start < 2.5
        with pytest.raises(TimeoutError):
            await obs.next_change(0.2)


async def test_leader_steps_down_when_the_server_stops_answering(server: Server, ar: "aredis.Redis[bytes]") -> None:
    e = elector(ar, "election:pause", "a")
    lead = await e.leadership(timeout=5.0)
    start = time.monotonic()
    server.freeze()
    try:
        assert await lead.wait_lost(5.0), "stepped down"
        took = time.monotonic() - start
    finally:
        await asyncio.sleep(0.5)
        server.thaw()
    assert took <= 1.3, took
    assert lead.lost.is_set() and lead.reason is LossReason.EXPIRED
    again = await e.leadership(timeout=10.0)
    assert again.held and again.term > lead.term
    assert await lead.release() is False, "the lost leadership does not resign its successor"
    cur = await e.current()
    assert again.held and cur is not None and cur.term == again.term
    assert await again.resign()
    with pytest.raises(NotAcquired):
        async with elector(ar, "election:pause", "x").leadership(timeout=0.0):
            async with elector(ar, "election:pause", "y").leadership(timeout=0.2):
                pass  # pragma: no cover

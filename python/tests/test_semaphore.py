"""Semaphore (SEMAPHORE.*, COMMANDS.md) against a real redis-server with the module."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import List, Optional

import pytest
import redis
import redis.asyncio as aredis
from redis_lease import LimitMismatch, LossReason, NotAcquired, RetryPolicy, Semaphore, SemaphoreGuard
from redis_lease import asyncio as alease
from servers import Server

FAST = RetryPolicy(base_delay=0.01, max_delay=0.2, budget=15.0)


def sem(r: "redis.Redis[bytes]", key: str, limit: int, ttl: float = 5.0, **kw: object) -> Semaphore:
    return Semaphore(r, key, limit=limit, ttl=ttl, retry=FAST, **kw)  # type: ignore[arg-type]


def test_semaphore_admits_at_most_limit_holders(r: "redis.Redis[bytes]") -> None:
    s = sem(r, "sem:limit", 3)
    inside = 0
    most = 0
    tokens: List[int] = []
    guard = threading.Lock()
    errors: List[BaseException] = []

    def work() -> None:
        nonlocal inside, most
        try:
            for _ in range(5):
                with s.acquire(timeout=30.0) as g:
                    with guard:
                        inside += 1
                        most = max(most, inside)
                        tokens.append(g.token)
                    time.sleep(0.01)
                    with guard:
                        inside -= 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert most == 3, f"at most (and, under contention, exactly) the limit: {most}"
    assert len(set(tokens)) == len(tokens) == 40, "every grant has its own token"
    assert r.exists("sem:limit") == 0, "nothing is left behind"


def test_info_reports_limit_used_holders_and_waiters(r: "redis.Redis[bytes]") -> None:
    s = sem(r, "sem:info", 5)
    g = s.acquire(permits=3)
    info = s.info()
    assert (info.limit, info.used, info.waiters) == (5, 3, 0)
    h = info.hold_of(g.owner)
    assert h is not None and (h.permits, h.token) == (3, g.token) and 0 < h.ttl <= 5.0
    assert info.token >= g.token
    assert g.release() and not g.release()
    assert r.exists("sem:info") == 0


def test_a_large_request_at_the_head_is_not_overtaken(r: "redis.Redis[bytes]") -> None:
    """Fair: the head waiter needs more permits than are free; a smaller request behind it
    does not overtake it, so large requests never starve."""
    s = sem(r, "sem:fair", 3)
    held = s.acquire(permits=2)
    out: List[SemaphoreGuard] = []
    big = threading.Thread(target=lambda: out.append(s.acquire(permits=2, timeout=10.0)))
    big.start()
    time.sleep(0.2)
    assert s.info().waiters == 1
    assert s.try_acquire(1) is None, "one permit is free, but the waiter before us needs two"
    assert held.release()
    big.join(10)
    assert out and out[0].permits == 2
    assert out[0].release()


def test_try_and_timeout_give_none_when_full(r: "redis.Redis[bytes]") -> None:
    s = sem(r, "sem:full", 1)
    with s.acquire():
        assert s.try_acquire() is None
        t = time.monotonic()
        with pytest.raises(NotAcquired):
            s.acquire(timeout=0.3)
        assert 0.28 <= time.monotonic() - t < 3.0
    assert s.try_acquire() is not None


def test_watchdog_keeps_permits_and_deleting_the_key_revokes_them(r: "redis.Redis[bytes]") -> None:
    s = sem(r, "sem:renew", 1, ttl=0.6)
    g = s.acquire()
    time.sleep(2.0)
    assert g.held and s.try_acquire() is None
    r.delete("sem:renew")
    assert g.wait_lost(3.0)
    assert g.reason is LossReason.REVOKED


def test_another_limit_on_a_live_key_is_an_error(r: "redis.Redis[bytes]") -> None:
    with sem(r, "sem:other", 3).acquire():
        with pytest.raises(LimitMismatch):
            sem(r, "sem:other", 4).try_acquire()
    with pytest.raises(ValueError):
        sem(r, "sem:other", 3).try_acquire(permits=4)
    with pytest.raises(ValueError):
        sem(r, "sem:other", 0)


def test_a_grant_whose_reply_was_lost_is_adopted_not_duplicated(server: Server, r: "redis.Redis[bytes]") -> None:
    s = Semaphore(r, "sem:lost-reply", limit=1, ttl=8.0, retry=FAST, command_timeout=1.5)
    assert r.execute_command("SEMAPHORE.ACQUIRE", "sem:lost-reply", "h", 1, 10000)
    out: List[Optional[SemaphoreGuard]] = []
    c = threading.Thread(target=lambda: out.append(s._acquire(1, 0.6)))
    c.start()
    time.sleep(0.3)
    p = r.pipeline(transaction=False)
    p.execute_command("SEMAPHORE.RELEASE", "sem:lost-reply", "h")
    p.execute_command("DEBUG", "SLEEP", 3)
    assert p.execute()[0] == 1
    c.join(20)
    g = out[0]
    assert g is not None, "adopted, not an error"
    info = s.info()
    assert [(h.owner, h.token) for h in info.holders] == [(g.owner, g.token)], info
    assert g.release()
    assert r.exists("sem:lost-reply") == 0


async def test_asyncio_semaphore_admits_at_most_limit_holders(server: Server) -> None:
    ar = aredis.Redis(host="127.0.0.1", port=server.port)
    s = alease.Semaphore(ar, "sem:async", limit=2, ttl=5.0, retry=FAST)
    inside = most = 0

    async def work() -> None:
        nonlocal inside, most
        for _ in range(4):
            async with s.acquire(timeout=30.0):
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0.01)
                inside -= 1

    await asyncio.wait_for(asyncio.gather(*(work() for _ in range(5))), 60)
    assert most == 2
    assert await ar.exists("sem:async") == 0
    await alease.Connector.of(ar).close()
    await ar.aclose() if hasattr(ar, "aclose") else await ar.close()

"""MultiLock on redis.asyncio against a real server: the same rules as test_multi.py."""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, List

import pytest
import redis.asyncio as aredis
from redis_lease.asyncio import (
    Connector,
    LeaseLost,
    LossReason,
    MaxHold,
    MultiGuard,
    MultiLock,
    NotAcquired,
    RetryPolicy,
    RwLock,
)
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


async def test_transfers_between_tasks_lose_no_update(ar: "aredis.Redis[bytes]") -> None:
    accounts = 4
    for a in range(accounts):
        await ar.set(f"apy:bal:{a}", 100)
    tokens: List[int] = []

    async def worker(w: int) -> None:
        for i in range(10):
            a, b = (w + i) % accounts, (w * 3 + i + 1) % accounts
            if a == b:
                continue
            async with MultiLock(ar, [f"apy:acct:{a}", f"apy:acct:{b}"], ttl=5.0, retry=FAST).write(timeout=30) as g:
                assert isinstance(g, MultiGuard) and len(g.tokens) == 2 and g.held
                x, y = int(await ar.get(f"apy:bal:{a}") or 0), int(await ar.get(f"apy:bal:{b}") or 0)
                await asyncio.sleep(0.001)
                await ar.set(f"apy:bal:{a}", x - 1)
                await ar.set(f"apy:bal:{b}", y + 1)
                tokens.extend(g.tokens)

    await asyncio.wait_for(asyncio.gather(*(worker(w) for w in range(5))), 60)
    assert sum([int(await ar.get(f"apy:bal:{a}") or 0) for a in range(accounts)]) == 100 * accounts
    assert len(set(tokens)) == len(tokens), "a new token per grant"
    assert await ar.exists(*[f"apy:acct:{a}" for a in range(accounts)]) == 0, "every hold released"


async def test_a_timeout_answers_none_or_not_acquired_and_a_cancelled_wait_leaves_nothing(
    ar: "aredis.Redis[bytes]",
) -> None:
    keys = ["apy:busy:1", "apy:busy:2"]
    lock = MultiLock(ar, keys, ttl=5.0, retry=FAST)
    held = await RwLock(ar, keys[1], ttl=5.0, retry=FAST).write()  # one key taken is enough
    assert await lock.try_read() is None
    t = time.monotonic()
    assert await lock.acquire("write", timeout=0.3) is None
    with pytest.raises(NotAcquired):
        await lock.write(timeout=0.3)
    assert 0.55 <= time.monotonic() - t < 5.0
    waiter = asyncio.ensure_future(lock.write(timeout=30))
    await asyncio.sleep(0.3)
    assert not waiter.done()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await held.release()
    deadline = time.monotonic() + 10
    while await ar.exists(*keys) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert await ar.exists(*keys) == 0, "the cancelled wait left nothing held"
    async with lock.read(timeout=1.0) as g:
        assert g.mode == "read" and g.owner != held.owner


async def test_a_hold_at_its_cap_is_lost_with_max_hold(ar: "aredis.Redis[bytes]") -> None:
    t0 = time.monotonic()
    g = await MultiLock(ar, ["apy:m1", "apy:m2"], ttl=0.6, max_hold=1.2, retry=FAST).write(timeout=0)
    assert await g.wait_lost(5)
    took = time.monotonic() - t0
    assert g.reason is LossReason.MAX_HOLD
    assert 1.05 < took < 2.5, took
    await g.release()
    with pytest.raises(MaxHold):
        MultiLock(ar, ["apy:m3"], ttl=2.0, max_hold=1.0)


async def test_leaving_async_with_after_a_loss_raises(ar: "aredis.Redis[bytes]") -> None:
    keys = ["apy:gone:1", "apy:gone:2"]
    with pytest.raises(LeaseLost, match="lost during the async with block"):
        async with MultiLock(ar, keys, ttl=0.6, retry=FAST).write(timeout=5) as g:
            await ar.delete(keys[1])
            assert await g.wait_lost(5)
            assert g.reason is LossReason.REVOKED
    assert await ar.exists(*keys) == 0

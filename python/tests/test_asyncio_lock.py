"""RwLock on redis.asyncio against a real redis-server with the module; the same rules (and
names) as test_lock.py and client/tests/lock.rs."""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, List, Optional

import pytest
import redis.asyncio as aredis
from redis_lease import LossReason
from redis_lease.asyncio import Connector, Deadlock, LeaseLost, LockGone, LockGuard, NotAcquired, RetryPolicy, RwLock
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


async def test_write_lock_excludes_many_tasks(ar: "aredis.Redis[bytes]") -> None:
    lk = RwLock(ar, "lock:counter", ttl=5.0, retry=FAST)
    await ar.delete("counter")
    tokens: List[int] = []

    async def work() -> None:
        for _ in range(12):
            async with lk.write() as g:
                v = int(await ar.get("counter") or 0)
                await asyncio.sleep(0.002)
                await ar.set("counter", v + 1)
                tokens.append(g.token)

    await asyncio.wait_for(asyncio.gather(*(work() for _ in range(8))), 60)
    assert int(await ar.get("counter") or 0) == 96, "read-modify-write under the lock is exact"
    assert all(a < b for a, b in zip(tokens, tokens[1:])), tokens
    assert await ar.exists("lock:counter") == 0


async def test_readers_share_and_writer_waits_for_them(ar: "aredis.Redis[bytes]") -> None:
    lk = RwLock(ar, "lock:rw", ttl=5.0, retry=FAST)
    r1, r2 = await lk.try_read(), await lk.try_read()
    assert r1 is not None and r2 is not None
    assert await lk.try_write() is None
    t = time.monotonic()
    writer = asyncio.ensure_future(lk.write(timeout=10.0))
    await asyncio.sleep(0.3)
    assert (await lk.info()).waiters == 1, "the writer waits in the server"
    assert await lk.try_read() is None, "a new reader does not overtake a waiting writer"
    await r1.release()
    await r2.release()
    g = await asyncio.wait_for(writer, 10)
    assert time.monotonic() - t >= 0.25 and g.mode == "write"
    assert await g.release()


async def test_try_and_timeout_give_none_when_busy(ar: "aredis.Redis[bytes]") -> None:
    lk = RwLock(ar, "lock:busy", ttl=5.0, retry=FAST)
    g = await lk.write()
    assert await lk.try_read() is None
    t = time.monotonic()
    with pytest.raises(NotAcquired):
        await lk.write(timeout=0.3)
    assert 0.28 <= time.monotonic() - t < 3.0
    await g.release()
    async with lk.write(timeout=1.0):
        pass


async def test_dropped_guard_is_released(ar: "aredis.Redis[bytes]") -> None:
    lk = RwLock(ar, "lock:drop", ttl=30.0, retry=FAST)
    g: Optional[LockGuard] = await lk.write()
    del g
    other = await lk.write(timeout=5.0)  # long before the 30 s ttl
    await other.release()


async def test_a_guard_released_twice_is_harmless(ar: "aredis.Redis[bytes]") -> None:
    lk = RwLock(ar, "lock:twice", ttl=5.0, retry=FAST)
    async with lk.write() as g:
        assert await g.release() is True
        assert await g.release() is False
    assert g.reason is LossReason.RELEASED
    with pytest.raises(LeaseLost):
        g.check()


async def test_watchdog_keeps_a_long_critical_section_alive(ar: "aredis.Redis[bytes]") -> None:
    lk = RwLock(ar, "lock:long", ttl=0.6, retry=FAST)
    async with lk.write() as g:
        first = g.valid_until
        assert first is not None
        start = time.monotonic()
        while time.monotonic() - start < 2.5:
            g.check()
            assert await lk.try_write() is None
            await asyncio.sleep(0.15)
        assert (g.valid_until or 0) > first + 1.5
        assert [(h.owner, h.token) for h in (await lk.info()).holders] == [(g.owner, g.token)]


async def test_lease_loss_is_signalled_before_anyone_else_is_granted_when_the_server_is_frozen(
    server: Server, ar: "aredis.Redis[bytes]"
) -> None:
    ttl = 1.0
    lk = RwLock(ar, "lock:frozen", ttl=ttl, retry=FAST)
    g = await lk.write()
    acquired = time.monotonic()

    async def contender() -> "tuple[Optional[LockGuard], float]":
        got = await lk.acquire("write", timeout=20.0)
        return got, time.monotonic()

    c = asyncio.ensure_future(contender())
    await asyncio.sleep(0.1)
    server.freeze()
    try:
        await asyncio.wait_for(g.lost.wait(), 10)
        lost_at = time.monotonic()
        await asyncio.sleep(max(0.0, 2.5 - (time.monotonic() - acquired)))
    finally:
        server.thaw()
    assert g.reason is LossReason.EXPIRED
    assert lost_at - acquired <= ttl + 0.3, lost_at - acquired
    with pytest.raises(LeaseLost):
        g.check()
    granted, granted_at = await asyncio.wait_for(c, 30)
    assert granted is not None and lost_at < granted_at and granted.token > g.token
    assert await granted.release()
    assert await g.release() is False


async def test_deleting_the_key_revokes_the_lease(ar: "aredis.Redis[bytes]") -> None:
    g = await RwLock(ar, "lock:del", ttl=0.9, retry=FAST).write()
    await ar.delete("lock:del")
    assert await g.wait_lost(3.0)
    assert g.reason is LossReason.REVOKED
    assert await g.release() is False, "nothing left to release"


async def test_upgrade_conflict_is_a_deadlock_error(ar: "aredis.Redis[bytes]") -> None:
    a = RwLock(ar, "lock:up", ttl=5.0, owner="a", retry=FAST)
    b = RwLock(ar, "lock:up", ttl=5.0, owner="b", retry=FAST)
    ra, rb = await a.try_read(), await b.try_read()
    assert ra is not None and rb is not None
    up = asyncio.ensure_future(a.write(timeout=10.0))
    await asyncio.sleep(0.2)
    with pytest.raises(Deadlock):
        await b.write(timeout=5.0)
    await rb.release()
    wa = await asyncio.wait_for(up, 10)
    await wa.release()
    await ra.release()


async def test_a_grant_whose_reply_was_lost_is_adopted_not_duplicated(ar: "aredis.Redis[bytes]") -> None:
    lk = RwLock(ar, "lock:lost-reply", ttl=8.0, retry=FAST, command_timeout=1.5)
    assert await ar.execute_command("RWLOCK.WLOCK", "lock:lost-reply", "h", 10000)
    t = time.monotonic()
    contender = asyncio.ensure_future(lk.acquire("write", timeout=0.6))
    await asyncio.sleep(0.3)
    p = ar.pipeline(transaction=False)
    p.execute_command("RWLOCK.UNLOCK", "lock:lost-reply", "h")
    p.execute_command("DEBUG", "SLEEP", 3)
    released, _ = await p.execute()
    assert released == 1
    g = await asyncio.wait_for(contender, 20)
    assert g is not None, "adopted, not an error"
    assert time.monotonic() - t > 2.0, "the reply was really lost"
    info = await lk.info()
    assert [(h.owner, h.count, h.token) for h in info.holders] == [(g.owner, 1, g.token)], info
    assert await g.release()
    assert await ar.exists("lock:lost-reply") == 0


async def test_a_waiter_whose_key_is_deleted_gets_lock_gone(ar: "aredis.Redis[bytes]") -> None:
    lk = RwLock(ar, "lock:gone", ttl=5.0, retry=FAST)
    held = await lk.write()
    waiter = asyncio.ensure_future(lk.write(timeout=10.0))
    await asyncio.sleep(0.2)
    await ar.delete("lock:gone")
    with pytest.raises(LockGone):
        await asyncio.wait_for(waiter, 5)
    await held.release()


async def test_a_cancelled_wait_leaves_nothing_behind(ar: "aredis.Redis[bytes]") -> None:
    """Cancelling a task parked in the server closes its connection: the server drops the
    waiter, and nobody is granted on its behalf."""
    lk = RwLock(ar, "lock:cancel", ttl=5.0, retry=FAST)
    held = await lk.write()
    waiter = asyncio.ensure_future(lk.write(timeout=30.0))
    await asyncio.sleep(0.2)
    assert (await lk.info()).waiters == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    deadline = time.monotonic() + 3
    while (await lk.info()).waiters and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert (await lk.info()).waiters == 0
    await held.release()
    await asyncio.sleep(0.2)
    assert await ar.exists("lock:cancel") == 0, "no hold was granted to the cancelled waiter"

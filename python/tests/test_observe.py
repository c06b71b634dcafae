"""The queues of RWLOCK.INFO / SEMAPHORE.INFO and LEADER.INFO, read through the client
(sync and asyncio); names follow client/tests/observe.rs."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, List

import redis
import redis.asyncio as aioredis
import redis_lease.asyncio as aio
from redis_lease import RwLock, Semaphore, election_info, replies
from servers import Server


def park(server: Server, *args: Any) -> threading.Thread:
    """A blocking request on its own connection, left waiting until its key frees or it times out."""

    def run() -> None:
        c = server.client()
        try:
            c.execute_command(*args)
        except redis.RedisError:
            pass
        finally:
            c.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def await_waiters(r: "redis.Redis[bytes]", n: int) -> None:
    deadline = time.monotonic() + 10
    while int(r.info("lease")["lease_waiters"]) != n:
        assert time.monotonic() < deadline, f"lease_waiters never reached {n}"
        time.sleep(0.02)


def test_lock_semaphore_and_election_info_show_their_queues(server: Server, r: "redis.Redis[bytes]") -> None:
    lock = RwLock(r, "k", ttl=30.0)
    held = lock.write()
    threads: List[threading.Thread] = [park(server, "RWLOCK.RLOCK", "k", "reader", 1000, "WAIT", 0)]
    await_waiters(r, 1)
    time.sleep(0.1)
    info = lock.info()
    assert info.waiters == 1 and len(info.queue) == 1
    w = info.queue[0]
    assert (w.owner, w.mode, w.left) == ("reader", "read", None)
    assert 0.1 <= w.waited < 10
    held.release()
    threads[0].join(10)

    sem = Semaphore(r, "s", limit=2, ttl=30.0)
    g = sem.acquire(2)
    threads.append(park(server, "SEMAPHORE.ACQUIRE", "s", "x", 2, 1000, "PERMITS", 2, "WAIT", 9000))
    await_waiters(r, 1)
    si = sem.info()
    assert len(si.queue) == 1
    assert (si.queue[0].owner, si.queue[0].permits, si.queue[0].mode) == ("x", 2, "")
    left = si.queue[0].left
    assert left is not None and 0 < left <= 9.0
    g.release()

    term = int(r.execute_command("LEADER.CAMPAIGN", "e", "boss", 30000))
    threads.append(park(server, "LEADER.CAMPAIGN", "e", "next", 1000, "WAIT", 9000))
    await_waiters(r, 1)
    ei = election_info(r, "e")
    assert ei.leader is not None and (ei.leader.candidate, ei.leader.term) == ("boss", term)
    assert [q.owner for q in ei.queue] == ["next"] and ei.waiters == 1
    assert election_info(r, "nobody") == replies.ElectionInfo()
    r.execute_command("LEADER.RESIGN", "e", "boss")
    for t in threads:
        t.join(10)


def test_asyncio_election_info_and_resp3_shapes(server: Server) -> None:
    async def main() -> None:
        c = aioredis.Redis(host="127.0.0.1", port=server.port, protocol=3)
        try:
            await c.execute_command("LEADER.CAMPAIGN", "e2", "a", 30000)
            ei = await aio.election_info(c, "e2")
            assert ei.leader is not None and ei.leader.candidate == "a" and ei.queue == ()
            v = await c.execute_command("RWLOCK.INFO", "missing")
            assert replies.lock_info(v).queue == ()
        finally:
            await c.aclose()

    asyncio.run(main())


def test_queue_entries_parse_in_both_shapes() -> None:
    resp2 = [b"owner", b"a", b"mode", b"write", b"waited", 1500, b"left", -1]
    resp3 = {"candidate": "b", "waited": 2, "left": 900}
    q = replies.queue([resp2, resp3])
    assert q[0] == replies.Waiting(owner="a", mode="write", permits=0, waited=1.5, left=None)
    assert q[1].owner == "b" and q[1].left == 0.9

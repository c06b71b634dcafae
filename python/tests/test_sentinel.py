"""The client through Redis Sentinel (``Sentinel(...).master_for(...)``): a master and a
replica with the module, one sentinel; locks and elections, and a forced failover while a
guard is held and a writer waits."""

from __future__ import annotations

import threading
import time
from typing import Iterator, List, Optional, Tuple

import pytest
import redis.sentinel
from redis_lease import LeaderElector, LockGuard, RetryPolicy, RwLock
from servers import Sentinel, Server, raw, until

FAST = RetryPolicy(base_delay=0.01, max_delay=0.2, budget=15.0)


@pytest.fixture(scope="module")
def deployment() -> Iterator[Tuple[Server, Server, Sentinel]]:
    master = Server()
    replica = Server(["--replicaof", "127.0.0.1", str(master.port)])
    sentinel: Optional[Sentinel] = None
    try:
        until(20, "the replica to sync", lambda: b"master_link_status:up" in raw(replica.port, "INFO", "replication"))  # type: ignore[operator]
        sentinel = Sentinel(master.port)
        until(20, "the sentinel to find the replica", lambda: sentinel is not None and sentinel.replicas_known() == 1)
        yield master, replica, sentinel
    finally:
        if sentinel is not None:
            sentinel.stop()
        replica.stop()
        master.stop()


def master_for(sentinel: Sentinel) -> "redis.Redis[bytes]":
    return redis.sentinel.Sentinel([("127.0.0.1", sentinel.port)], socket_timeout=5).master_for(
        "mymaster", socket_timeout=5
    )


def test_locks_and_elections_work_through_a_sentinel_master(deployment: Tuple[Server, Server, Sentinel]) -> None:
    _, _, sentinel = deployment
    m = master_for(sentinel)
    lk = RwLock(m, "sentinel:lock", ttl=2.0, retry=FAST)
    with lk.write(timeout=5.0) as g:
        assert lk.try_read() is None
        assert lk.info().holders[0].token == g.token
    with LeaderElector(m, "sentinel:leader", ttl=2.0, retry=FAST).leadership(timeout=5.0) as lead:
        assert lead.held and lead.term > 0


def test_the_client_carries_on_through_a_sentinel_failover(deployment: Tuple[Server, Server, Sentinel]) -> None:
    master, replica, sentinel = deployment
    m = master_for(sentinel)
    lk = RwLock(m, "sentinel:failover", ttl=3.0, retry=FAST)
    guard = lk.write()
    out: List[Optional[LockGuard]] = []
    waiter = threading.Thread(target=lambda: out.append(lk.acquire("write", timeout=30.0)))
    waiter.start()
    time.sleep(0.3)
    assert raw(master.port, "WAIT", 1, 5000) == 1, "the replica has every write"
    raw(sentinel.port, "SENTINEL", "FAILOVER", "mymaster")
    until(30, "the sentinel to promote the replica", lambda: sentinel.master_port() == replica.port, 0.1)
    # Two lease lengths later the guard still holds: its renewals found the new master.
    time.sleep(6.0)
    assert guard.held, guard.reason
    assert b"role:master" in raw(replica.port, "INFO", "replication")  # type: ignore[operator]
    assert guard.release()
    waiter.join(30)
    nxt = out[0]
    assert nxt is not None and nxt.token > guard.token, "the waiter is served by the new master"
    assert nxt.release()

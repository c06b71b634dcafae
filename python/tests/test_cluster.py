"""The client on a real Redis Cluster (3 masters, 3 replicas, the module on every node); names
follow client/tests/cluster.rs. redis-py's own cluster client is checked to route the module's
commands by key, and this package's client carries on through a failover."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Iterator, List, Optional

import pytest
import redis.asyncio.cluster as acluster
from redis.cluster import ClusterNode, RedisCluster
from redis_lease import Connector, LeaderElector, LockGuard, MultiLock, RetryPolicy, RwLock
from redis_lease import asyncio as alease
from servers import Cluster, raw

FAST = RetryPolicy(base_delay=0.01, max_delay=0.2, budget=15.0)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def rc(cluster: Cluster) -> Iterator[RedisCluster]:
    c = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", n.port) for n in cluster.nodes[:3]], socket_timeout=10)
    try:
        yield c
    finally:
        c.close()


def spread_keys(cluster: Cluster, n: int) -> List[str]:
    """``n`` keys, covering every master."""
    keys = [f"spread:{i}" for i in range(n)]
    owners = {cluster.owner_of(k)["id"] for k in keys}
    assert len(owners) == 3, "the keys cover every master"
    return keys


def test_redis_py_cluster_client_routes_module_commands_by_key(cluster: Cluster, rc: RedisCluster) -> None:
    for key in spread_keys(cluster, 12):
        assert rc.execute_command("RWLOCK.WLOCK", key, "me", 5000) >= 1
        # The hold is on the master serving the key's slot, not on a random node.
        port = int(cluster.owner_of(key)["port"])  # type: ignore[call-overload]
        assert raw(port, "EXISTS", key) == 1
        assert rc.execute_command("RWLOCK.UNLOCK", key, "me") == 1
    assert rc.execute_command("LEADER.CAMPAIGN", "route:l", "c", 5000) >= 1
    assert rc.execute_command("LEADER.RESIGN", "route:l", "c") == 1


def test_a_multi_key_lock_is_routed_by_its_first_key(cluster: Cluster, rc: RedisCluster) -> None:
    # Hash-tagged keys on every master; MLOCK's args[1] is numkeys, which hashes elsewhere.
    for tag in spread_keys(cluster, 12):
        keys = [f"{{{tag}}}:a", f"{{{tag}}}:b"]
        with MultiLock(rc, keys, ttl=5.0, retry=FAST).write(timeout=5.0) as g:
            port = int(cluster.owner_of(tag)["port"])  # type: ignore[call-overload]
            assert [raw(port, "EXISTS", k) for k in keys] == [1, 1]
            assert g.exec("SET", f"{{{tag}}}:data", "v") == b"OK"
    assert not Connector.of(rc)._moved, "no request went to another node first"


def test_the_client_carries_on_through_a_cluster_failover(cluster: Cluster, rc: RedisCluster) -> None:
    # Locks on keys over every master.
    guards = []
    for key in spread_keys(cluster, 30):
        g = RwLock(rc, key, ttl=5.0, retry=FAST).try_write()
        assert g is not None, "free lock"
        guards.append(g)
    for g in guards:
        assert g.release()

    key = "failover:lock"
    lk = RwLock(rc, key, ttl=3.0, retry=FAST)
    guard = lk.write()
    first = guard.token
    lead = LeaderElector(rc, "{failover:lock}:leader", ttl=3.0, retry=FAST).leadership(timeout=10.0)
    term = lead.term

    # A writer parks in the server, on the master that is about to be demoted.
    out: List[Optional[LockGuard]] = []
    waiter = threading.Thread(target=lambda: out.append(lk.acquire("write", timeout=30.0)))
    waiter.start()
    time.sleep(0.3)
    new_master = cluster.fail_over(key)
    assert cluster.owner_of(key)["id"] == new_master["id"]

    # Two lease lengths later the guard and the leader still hold: renewals reached the new
    # master.
    time.sleep(6.0)
    assert guard.held, f"the guard's lease survived the failover: {guard.reason}"
    guard.check()
    assert lead.held and lead.term == term, "still leader, same term"

    # Releasing hands the lock to the waiter, through the new master.
    assert guard.release()
    waiter.join(30)
    nxt = out[0]
    assert nxt is not None, "the waiter got the lock"
    assert nxt.token > first, "a larger token after the failover"
    assert nxt.release()
    assert lead.resign()


async def test_asyncio_locks_and_observer_work_on_a_cluster(cluster: Cluster) -> None:
    arc = acluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, socket_timeout=10)
    try:
        for key in spread_keys(cluster, 12):
            async with alease.RwLock(arc, key, ttl=2.0, retry=FAST).write(timeout=5.0) as g:
                assert g.held
        key = "obs:{cluster}"
        async with await alease.LeaderObserver.start(arc, key) as obs:
            lead = await alease.LeaderElector(arc, key, ttl=2.0, candidate="n1", retry=FAST).leadership(timeout=5.0)
            seen = await obs.next_change(5.0)
            assert seen is not None and seen.candidate == "n1" and seen.term == lead.term
            await lead.resign()
            assert await obs.next_change(5.0) is None
        async with alease.MultiLock(arc, ["{spread:1}:a", "{spread:1}:b"], ttl=2.0, retry=FAST).read(timeout=5.0) as m:
            assert len(m.tokens) == 2 and m.held
        waiter = asyncio.ensure_future(alease.RwLock(arc, "spread:0", ttl=2.0, retry=FAST).read(timeout=5.0))
        held = await alease.RwLock(arc, "spread:0", ttl=2.0, retry=FAST).try_read()
        assert held is not None
        r = await waiter
        assert r.token != held.token
        await r.release()
        await held.release()
    finally:
        await alease.Connector.of(arc).close()
    await arc.aclose() if hasattr(arc, "aclose") else await arc.close()

"""The client through Redis Sentinel (``Sentinel(...).master_for(...)``): a master and a
replica with the module, one sentinel; locks and elections, and forced failovers while a guard
is held and a writer waits. After a failover the old master stays a master for seconds (until
Sentinel demotes it), so a client still connected to it could go on renewing there while the
hold lapses on the new master: the client must follow ``+switch-master`` instead. The servers
take turns as master: each failover test starts from whichever is the master now."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
import time
import uuid
from typing import Dict, Iterator, List, Optional, Tuple

import pytest
import redis
import redis.asyncio.sentinel
import redis.sentinel
from redis_lease import Connector, LeaderElector, LockGuard, RetryPolicy, RwLock, replies
from redis_lease import asyncio as alease
from servers import Sentinel, Server, raw, text, until

FAST = RetryPolicy(base_delay=0.01, max_delay=0.2, budget=15.0)
Deployment = Tuple[Server, Server, Sentinel]


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
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


def master_for(sentinel: Sentinel, **kw: object) -> "redis.Redis[bytes]":
    return redis.sentinel.Sentinel(
        [("127.0.0.1", sentinel.port)],
        socket_timeout=5,
        sentinel_kwargs={"socket_timeout": 5, "client_name": kw.pop("watch_name", "lease-test-sentinel")},
    ).master_for("mymaster", socket_timeout=5, **kw)


def ready(d: Deployment) -> Tuple[Server, Server]:
    """The current master and the other server, once that one is its replica in sync. After an
    earlier failover the old master is still a master (Sentinel demotes it some 10 s after the
    switch): it is made a replica here, as Sentinel would."""
    a, b, sentinel = d
    port = sentinel.master_port()
    master, replica = (a, b) if a.port == port else (b, a)
    assert master.port == port, f"the sentinel names {port}"
    if "role:master" in text(raw(replica.port, "INFO", "replication")):
        raw(replica.port, "REPLICAOF", "127.0.0.1", str(master.port))
    until(30, "the replica to sync", lambda: "master_link_status:up" in text(raw(replica.port, "INFO", "replication")))
    return master, replica


def fail_over(d: Deployment, master: Server, replica: Server) -> None:
    """``SENTINEL FAILOVER`` once the replica has every write (asked again while Sentinel has no
    replica it deems fit yet); answers when the sentinel names the replica as the master."""
    sentinel = d[2]
    assert raw(master.port, "WAIT", 1, 5000) == 1, "the replica has every write"

    def asked() -> bool:
        try:
            raw(sentinel.port, "SENTINEL", "FAILOVER", "mymaster")
            return True
        except redis.ResponseError as e:
            if "NOGOODSLAVE" in str(e) or "INPROG" in str(e):
                return False
            raise

    until(30, "Sentinel to start the failover", asked, 0.2)
    until(30, "the sentinel to promote the replica", lambda: sentinel.master_port() == replica.port, 0.05)


def holders(port: int, key: str) -> Dict[str, int]:
    """Owner -> token of the holders ``key`` has on the server at ``port``."""
    return {h.owner: h.token for h in replies.lock_info(raw(port, "RWLOCK.INFO", key)).holders}


def clients_named(port: int, name: str) -> List[str]:
    """The ``CLIENT LIST`` lines of the connections named ``name`` (the client's settings name
    this package's connections too)."""
    return [line for line in text(raw(port, "CLIENT", "LIST")).splitlines() if f" name={name} " in line]


def subscribers_named(port: int, name: str) -> List[str]:
    """The subscriptions among :func:`clients_named` (a sentinel client's pool has connections
    of the same name for redis-py's own queries)."""
    return [line for line in clients_named(port, name) if " sub=1 " in line]


def renewals(port: int) -> int:
    """How many ``RWLOCK.RENEW`` the server at ``port`` has run."""
    for line in text(raw(port, "INFO", "commandstats")).splitlines():
        if line.startswith("cmdstat_rwlock.renew:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def watchers() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("redis-lease sentinel")]


def test_locks_and_elections_work_through_a_sentinel_master(deployment: Deployment) -> None:
    _, _, sentinel = deployment
    m = master_for(sentinel)
    lk = RwLock(m, "sentinel:lock", ttl=2.0, retry=FAST)
    with lk.write(timeout=5.0) as g:
        assert lk.try_read() is None
        assert lk.info().holders[0].token == g.token
    with LeaderElector(m, "sentinel:leader", ttl=2.0, retry=FAST).leadership(timeout=5.0) as lead:
        assert lead.held and lead.term > 0
    Connector.of(m).close()


def test_the_client_carries_on_through_a_sentinel_failover(deployment: Deployment) -> None:
    master, replica = ready(deployment)
    name = f"lease-{uuid.uuid4().hex[:8]}"
    m = master_for(deployment[2], client_name=name)
    lk = RwLock(m, "sentinel:failover", ttl=5.0, retry=FAST)
    guard = lk.write()
    out: List[Optional[LockGuard]] = []
    waiter = threading.Thread(target=lambda: out.append(lk.acquire("write", timeout=40.0)))
    waiter.start()
    until(10, "the writer to wait in the server", lambda: lk.info().waiters == 1)
    fail_over(deployment, master, replica)
    # The waiter's parked request is dropped too (asked again of the new master).
    until(10, "the client to close its connections to the old master", lambda: not clients_named(master.port, name))
    # Past a lease length the guard still holds: its renewals found the new master.
    time.sleep(6.0)
    assert guard.held, guard.reason
    assert "role:master" in text(raw(replica.port, "INFO", "replication"))
    # Never two holders: the new master counts this hold (not lapsed, not handed on).
    assert holders(replica.port, "sentinel:failover") == {guard.owner: guard.token}
    assert guard.release()
    waiter.join(40)
    nxt = out[0]
    assert nxt is not None and nxt.token > guard.token, "the waiter is served by the new master"
    assert holders(replica.port, "sentinel:failover") == {nxt.owner: nxt.token}
    assert nxt.release()
    Connector.of(m).close()


def test_after_a_switch_the_old_master_is_let_go_and_renewals_go_to_the_new_one(deployment: Deployment) -> None:
    master, replica = ready(deployment)
    name = f"lease-{uuid.uuid4().hex[:8]}"
    m = master_for(deployment[2], client_name=name)
    lk = RwLock(m, "sentinel:switch", ttl=3.0, retry=FAST)
    with lk.write(timeout=5.0) as g:
        until(10, "a renewal", lambda: renewals(master.port) > 0)
        assert clients_named(master.port, name), "the renewing connection stays open for reuse"
        fail_over(deployment, master, replica)
        # The old master is still a master (for seconds yet), but the client let go of it.
        assert "role:master" in text(raw(master.port, "INFO", "replication"))
        until(10, "the client to close its connections to the old master", lambda: not clients_named(master.port, name))
        before = renewals(master.port)
        time.sleep(4.0)  # past a lease length
        assert renewals(master.port) == before, "no renewal reached the old master after the switch"
        assert renewals(replica.port) > 0, "renewals go to the new master"
        assert g.held, g.reason
        assert holders(replica.port, "sentinel:switch") == {g.owner: g.token}
    assert holders(replica.port, "sentinel:switch") == {}, "released on the new master"
    Connector.of(m).close()


async def test_asyncio_carries_on_through_a_sentinel_failover(deployment: Deployment) -> None:
    master, replica = ready(deployment)
    watch = f"lease-watch-{uuid.uuid4().hex[:8]}"
    name = f"lease-{uuid.uuid4().hex[:8]}"
    sentinel = redis.asyncio.sentinel.Sentinel(
        [("127.0.0.1", deployment[2].port)],
        socket_timeout=5,
        sentinel_kwargs={"socket_timeout": 5, "client_name": watch},
    )
    m = sentinel.master_for("mymaster", socket_timeout=5, client_name=name)
    try:
        lk = alease.RwLock(m, "sentinel:asyncio", ttl=5.0, retry=FAST)
        guard = await lk.write(timeout=5.0)
        waiting = asyncio.ensure_future(lk.acquire("write", timeout=40.0))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(fail_over, deployment, master, replica)
        await asyncio.to_thread(
            until,
            10,
            "the client to close its connections to the old master",
            lambda: not clients_named(master.port, name),
        )
        await asyncio.sleep(6.0)  # past a lease length
        assert guard.held, guard.reason
        assert holders(replica.port, "sentinel:asyncio") == {guard.owner: guard.token}
        assert await guard.release()
        nxt = await asyncio.wait_for(waiting, 40)
        assert nxt is not None and nxt.token > guard.token, "the waiter is served by the new master"
        assert holders(replica.port, "sentinel:asyncio") == {nxt.owner: nxt.token}
        assert await nxt.release()
        assert subscribers_named(deployment[2].port, watch), "the connector follows the sentinel"
    finally:
        await alease.Connector.of(m).close()
        await m.aclose() if hasattr(m, "aclose") else await m.close()
        for s in sentinel.sentinels:
            await s.aclose() if hasattr(s, "aclose") else await s.close()
    # close() ended the subscription and its task.
    until(10, "close() to end the subscription", lambda: not subscribers_named(deployment[2].port, watch))
    assert not [t for t in asyncio.all_tasks() if "_follow" in repr(t.get_coro())]


def test_the_sentinel_watch_ends_with_close_and_with_the_client(deployment: Deployment) -> None:
    watch = f"lease-watch-{uuid.uuid4().hex[:8]}"
    before = set(watchers())
    m = master_for(deployment[2], watch_name=watch)
    lk = RwLock(m, "sentinel:watch", ttl=2.0, retry=FAST)
    assert not subscribers_named(deployment[2].port, watch) and set(watchers()) == before, "nothing before use"
    with lk.write(timeout=5.0):
        pass
    until(10, "the connector to subscribe", lambda: len(subscribers_named(deployment[2].port, watch)) == 1)
    assert len(set(watchers()) - before) == 1, "one thread per sentinel"
    Connector.of(m).close()
    until(10, "close() to end the subscription", lambda: not subscribers_named(deployment[2].port, watch))
    until(10, "close() to end the thread", lambda: not set(watchers()) - before)
    # Used again, it follows again; dropped, it ends by itself.
    with lk.write(timeout=5.0):
        pass
    until(10, "the connector to subscribe again", lambda: len(subscribers_named(deployment[2].port, watch)) == 1)
    del lk, m
    gc.collect()
    until(10, "the dropped client's subscription to end", lambda: not subscribers_named(deployment[2].port, watch))
    until(10, "the dropped client's thread to end", lambda: not set(watchers()) - before)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_child_follows_the_sentinels_with_its_own_subscription(deployment: Deployment) -> None:
    watch = f"lease-watch-{uuid.uuid4().hex[:8]}"
    m = master_for(deployment[2], watch_name=watch)
    lk = RwLock(m, "sentinel:fork", ttl=2.0, retry=FAST)
    with lk.write(timeout=5.0):
        pass
    until(10, "the parent to subscribe", lambda: len(subscribers_named(deployment[2].port, watch)) == 1)
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(rd)
            with lk.write(timeout=10.0) as g:
                ok = g.held
            until(10, "the child to subscribe", lambda: len(subscribers_named(deployment[2].port, watch)) == 2)
            os.write(wr, json.dumps({"ok": ok, "threads": len(watchers())}).encode())
            code = 0
        except BaseException as e:  # noqa: BLE001 - a child must never return into pytest
            os.write(wr, json.dumps({"error": repr(e)}).encode())
        finally:
            os._exit(code)
    os.close(wr)
    chunks = []
    while True:
        b = os.read(rd, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(rd)
    _, status = os.waitpid(pid, 0)
    got = json.loads(b"".join(chunks) or b"{}")
    assert status == 0 and got == {"ok": True, "threads": 1}, got
    until(10, "the child's subscription to end with it", lambda: len(subscribers_named(deployment[2].port, watch)) == 1)
    with lk.write(timeout=5.0) as g:
        assert g.held, "the parent carries on"
    Connector.of(m).close()

"""Restarts of the server (kill -9, AOF) under a waiting acquisition, a held lease and an
observer; names follow client/tests/lock.rs and leader.rs."""

from __future__ import annotations

import threading
import time
from typing import Iterator

import pytest
import redis
from redis_lease import LeaderObserver, MultiLock, RetryPolicy, RwLock
from servers import Server

FAST = RetryPolicy(base_delay=0.01, max_delay=0.2, budget=15.0)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server(["--appendonly", "yes", "--appendfsync", "always"])
    try:
        yield s
    finally:
        s.stop()


def test_acquisition_retries_across_a_server_restart(server: Server, r: "redis.Redis[bytes]") -> None:
    lk = RwLock(r, "lock:restart", ttl=5.0, retry=FAST)
    server.kill9()
    restarter = threading.Timer(1.0, server.restart)
    restarter.start()
    t = time.monotonic()
    g = lk.write(timeout=20.0)
    assert time.monotonic() - t >= 0.9, "retried until the server came back"
    restarter.join(30)
    assert g.held
    assert g.release()


def test_a_held_lease_survives_a_quick_restart_with_aof(server: Server, r: "redis.Redis[bytes]") -> None:
    lk = RwLock(r, "lock:aof", ttl=3.0, retry=FAST)
    g = lk.write()
    server.kill9()
    time.sleep(0.3)
    server.restart()
    # Through several renewal periods after the restart.
    time.sleep(3.5)
    assert g.held, g.reason
    info = lk.info()
    assert [h.token for h in info.holders] == [g.token], info
    assert g.release()


def test_a_multi_key_acquisition_and_its_renewals_retry_across_server_restarts(
    server: Server, r: "redis.Redis[bytes]"
) -> None:
    keys = ["lock:mrestart:1", "lock:mrestart:2"]
    lk = MultiLock(r, keys, ttl=3.0, retry=FAST)
    server.kill9()
    restarter = threading.Timer(1.0, server.restart)
    restarter.start()
    t = time.monotonic()
    g = lk.write(timeout=20.0)
    assert time.monotonic() - t >= 0.9, "retried until the server came back"
    restarter.join(30)
    server.kill9()
    time.sleep(0.3)
    server.restart()
    # Through several renewal periods after the second restart (the holds came back from the AOF).
    time.sleep(3.5)
    assert g.held, g.reason
    assert [[h.token for h in RwLock(r, k).info().holders] for k in keys] == [[t] for t in g.tokens]
    assert g.release()


def test_observer_resubscribes_after_a_server_restart(server: Server, r: "redis.Redis[bytes]") -> None:
    with LeaderObserver(r, "election:restart", retry=FAST) as obs:
        server.kill9()
        time.sleep(0.3)
        # The restarted server has the default notification settings again: the observer sets
        # them again when it subscribes again.
        server.restart()
        time.sleep(1.5)  # its backoff is at most 0.2 s here
        assert server.client().execute_command("LEADER.CAMPAIGN", "election:restart", "z", 5000)
        seen = obs.next_change(5.0)
        assert seen is not None and seen.candidate == "z"

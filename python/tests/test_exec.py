"""Fenced writes inside Redis (LEASE.EXEC, COMMANDS.md) through guards."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aredis
from redis_lease import Fenced, LeaderElector, LeaseLost, LossReason, RetryPolicy, RwLock, Semaphore
from redis_lease import asyncio as alease
from servers import Server

FAST = RetryPolicy(base_delay=0.01, max_delay=0.2, budget=15.0)


def test_exec_runs_only_while_the_write_hold_is_live(r: "redis.Redis[bytes]") -> None:
    lk = RwLock(r, "{order:1}", ttl=5.0, retry=FAST)
    # The hold was lost inside the block: leaving it says so.
    with pytest.raises(LeaseLost, match="lost during the with block"):
        with lk.write() as g:
            assert g.exec("SET", "{order:1}:data", "v1") in (b"OK", "OK", True)
            assert g.exec("GET", "{order:1}:data") == b"v1"
            r.delete("{order:1}")  # the hold is gone: the next write is refused
            with pytest.raises(Fenced) as e:
                g.exec("SET", "{order:1}:data", "v2")
            assert str(e.value).startswith("FENCED")
            assert isinstance(e.value, LeaseLost)
    assert r.get("{order:1}:data") == b"v1", "nothing ran"


def test_a_read_holds_token_does_not_fence_a_write(r: "redis.Redis[bytes]") -> None:
    with RwLock(r, "{order:2}", ttl=5.0, retry=FAST).read() as g:
        with pytest.raises(Fenced):
            g.exec("SET", "{order:2}:data", "x")
        assert g.held, "a read guard's lease is not lost by it"
    assert r.exists("{order:2}:data") == 0


def test_fenced_marks_the_guard_lost_at_once(r: "redis.Redis[bytes]") -> None:
    g = Semaphore(r, "{order:5}", limit=1, ttl=10.0, retry=FAST).acquire()
    assert g.exec("SET", "{order:5}:data", "mine") == b"OK"
    r.delete("{order:5}")
    assert g.held, "the watchdog has not renewed since"
    with pytest.raises(Fenced):
        g.exec("SET", "{order:5}:data", "late")
    assert not g.held and g.reason is LossReason.REVOKED
    assert r.get("{order:5}:data") == b"mine"


def test_a_stale_holder_is_fenced_after_the_next_holder_wrote(r: "redis.Redis[bytes]") -> None:
    """A holder that stopped renewing (as if frozen past its lease) writes after the next
    holder did: the server refuses it, the data stays the newer holder's."""
    lk = RwLock(r, "{order:6}", ttl=0.5, retry=FAST)
    stale = lk.write()
    stale.abandon()
    with lk.write(timeout=5.0) as new:
        assert new.token > stale.token
        assert new.exec("SET", "{order:6}:data", "new") == b"OK"
        with pytest.raises(Fenced):
            stale.exec("SET", "{order:6}:data", "stale")
    assert r.get("{order:6}:data") == b"new"


def test_an_acl_denial_of_the_inner_command_is_not_fenced(server: Server, r: "redis.Redis[bytes]") -> None:
    r.execute_command("ACL", "SETUSER", "noset", "on", ">pw", "~*", "+@all", "-set")
    u = server.client(username="noset", password="pw")
    try:
        with RwLock(u, "{order:7}", ttl=5.0, retry=FAST).write() as g:
            with pytest.raises(redis.ResponseError) as e:
                g.exec("SET", "{order:7}:data", "x")
            assert not isinstance(e.value, Fenced) and "acl" in str(e.value).lower()
            assert g.exec("INCR", "{order:7}:n") == 1
            assert g.held
    finally:
        u.close()
    assert r.exists("{order:7}:data") == 0


def test_exec_under_leadership_and_after_resigning(r: "redis.Redis[bytes]") -> None:
    e = LeaderElector(r, "{job}", ttl=5.0, retry=FAST)
    lead = e.leadership(timeout=5.0)
    assert lead.exec("INCR", "{job}:runs") == 1
    lead.resign()
    with pytest.raises(Fenced):
        lead.exec("INCR", "{job}:runs")
    assert r.get("{job}:runs") == b"1"


def test_exec_under_semaphore_permits(r: "redis.Redis[bytes]") -> None:
    with Semaphore(r, "{pool}", limit=2, ttl=5.0, retry=FAST).acquire() as g:
        assert g.exec("INCR", "{pool}:n") == 1


async def test_asyncio_exec_is_fenced_after_release(server: Server) -> None:
    ar = aredis.Redis(host="127.0.0.1", port=server.port)
    g = await alease.RwLock(ar, "{order:3}", ttl=5.0, retry=FAST).write()
    assert await g.exec("INCR", "{order:3}:n") == 1
    await g.release()
    with pytest.raises(Fenced):
        await g.exec("INCR", "{order:3}:n")
    await alease.Connector.of(ar).close()
    await ar.aclose() if hasattr(ar, "aclose") else await ar.close()

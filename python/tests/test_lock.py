"""RwLock (sync) against a real redis-server with the module; names follow client/tests/lock.rs."""

from __future__ import annotations

import threading
import time
from typing import List, Optional, Tuple

import pytest
import redis
from redis_lease import Deadlock, LeaseLost, LockGone, LockGuard, LossReason, NotAcquired, RetryPolicy, RwLock
from servers import Server, free_port

FAST = RetryPolicy(base_delay=0.01, max_delay=0.2, budget=15.0)


def lock(r: "redis.Redis[bytes]", key: str, ttl: float, **kw: object) -> RwLock:
    return RwLock(r, key, ttl=ttl, retry=FAST, **kw)  # type: ignore[arg-type]


def test_write_lock_excludes_many_tasks(r: "redis.Redis[bytes]") -> None:
    lk = lock(r, "lock:counter", 5.0)
    r.delete("counter")
    tokens: List[int] = []
    errors: List[BaseException] = []

    def work() -> None:
        try:
            c = r  # redis-py clients are thread-safe
            for _ in range(12):
                with lk.write() as g:
                    v = int(c.get("counter") or 0)
                    time.sleep(0.002)
                    c.set("counter", v + 1)
                    tokens.append(g.token)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "tasks finish"
    assert not errors, errors
    assert int(r.get("counter") or 0) == 96, "read-modify-write under the lock is exact"
    # Fencing tokens grow with every grant, in the order of the critical sections.
    assert all(a < b for a, b in zip(tokens, tokens[1:])), tokens
    assert r.exists("lock:counter") == 0, "nothing is left behind"


def test_readers_share_and_writer_waits_for_them(r: "redis.Redis[bytes]") -> None:
    lk = lock(r, "lock:rw", 5.0)
    r1 = lk.try_read()
    r2 = lk.try_read()
    assert r1 is not None and r2 is not None, "readers share"
    assert lk.try_write() is None, "writer excluded"
    info = lk.info()
    assert info.mode == "read" and len(info.holders) == 2
    assert info.hold_of(r1.owner, "read") is not None
    out: List[Tuple[LockGuard, float]] = []

    def writer() -> None:
        t = time.monotonic()
        g = lk.write(timeout=10.0)
        out.append((g, time.monotonic() - t))

    w = threading.Thread(target=writer)
    w.start()
    time.sleep(0.3)
    assert lk.info().waiters == 1, "the writer waits in the server"
    assert lk.try_read() is None, "a new reader does not overtake a waiting writer"
    r1.release()
    r2.release()
    w.join(10)
    g, waited = out[0]
    assert waited >= 0.25
    assert g.token > 0 and g.mode == "write"
    assert g.release()


def test_try_and_timeout_give_none_when_busy(r: "redis.Redis[bytes]") -> None:
    lk = lock(r, "lock:busy", 5.0)
    g = lk.write()
    assert lk.try_read() is None
    t = time.monotonic()
    with pytest.raises(NotAcquired):
        lk.write(timeout=0.3)
    waited = time.monotonic() - t
    assert 0.28 <= waited < 3.0, waited
    assert lk.acquire("write", timeout=0.2) is None
    g.release()
    g2 = lk.try_write()
    assert g2 is not None
    g2.release()


def test_dropped_guard_is_released(r: "redis.Redis[bytes]") -> None:
    lk = lock(r, "lock:drop", 30.0)
    g: Optional[LockGuard] = lk.write()
    del g  # collected at once (no reference cycle): released in the background
    other = lk.write(timeout=5.0)  # long before the 30 s ttl
    other.release()


def test_a_guard_released_twice_is_harmless(r: "redis.Redis[bytes]") -> None:
    lk = lock(r, "lock:twice", 5.0)
    with lk.write() as g:
        assert g.release() is True
        assert g.release() is False
    assert g.release() is False  # and once more by the with block: nothing happens
    assert not g.held and g.reason is LossReason.RELEASED
    with pytest.raises(LeaseLost):
        g.check()
    assert r.exists("lock:twice") == 0


def test_watchdog_keeps_a_long_critical_section_alive(r: "redis.Redis[bytes]") -> None:
    lk = lock(r, "lock:long", 0.6)
    with lk.write() as g:
        first = g.valid_until
        assert first is not None
        start = time.monotonic()
        while time.monotonic() - start < 2.5:
            assert g.held, f"still held after {time.monotonic() - start:.2f}s"
            g.check()
            assert lk.try_write() is None
            time.sleep(0.15)
        assert (g.valid_until or 0) > first + 1.5
        info = lk.info()
        assert [(h.owner, h.token) for h in info.holders] == [(g.owner, g.token)]
        assert not g.lost.is_set()
        assert g.release()


def _loss_before_the_next_grant(server: Server, r: "redis.Redis[bytes]", key: str, freeze: "threading.Thread") -> None:
    """Shared body of the two lease-loss tests: ``freeze`` stops the server for longer than
    the ttl; the guard must say so before the server grants the lock to the contender."""
    ttl = 1.0
    lk = lock(r, key, ttl)
    g = lk.write()
    acquired = time.monotonic()
    out: List[Tuple[Optional[LockGuard], float]] = []

    def contender() -> None:
        got = lk.acquire("write", timeout=20.0)
        out.append((got, time.monotonic()))

    c = threading.Thread(target=contender)
    c.start()
    time.sleep(0.1)
    freeze.start()
    assert g.wait_lost(10.0), "loss signalled"
    lost_at = time.monotonic()
    assert g.lost.is_set()
    assert g.reason is LossReason.EXPIRED
    assert lost_at - acquired <= ttl + 0.3, f"lost after {lost_at - acquired:.3f}s"
    with pytest.raises(LeaseLost):
        g.check()
    c.join(30)
    granted, granted_at = out[0]
    assert granted is not None, "the contender gets the lock after the lapse"
    assert lost_at < granted_at, f"loss signalled {granted_at - lost_at:.3f}s before the other grant"
    assert granted.token > g.token
    freeze.join(10)
    assert granted.release()
    assert g.release() is False, "the lost guard's release finds nothing to release"


def test_lease_loss_is_signalled_before_anyone_else_is_granted(server: Server, r: "redis.Redis[bytes]") -> None:
    def sleep() -> None:
        c = server.client()
        try:
            c.execute_command("DEBUG", "SLEEP", 2.5)
        except redis.RedisError:
            pass

    _loss_before_the_next_grant(server, r, "lock:lost", threading.Thread(target=sleep))


def test_lease_loss_is_signalled_before_anyone_else_is_granted_when_the_server_is_frozen(
    server: Server, r: "redis.Redis[bytes]"
) -> None:
    def freeze() -> None:
        server.freeze()  # SIGSTOP: no reply, no timer, nothing, while TCP still connects
        try:
            time.sleep(2.5)
        finally:
            server.thaw()

    _loss_before_the_next_grant(server, r, "lock:frozen", threading.Thread(target=freeze))


def test_deleting_the_key_revokes_the_lease(r: "redis.Redis[bytes]") -> None:
    lk = lock(r, "lock:del", 0.9)
    g = lk.write()
    r.delete("lock:del")
    assert g.wait_lost(3.0), "loss signalled"
    assert g.reason is LossReason.REVOKED
    assert g.release() is False, "nothing left to release"


def test_upgrade_conflict_is_a_deadlock_error(r: "redis.Redis[bytes]") -> None:
    a = lock(r, "lock:up", 5.0, owner="a")
    b = lock(r, "lock:up", 5.0, owner="b")
    ra, rb = a.try_read(), b.try_read()
    assert ra is not None and rb is not None
    out: List[LockGuard] = []
    up = threading.Thread(target=lambda: out.append(a.write(timeout=10.0)))
    up.start()
    time.sleep(0.2)
    with pytest.raises(Deadlock):
        b.write(timeout=5.0)
    rb.release()
    up.join(10)
    wa = out[0]
    assert wa.mode == "write"
    wa.release()
    ra.release()
    assert r.exists("lock:up") == 0


def test_a_grant_whose_reply_was_lost_is_adopted_not_duplicated(server: Server, r: "redis.Redis[bytes]") -> None:
    """The server freezes right after granting; the client gives up waiting for the reply and
    adopts the grant through RWLOCK.INFO: one hold, no surplus, no leak."""
    lk = RwLock(r, "lock:lost-reply", ttl=8.0, retry=FAST, command_timeout=1.5)
    assert r.execute_command("RWLOCK.WLOCK", "lock:lost-reply", "h", 10000)
    out: List[Tuple[Optional[LockGuard], float]] = []

    def contender() -> None:
        t = time.monotonic()
        got = lk.acquire("write", timeout=0.6)
        out.append((got, time.monotonic() - t))

    c = threading.Thread(target=contender)
    c.start()
    time.sleep(0.3)
    # Release (which grants the waiting contender) and freeze the server before the reply goes
    # out; the contender's reply limit (0.6 + 1.5 s) runs out during the freeze.
    p = r.pipeline(transaction=False)
    p.execute_command("RWLOCK.UNLOCK", "lock:lost-reply", "h")
    p.execute_command("DEBUG", "SLEEP", 3)
    released, _ = p.execute()
    assert released == 1
    c.join(20)
    g, took = out[0]
    assert g is not None, "adopted, not an error"
    assert took > 2.0, f"{took:.3f}s: the reply was really lost"
    assert g.held
    info = lk.info()
    assert len(info.holders) == 1, info
    h = info.holders[0]
    assert (h.owner, h.count, h.token) == (g.owner, 1, g.token), f"no second hold: {info}"
    assert g.release()
    assert r.exists("lock:lost-reply") == 0, "nothing left behind"


def test_a_waiter_whose_key_is_deleted_gets_lock_gone(r: "redis.Redis[bytes]") -> None:
    lk = lock(r, "lock:gone", 5.0)
    held = lk.write()
    out: List[BaseException] = []

    def waiter() -> None:
        try:
            lk.write(timeout=10.0)
        except BaseException as e:  # noqa: BLE001
            out.append(e)

    w = threading.Thread(target=waiter)
    w.start()
    time.sleep(0.2)
    t = time.monotonic()
    r.delete("lock:gone")
    w.join(5)
    assert time.monotonic() - t < 5, "answered at once"
    assert out and isinstance(out[0], LockGone), out
    held.release()


def test_readonly_is_retried_until_the_server_is_promoted(r: "redis.Redis[bytes]") -> None:
    """Like a client that reaches a demoted master during a failover: READONLY is retried
    until the server accepts writes again (within the caller's timeout)."""
    lk = lock(r, "lock:ro", 5.0)
    r.execute_command("REPLICAOF", "127.0.0.1", str(free_port()))  # a master that does not exist
    try:
        threading.Timer(0.8, lambda: r.execute_command("REPLICAOF", "NO", "ONE")).start()
        t = time.monotonic()
        g = lk.write(timeout=10.0)
        assert time.monotonic() - t >= 0.7
    finally:
        time.sleep(0.9)
        r.execute_command("REPLICAOF", "NO", "ONE")
    assert g.release()


def test_ttl_is_whole_ms_rounded_up_and_must_be_positive(r: "redis.Redis[bytes]") -> None:
    assert RwLock(r, "k", ttl=1.0001).spec.timing.ttl_ms == 1001
    assert RwLock(r, "k", ttl=1.1).spec.timing.ttl_ms == 1100
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            RwLock(r, "k", ttl=bad)
    with pytest.raises(ValueError):
        RwLock(r, "k", ttl=0.002)  # the drift margin would leave nothing
    lk = lock(r, "lock:ttl", 1.0001)
    with lk.write() as g:
        ttl = lk.info().holders[0].ttl
        assert 0.95 <= ttl <= 1.001, ttl
        assert g.held


def test_works_with_resp3_and_decoded_responses(server: Server) -> None:
    c = server.client(protocol=3, decode_responses=True)
    lk = RwLock(c, "lock:resp3", ttl=2.0, retry=FAST)
    with lk.read() as a, lk.read() as b:
        info = lk.info()
        assert info.mode == "read" and {h.owner for h in info.holders} == {a.owner, b.owner}
    with lk.write(timeout=1.0) as g:
        assert lk.info().holders[0].token == g.token
    c.close()

"""MultiLock (RWLOCK.MLOCK) against a real server: transfers that need two accounts lose no
update, one watchdog keeps every key, the Deadlock error, the MAX_HOLD loss, a loss inside a
``with`` block, and writes fenced on the first key."""

from __future__ import annotations

import threading
import time

import pytest
from redis_lease import Deadlock, Fenced, LeaseLost, LossReason, MaxHold, MultiGuard, MultiLock, NotAcquired, RwLock
from servers import until


def test_transfers_lose_no_update(r):
    accounts = 4
    for a in range(accounts):
        r.set(f"py:bal:{a}", 100)
    errors = []

    def worker(w):
        try:
            for i in range(12):
                a, b = (w + i) % accounts, (w * 3 + i + 1) % accounts
                if a == b:
                    continue
                with MultiLock(r, [f"py:acct:{a}", f"py:acct:{b}"], ttl=5.0).write(timeout=30) as g:
                    assert len(g.tokens) == 2
                    x, y = int(r.get(f"py:bal:{a}")), int(r.get(f"py:bal:{b}"))
                    time.sleep(0.001)
                    r.set(f"py:bal:{a}", x - 1)
                    r.set(f"py:bal:{b}", y + 1)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sum(int(r.get(f"py:bal:{a}")) for a in range(accounts)) == 100 * accounts


def test_one_watchdog_keeps_every_key(r):
    lock = MultiLock(r, ["py:x", "py:y"], ttl=0.6)
    g = lock.acquire("read", timeout=0)
    assert g is not None
    time.sleep(1.5)
    assert g.held, g.reason
    assert MultiLock(r, ["py:y"], ttl=0.6).acquire("write", timeout=0) is None
    assert g.release()
    assert MultiLock(r, ["py:y"], ttl=0.6).acquire("write", timeout=0) is not None
    with pytest.raises(ValueError):
        MultiLock(r, ["a", "a"])


def test_a_wait_that_would_deadlock_raises(r):
    o1 = r.execute_command("RWLOCK.WLOCK", "py:da", "o1", 10000)
    o2 = r.execute_command("RWLOCK.WLOCK", "py:db", "o2", 10000)
    assert o1 and o2
    parked = threading.Thread(target=lambda: r.execute_command("RWLOCK.WLOCK", "py:db", "o1", 10000, "WAIT", 3000))
    parked.start()
    time.sleep(0.3)
    with pytest.raises(Deadlock):
        RwLock(r, "py:da", owner="o2").write(timeout=3)
    r.execute_command("RWLOCK.UNLOCK", "py:db", "o2")
    parked.join(10)


def test_a_hold_at_its_cap_is_lost_with_max_hold(r):
    # Renewed up to the cap (1.2 s), not lost at the first refused renewal (about 0.6 s).
    t0 = time.monotonic()
    g = MultiLock(r, ["py:m1", "py:m2"], ttl=0.6, max_hold=1.2).acquire("write", timeout=0)
    assert g is not None
    assert g.lost.wait(5)
    took = time.monotonic() - t0
    assert g.reason is LossReason.MAX_HOLD
    assert 1.05 < took < 2.5, took
    g.release()
    with pytest.raises(MaxHold):
        MultiLock(r, ["py:m3"], ttl=2.0, max_hold=1.0).acquire("write", timeout=0)


def test_single_key_holds_take_max_hold_and_last_until_the_cap(r):
    from redis_lease import Semaphore

    for make in (
        lambda: RwLock(r, "py:cap:l", ttl=0.6, max_hold=1.2).write(timeout=0),
        lambda: Semaphore(r, "py:cap:s", 2, ttl=0.6, max_hold=1.2).acquire(timeout=0),
    ):
        t0 = time.monotonic()
        g = make()
        lost = g.wait_lost(5)
        took = time.monotonic() - t0
        assert lost, "never lost"
        assert g.reason is LossReason.MAX_HOLD, g.reason
        assert 1.05 < took < 2.5, took
        g.release()
    with pytest.raises(ValueError):
        RwLock(r, "py:cap:l", ttl=2.0, max_hold=1.0)
    # The server's cap is in every holder's INFO.
    lock = RwLock(r, "py:cap:i", ttl=5.0, max_hold=30.0)
    g = lock.write(timeout=0)
    cap = lock.info().holders[0].cap
    assert cap is not None and 25.0 < cap <= 30.0, cap
    g.release()
    with RwLock(r, "py:cap:i", ttl=5.0).write(timeout=0):
        assert lock.info().holders[0].cap is None


def holders(r, key):
    return [(h.owner, h.token) for h in RwLock(r, key).info().holders]


def test_a_hold_gone_on_one_key_is_a_loss_and_leaving_the_with_block_raises(r):
    keys = ["py:gone:1", "py:gone:2"]
    seen = []
    with pytest.raises(LeaseLost, match="lost during the with block") as e:
        with MultiLock(r, keys, ttl=0.6).write(timeout=5) as g:
            assert isinstance(g, MultiGuard) and g.keys == keys and g.mode == "write"
            assert g.key == keys[0] and g.token == g.tokens[0] and g.valid_until is not None
            assert [holders(r, k) for k in keys] == [[(g.owner, t)] for t in g.tokens]
            g.on_lost(seen.append)
            # Taken away on one key: the next MRENEW renews one key of two.
            assert r.execute_command("RWLOCK.UNLOCK", keys[1], g.owner) == 1
            assert g.wait_lost(5), "lost at the next renewal"
            assert g.reason is LossReason.REVOKED and not g.held and g.valid_until is None
    assert e.value.reason is LossReason.REVOKED
    # The callbacks run on the watchdog thread just after the loss is published.
    until(2, "the on_lost callback", lambda: seen == [LossReason.REVOKED])
    assert r.exists(*keys) == 0, "the other key's hold was given back on leaving"
    # A deleted key, the same; raise_on_lost=False opts out.
    with MultiLock(r, keys, ttl=0.6, raise_on_lost=False).read(timeout=5) as g:
        r.delete(keys[0])
        assert g.wait_lost(5) and g.reason is LossReason.REVOKED
    assert r.exists(*keys) == 0


def test_exec_is_fenced_on_the_first_key(r):
    keys = ["{py:ex}:1", "{py:ex}:2"]
    with MultiLock(r, keys, ttl=5.0).read(timeout=5) as g:
        with pytest.raises(Fenced):
            g.exec("SET", "{py:ex}:data", "r")  # a read hold's token never fences a write
        assert g.held
    with pytest.raises(LeaseLost):
        with MultiLock(r, keys, ttl=5.0).write(timeout=5) as g:
            assert g.exec("SET", "{py:ex}:data", "v1") == b"OK"
            r.execute_command("RWLOCK.UNLOCK", keys[0], g.owner)
            with pytest.raises(Fenced):
                g.exec("SET", "{py:ex}:data", "v2")
            assert not g.held and g.reason is LossReason.REVOKED, "lost at once, not at the next renewal"
    assert r.get("{py:ex}:data") == b"v1"
    assert r.exists(*keys) == 0


def test_a_dropped_guard_is_released_and_a_try_gives_none_while_held(r):
    keys = ["py:drop:1", "py:drop:2"]
    lock = MultiLock(r, keys, ttl=30.0)
    g = lock.try_write()
    assert g is not None and lock.try_read() is None and lock.acquire("write", timeout=0.2) is None
    with pytest.raises(NotAcquired):
        lock.read(timeout=0.2)
    del g
    deadline = time.monotonic() + 10
    while r.exists(*keys) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert r.exists(*keys) == 0, "released in the background"

"""MultiLock (RWLOCK.MLOCK) against a real server: transfers that need two accounts lose no
update, one watchdog keeps every key, the Deadlock error, and the MAX_HOLD loss."""

from __future__ import annotations

import threading
import time

import pytest
from redis_lease import Deadlock, LossReason, MaxHold, MultiLock, RwLock


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
    g = MultiLock(r, ["py:m1", "py:m2"], ttl=0.6, max_hold=1.0).acquire("write", timeout=0)
    assert g is not None
    assert g.lost.wait(5)
    assert g.reason is LossReason.MAX_HOLD
    g.release()
    with pytest.raises(MaxHold):
        MultiLock(r, ["py:m3"], ttl=2.0, max_hold=1.0).acquire("write", timeout=0)

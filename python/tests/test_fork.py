"""Fork safety: a lock used in the parent, then in children made with ``os.fork()`` (gunicorn
``--preload``, celery prefork, multiprocessing's default on Linux) that inherit the client. No
reply may cross between processes: no two children inside the write lock at once, no section
fails."""

from __future__ import annotations

import json
import os
import time
from typing import Dict, List

import pytest
import redis
from redis_lease import MultiLock, RwLock
from servers import Server

CHILDREN = 4
SECTIONS = 5


def _child(lock: RwLock, r: "redis.Redis[bytes]", counter: str, out: int) -> None:
    ok = failed = overlaps = 0
    errors: List[str] = []
    for _ in range(SECTIONS):
        try:
            with lock.write(timeout=30.0):
                if r.incr(counter) != 1:
                    overlaps += 1
                time.sleep(0.03)
                r.decr(counter)
            ok += 1
        except Exception as e:  # noqa: BLE001 - every failure is counted and reported
            failed += 1
            errors.append(f"{type(e).__name__}: {e}")
    os.write(out, json.dumps({"ok": ok, "failed": failed, "overlaps": overlaps, "errors": errors}).encode())


def _run_forked(lock: RwLock, r: "redis.Redis[bytes]", counter: str) -> Dict[str, object]:
    results = []
    kids = []
    for _ in range(CHILDREN):
        rd, wr = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(rd)
                _child(lock, r, counter, wr)
            except BaseException:  # noqa: BLE001 - a child must never return into pytest
                code = 1
            finally:
                os._exit(code)
        os.close(wr)
        kids.append((pid, rd))
    for pid, rd in kids:
        chunks = []
        while True:
            b = os.read(rd, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(rd)
        os.waitpid(pid, 0)
        results.append(json.loads(b"".join(chunks) or b'{"ok":0,"failed":5,"overlaps":0,"errors":["child died"]}'))
    return {
        "ok": sum(x["ok"] for x in results),
        "failed": sum(x["failed"] for x in results),
        "overlaps": sum(x["overlaps"] for x in results),
        "errors": [e for x in results for e in x["errors"]],
    }


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
@pytest.mark.parametrize("run", range(3))
def test_children_forked_after_use_never_share_the_parents_connections(server: Server, run: int) -> None:
    r = server.client()
    lock = RwLock(r, f"lock:fork:{run}", ttl=5.0)
    # Used in the parent first: the connector then has idle connections a child would inherit.
    with lock.write(timeout=5.0):
        pass
    with lock.read(timeout=5.0):
        pass
    counter = f"fork:inside:{run}"
    r.delete(counter)
    got = _run_forked(lock, r, counter)
    assert got["overlaps"] == 0, f"two children inside the write lock at once: {got}"
    assert got["failed"] == 0, f"sections failed: {got}"
    assert got["ok"] == CHILDREN * SECTIONS
    # And the parent's own client still works after its children used theirs.
    with lock.write(timeout=5.0) as g:
        assert g.held
    r.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_guard_inherited_by_a_child_is_the_parents(server: Server) -> None:
    r = server.client()
    lock = RwLock(r, "lock:fork:inherited", ttl=5.0)
    g = lock.write(timeout=5.0)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            # The child's copy neither releases (explicitly or when collected) nor renews.
            code = 0 if g.release() is False else 2
            del g
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "release() in the child answered False"
    assert g.held and [h.owner for h in lock.info().holders] == [g.owner], "the parent's hold is intact"
    assert g.release()
    r.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_multi_key_guard_inherited_by_a_child_is_the_parents(server: Server) -> None:
    r = server.client()
    keys = ["lock:fork:m1", "lock:fork:m2"]
    g = MultiLock(r, keys, ttl=0.6).write(timeout=5.0)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            # The child's copy neither releases (explicitly or when collected) nor renews; it
            # outlives a few of the parent's renewals.
            code = 0 if g.release() is False else 2
            del g
            time.sleep(0.8)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "release() in the child answered False"
    info = [RwLock(r, k).info().holders for k in keys]
    assert g.held and [[(h.owner, h.token) for h in hs] for hs in info] == [[(g.owner, t)] for t in g.tokens]
    assert g.release()
    assert r.exists(*keys) == 0
    r.close()

"""The Python client's conformance driver: JSON lines on stdin/stdout (conformance/PROTOCOL.md),
each request done through redis_lease's public sync API."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.parse
from typing import Any, Dict, List, Optional

import redis
import redis_lease as rl
from redis.sentinel import Sentinel

_out = threading.Lock()


def emit(obj: Dict[str, Any]) -> None:
    line = json.dumps(obj)
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def kind_of(e: BaseException) -> str:
    table = [
        (rl.ModuleNotLoaded, "module_not_loaded"),
        (rl.TtlTooLong, "ttl_too_long"),
        (rl.LimitMismatch, "limit"),
        (rl.PermitsMismatch, "permits"),
        (rl.Fenced, "fenced"),
        (rl.LeaseLost, "lease_lost"),
        (rl.Deadlock, "deadlock"),
        (rl.LockGone, "lock_gone"),
        (rl.NotAcquired, "not_acquired"),
        (rl.ProtocolError, "protocol"),
        (redis.ConnectionError, "connection"),
        (ValueError, "invalid"),
        (TypeError, "invalid"),
    ]
    if isinstance(e, rl.Unavailable):
        return "connection" if isinstance(e.last, (redis.ConnectionError, OSError)) else "unavailable"
    for cls, name in table:
        if isinstance(e, cls):
            return name
    return "other"


def jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    return v


class Driver:
    def __init__(self) -> None:
        self.client: Optional[Any] = None
        self.guards: Dict[str, rl.Guard] = {}
        self.n = 0

    def connect(self, url: str) -> Dict[str, Any]:
        if url.startswith("redis+sentinel://"):
            u = urllib.parse.urlparse(url)
            hosts = [(h.rsplit(":", 1)[0], int(h.rsplit(":", 1)[1])) for h in u.netloc.split(",")]
            self.client = Sentinel(hosts, socket_timeout=5).master_for(u.path.strip("/"), socket_timeout=5)
        else:
            self.client = redis.Redis.from_url(url, socket_timeout=5)
        return {}

    def acquire(self, req: Dict[str, Any]) -> Dict[str, Any]:
        ttl = req["ttl_ms"] / 1000.0
        wait = req.get("wait_ms")
        timeout = None if wait is None else wait / 1000.0
        kind = req["kind"]
        owner = req.get("owner")
        g: Optional[rl.Guard]
        if kind in ("read", "write"):
            g = rl.RwLock(self.client, req["key"], ttl=ttl, owner=owner).acquire(kind, timeout)
        elif kind == "semaphore":
            sem = rl.Semaphore(self.client, req["key"], limit=req["limit"], ttl=ttl, owner=owner)
            g = sem.try_acquire(req.get("permits", 1)) if timeout == 0 else sem.acquire(req.get("permits", 1), timeout)
        elif kind == "leader":
            g = rl.LeaderElector(self.client, req["key"], ttl=ttl, candidate=owner).campaign(timeout)
        else:
            raise ValueError(f"unknown kind {kind!r}")
        if g is None:
            return {"granted": False}
        self.n += 1
        h = f"h{self.n}"
        self.guards[h] = g
        g.on_lost(lambda reason, h=h: emit({"event": "lost", "handle": h, "reason": reason.name.lower()}))
        return {"handle": h, "token": g.token}

    def handle(self, req: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        op = req["op"]
        if op == "hello":
            return {"client": "python", "version": rl.__version__, "capabilities": ["fork", "sentinel"]}
        if op == "connect":
            return self.connect(req["url"])
        if op == "acquire":
            return self.acquire(req)
        if op == "command":
            return {"reply": jsonable(self.client.execute_command(*req["command"]))}  # type: ignore[union-attr]
        if op == "fork":
            return fork(self.client, req)
        g = self.guards[req["handle"]]
        if op == "status":
            r = g.reason
            held = g.held
            return {"held": held, "reason": None if held or r is None else r.name.lower()}
        if op == "wait_lost":
            t = time.monotonic()
            lost = g.wait_lost(req["timeout_ms"] / 1000.0)
            out: Dict[str, Any] = {"lost": lost, "elapsed_ms": int((time.monotonic() - t) * 1000)}
            if lost and g.reason is not None:
                out["reason"] = g.reason.name.lower()
            return out
        if op == "end":
            g.__exit__(None, None, None)
            return {}
        if op == "release":
            return {"released": g.release()}
        if op == "exec":
            return {"reply": jsonable(g.exec(*req["command"]))}
        raise NotImplementedError(op)


def fork(client: Any, req: Dict[str, Any]) -> Dict[str, Any]:
    lock = rl.RwLock(client, req["key"], ttl=req["ttl_ms"] / 1000.0)
    with lock.write(timeout=10):
        pass
    with lock.read(timeout=10):
        pass
    client.delete(req["counter"])
    kids = []
    for _ in range(req["children"]):
        rd, wr = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(rd)
                ok = failed = overlaps = 0
                errors: List[str] = []
                for _ in range(req["sections"]):
                    try:
                        with lock.write(timeout=30):
                            if client.incr(req["counter"]) != 1:
                                overlaps += 1
                            time.sleep(req["hold_ms"] / 1000.0)
                            client.decr(req["counter"])
                        ok += 1
                    except Exception as e:  # noqa: BLE001 - counted and reported
                        failed += 1
                        errors.append(f"{type(e).__name__}: {e}")
                os.write(wr, json.dumps([ok, failed, overlaps, errors]).encode())
            except BaseException:  # noqa: BLE001 - a child never returns into the driver
                code = 1
            finally:
                os._exit(code)
        os.close(wr)
        kids.append((pid, rd))
    total = {"sections_ok": 0, "sections_failed": 0, "overlaps": 0, "errors": []}
    for pid, rd in kids:
        data = b""
        while True:
            b = os.read(rd, 65536)
            if not b:
                break
            data += b
        os.close(rd)
        os.waitpid(pid, 0)
        ok, failed, overlaps, errors = json.loads(data) if data else [0, req["sections"], 0, ["child died"]]
        total["sections_ok"] += ok
        total["sections_failed"] += failed
        total["overlaps"] += overlaps
        total["errors"] += errors
    return total


def main() -> None:
    d = Driver()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "quit":
            break
        try:
            res = d.handle(req)
            emit({"id": req.get("id"), "ok": True, **(res or {})})
        except NotImplementedError as e:
            emit({"id": req.get("id"), "ok": False, "error": {"kind": "unsupported", "message": str(e)}})
        except Exception as e:  # noqa: BLE001 - every error is an answer
            emit({"id": req.get("id"), "ok": False, "error": {"kind": kind_of(e), "message": str(e)}})
    os._exit(0)  # leave held guards held: the harness decides what the end looks like


if __name__ == "__main__":
    main()

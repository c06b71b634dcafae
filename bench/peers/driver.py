"""One benchmark worker driving a Python peer library (redis-py's Lock, python-redis-lock or
redis-rw-lock) for the Rust harness, which spawns one such process per worker.

Protocol (one JSON object per line):
  stdin, first line: the job (see bench/src/worker.rs, `Job`); then "go T" (T: the start, in
  CLOCK_MONOTONIC seconds, the clock of Python's time.monotonic and of the harness), "stop".
  stdout: {"ev": "ready"} once set up; {"ev": "grant", ...} at the first grant if the job says
  "announce"; {"ev": "done", ...} with every request's times at the end.

The loop is the one the harness runs for its in-process contenders (worker.rs, `run_job`). A
watchdog ends the process at the job's hard limit, reporting what it has, since redis-rw-lock's
acquire cannot time out.
"""

import json
import math
import os
import sys
import threading
import time

import redis

out_lock = threading.Lock()
done_sent = False


def emit(obj, final=False):
    global done_sent
    with out_lock:
        if done_sent:
            return
        done_sent = final
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def whole_seconds(ms):
    """python-redis-lock and redis-rw-lock take whole seconds (int(expire))."""
    return max(1, math.ceil(ms / 1000))


class RedisPy:
    """redis-py's Lock: SET NX PX, then polling every `sleep` (0.1 s by default)."""

    def __init__(self, r, key, mode, ttl_ms):
        if mode != "write":
            raise ValueError("redis-py's Lock has no read mode")
        self.lock = r.lock(key, timeout=ttl_ms / 1000)

    def acquire(self, wait_s):
        if wait_s <= 0:
            return self.lock.acquire(blocking=False)
        return self.lock.acquire(blocking=True, blocking_timeout=wait_s)

    def release(self):
        self.lock.release()


class PythonRedisLock:
    """python-redis-lock: SET NX EX; a waiter blocks in BLPOP on a signal list that the
    release pushes to. Expire and timeout are whole seconds, and timeout <= expire."""

    def __init__(self, r, key, mode, ttl_ms):
        import redis_lock

        if mode != "write":
            raise ValueError("python-redis-lock has no read mode")
        self.expire = whole_seconds(ttl_ms)
        self.lock = redis_lock.Lock(r, key, expire=self.expire)

    def acquire(self, wait_s):
        if wait_s <= 0:
            return self.lock.acquire(blocking=False)
        deadline = time.monotonic() + wait_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self.lock.acquire(blocking=True, timeout=min(self.expire, math.ceil(left))):
                return True

    def release(self):
        self.lock.release()


class RedisRwLock:
    """redis-rw-lock: readers-writer lock with writer priority, built from python-redis-lock
    locks and counters. Its acquire blocks with no timeout and no try; expire is whole
    seconds and required (without it the library fails on EXPIRE key None)."""

    def __init__(self, r, key, mode, ttl_ms):
        from redis_rw_lock import RWLock

        m = RWLock.READ if mode == "read" else RWLock.WRITE
        self.lock = RWLock(r, key, m, expire=whole_seconds(ttl_ms))

    def acquire(self, wait_s):
        self.lock.acquire()
        return True

    def release(self):
        self.lock.release()


LIBS = {"redis-py": RedisPy, "python-redis-lock": PythonRedisLock, "redis-rw-lock": RedisRwLock}


def main():
    job = json.loads(sys.stdin.readline())
    r = redis.StrictRedis(host="127.0.0.1", port=job["port"], socket_timeout=None)
    r.ping()
    lib = LIBS[job["lib"]](r, job["key"], job["mode"], job["ttl_ms"])
    stop = threading.Event()
    go = [None]
    started = threading.Event()

    def commands():
        for line in sys.stdin:
            if line.startswith("go "):
                go[0] = float(line[3:])
                started.set()
            elif line.startswith("stop"):
                stop.set()
        stop.set()
        started.set()

    threading.Thread(target=commands, daemon=True).start()
    emit({"ev": "ready"})
    started.wait()
    if go[0] is None:
        return
    t_go = go[0]
    cpu0 = time.process_time()  # the loop's CPU, not the imports'
    hard = t_go + job["hard_s"]
    rec = {"ev": "done", "asked": [], "granted": [], "holds": [], "grants": 0, "error": None}
    pending = [None]

    def report(error=None):
        r = dict(rec)
        if pending[0] is not None and job["record"]:
            r["asked"] = rec["asked"] + [pending[0]]
            r["granted"] = rec["granted"] + [None]
        r["error"] = error
        r["cpu_s"] = time.process_time() - cpu0
        emit(r, final=True)

    def watchdog():
        time.sleep(max(0.0, hard - time.monotonic()))
        report()
        os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    sleep_until(t_go + job["offset_s"])
    stop_at = t_go + job["stop_s"]
    hold = job["hold_ms"] / 1000
    try:
        while not stop.is_set() and time.monotonic() < stop_at and rec["grants"] < job["max_grants"]:
            asked = time.monotonic()
            pending[0] = asked
            ok = lib.acquire(min(job["wait_s"], hard - asked))
            at = time.monotonic()
            pending[0] = None
            if job["record"]:
                rec["asked"].append(asked)
                rec["granted"].append(at if ok else None)
            if not ok:
                break
            rec["grants"] += 1
            if job["announce"] and rec["grants"] == 1:
                emit({"ev": "grant", "asked": asked, "at": at})
            if hold < 0:
                # The holder that dies: it never releases (the harness kills it).
                stop.wait(max(0.0, hard - time.monotonic()))
                break
            sleep_until(at + hold)
            if job["record"]:
                rec["holds"].append(time.monotonic() - at)
            lib.release()
            if not job["repeat"]:
                break
        report()
    except Exception as e:  # reported to the harness, which shows it in the table
        report(f"{type(e).__name__}: {e}")


def sleep_until(t):
    """time.sleep overshoots by ~0.1 ms; sleep short of t and spin the rest."""
    left = t - time.monotonic()
    if left > 0.0003:
        time.sleep(left - 0.0002)
    while time.monotonic() < t:
        pass


if __name__ == "__main__":
    main()

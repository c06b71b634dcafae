"""The conformance suite: every scenario of scenarios.json against every client of it, through
the clients' drivers (PROTOCOL.md). One function per scenario, parameters from the table."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, Iterator, List

import pytest
import redis
from driver import ROOT, TABLE, Driver, argv

sys.path.insert(0, str(ROOT / "python" / "tests"))
from servers import Sentinel, Server, free_port, raw, until  # noqa: E402

CLIENTS = sorted(TABLE["clients"])
_built: Dict[str, bool] = {}


def params(name: str) -> List[Any]:
    out = []
    for c in CLIENTS:
        spec = TABLE["clients"][c]
        marks = []
        if name in spec.get("skip", {}):
            marks.append(pytest.mark.skip(reason=f"{c}: {spec['skip'][name]}"))
        if name in spec.get("xfail", {}):
            marks.append(pytest.mark.xfail(reason=f"{c}: {spec['xfail'][name]}", strict=True))
        out.append(pytest.param(c, marks=marks, id=c))
    return out


def scenario(name: str) -> Dict[str, Any]:
    return dict(TABLE["scenarios"][name])


@pytest.fixture
def drivers() -> Iterator[Callable[[str], Driver]]:
    made: List[Driver] = []

    def make(client: str) -> Driver:
        if client not in _built and "build" in TABLE["clients"][client]:
            subprocess.run(argv(client, "build"), cwd=ROOT, check=True)
        _built[client] = True
        d = Driver(client)
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        s.stop()


def replication_has(port: int, text: bytes) -> bool:
    """Whether INFO replication of the server on ``port`` contains ``text`` (False while it
    cannot answer: loading, restarting)."""
    try:
        return text in raw(port, "INFO", "replication")  # type: ignore[operator]
    except (redis.RedisError, OSError):
        return False


def failover(sentinel_port: int) -> bool:
    """Asks for a failover; False while the sentinel has no replica it counts as good yet
    (NOGOODSLAVE: it has not seen the replica's state since discovering it)."""
    try:
        raw(sentinel_port, "SENTINEL", "FAILOVER", "mymaster")
        return True
    except redis.ResponseError as e:
        if "NOGOODSLAVE" in str(e):
            return False
        raise


def key(name: str, client: str) -> str:
    return f"conformance:{name}:{client}:{time.monotonic_ns()}"


def has_all(message: str, needles: List[str], **fmt: Any) -> None:
    low = message.lower()
    for n in needles:
        assert n.format(**fmt).lower() in low, f"{n.format(**fmt)!r} not in the error: {message!r}"


@pytest.mark.parametrize("client", params("fork_after_use"))
def test_fork_after_use(client: str, server: Server, drivers: Callable[[str], Driver]) -> None:
    s = scenario("fork_after_use")
    d = drivers(client)
    d.call("connect", url=server.url())
    for _ in range(s["rounds"]):
        k = key("fork", client)
        r = d.call(
            "fork",
            timeout=120,
            key=k,
            ttl_ms=s["ttl_ms"],
            children=s["children"],
            sections=s["sections"],
            hold_ms=s["hold_ms"],
            counter=k + ":inside",
        )
        assert r["overlaps"] == 0, f"two children inside the write lock at once: {r}"
        assert r["sections_failed"] == 0, f"sections failed: {r}"
        assert r["sections_ok"] == s["children"] * s["sections"]


@pytest.mark.parametrize("client", params("freeze_past_ttl"))
def test_freeze_past_ttl(client: str, server: Server, drivers: Callable[[str], Driver]) -> None:
    s = scenario("freeze_past_ttl")
    a, b = drivers(client), drivers(client)
    a.call("connect", url=server.url())
    b.call("connect", url=server.url())
    k = key("freeze", client)
    h = a.call("acquire", kind="write", key=k, ttl_ms=s["ttl_ms"], wait_ms=5000)
    a.signal(signal.SIGSTOP)
    try:
        time.sleep(s["freeze_ms"] / 1000)
        other = b.call("acquire", kind="write", key=k, ttl_ms=5000, wait_ms=5000)
        assert "handle" in other, "the frozen holder's lease lapsed on the server"
        assert other["token"] > h["token"]
    finally:
        a.signal(signal.SIGCONT)
    st = a.call("status", handle=h["handle"])
    assert st["held"] is False, f"thawed past its ttl, the guard still says held: {st}"
    w = a.call("wait_lost", handle=h["handle"], timeout_ms=3000)
    assert w["lost"] is True and w["elapsed_ms"] <= s["wait_lost_within_ms"], w
    end = a.ask("end", handle=h["handle"])
    assert not end["ok"] and end["error"]["kind"] == "lease_lost", (
        f"the section's end must say the hold was lost: {end}"
    )
    until(5, "the on_lost event", lambda: any(e["event"] == "lost" and e["handle"] == h["handle"] for e in a.events))
    b.call("release", handle=other["handle"])


@pytest.mark.parametrize("client", params("restart_empty"))
def test_restart_empty(client: str, drivers: Callable[[str], Driver]) -> None:
    s = scenario("restart_empty")
    srv = Server()
    try:
        a = drivers(client)
        a.call("connect", url=srv.url())
        k = key("restart", client)
        h = a.call("acquire", kind="write", key=k, ttl_ms=s["ttl_ms"], wait_ms=5000)
        srv.restart()
        w = a.call("wait_lost", handle=h["handle"], timeout_ms=s["lost_within_ms"])
        assert w["lost"] is True, f"the restarted server forgot the hold; the guard must see it: {w}"
        end = a.ask("end", handle=h["handle"])
        assert not end["ok"] and end["error"]["kind"] == "lease_lost", end
        again = a.call("acquire", kind="write", key=k, ttl_ms=s["ttl_ms"], wait_ms=10000)
        assert again.get("token", 0) > h["token"], f"a new grant after the restart has a higher token: {again}"
        a.call("release", handle=again["handle"])
    finally:
        srv.stop()


@pytest.mark.parametrize("client", params("restart_aof"))
def test_restart_aof(client: str, drivers: Callable[[str], Driver]) -> None:
    s = scenario("restart_aof")
    srv = Server(["--appendonly", "yes", "--appendfsync", "always"])
    try:
        a, b = drivers(client), drivers(client)
        a.call("connect", url=srv.url())
        k = key("aof", client)
        h = a.call("acquire", kind="write", key=k, ttl_ms=s["ttl_ms"], wait_ms=5000)
        srv.restart()
        b.call("connect", url=srv.url())
        other = b.call("acquire", kind="write", key=k, ttl_ms=s["ttl_ms"], wait_ms=0)
        assert other.get("granted") is False, f"the hold survived the restart: {other}"
        w = a.call("wait_lost", handle=h["handle"], timeout_ms=s["held_for_ms"])
        assert w["lost"] is False, f"the holder kept renewing across the restart: {w}"
        a.call("end", handle=h["handle"])
    finally:
        srv.stop()


@pytest.mark.parametrize("client", params("holder_killed"))
def test_holder_killed(client: str, server: Server, drivers: Callable[[str], Driver]) -> None:
    s = scenario("holder_killed")
    a, b = drivers(client), drivers(client)
    a.call("connect", url=server.url())
    b.call("connect", url=server.url())
    k = key("killed", client)
    h = a.call("acquire", kind="write", key=k, ttl_ms=s["ttl_ms"], wait_ms=5000)
    rid = b.send("acquire", kind="write", key=k, ttl_ms=s["ttl_ms"], wait_ms=30000)
    time.sleep(0.2)
    a.signal(signal.SIGKILL)
    t = time.monotonic()
    got = b.reply(rid, timeout=40)
    took = (time.monotonic() - t) * 1000
    assert got.get("ok") and "handle" in got, got
    assert got["token"] > h["token"]
    assert took <= s["granted_within_ms"], f"granted {took:.0f} ms after the kill"
    b.call("release", handle=got["handle"])


@pytest.mark.parametrize("client", params("no_module"))
def test_no_module(client: str, drivers: Callable[[str], Driver]) -> None:
    s = scenario("no_module")
    srv = Server(module=False)
    try:
        a = drivers(client)
        a.call("connect", url=srv.url())
        r = a.ask("acquire", kind="write", key="k", ttl_ms=5000, wait_ms=0)
        assert not r["ok"] and r["error"]["kind"] == "module_not_loaded", r
        has_all(r["error"]["message"], s["message_has"])
    finally:
        srv.stop()


@pytest.mark.parametrize("client", params("dead_server"))
def test_dead_server(client: str, drivers: Callable[[str], Driver]) -> None:
    s = scenario("dead_server")
    port = free_port()
    a = drivers(client)
    t = time.monotonic()
    r = a.ask("connect", url=f"redis://127.0.0.1:{port}/")
    if r["ok"]:
        r = a.ask("acquire", kind="write", key="k", ttl_ms=5000, wait_ms=0)
    took = (time.monotonic() - t) * 1000
    assert not r["ok"] and r["error"]["kind"] == "connection", r
    assert took <= s["within_ms"], f"a refused connection took {took:.0f} ms to report"
    has_all(r["error"]["message"], s["message_has"], port=port)


@pytest.mark.parametrize("client", params("ttl_above_max"))
def test_ttl_above_max(client: str, drivers: Callable[[str], Driver]) -> None:
    s = scenario("ttl_above_max")
    srv = Server(module_args=["max-ttl", str(s["max_ttl_ms"])])
    try:
        a = drivers(client)
        a.call("connect", url=srv.url())
        r = a.ask("acquire", kind="write", key="k", ttl_ms=s["ttl_ms"], wait_ms=0)
        assert not r["ok"] and r["error"]["kind"] == "ttl_too_long", r
        has_all(r["error"]["message"], s["message_has"] + [str(s["max_ttl_ms"])])
    finally:
        srv.stop()


@pytest.mark.parametrize("client", params("semaphore_codes"))
def test_semaphore_codes(client: str, server: Server, drivers: Callable[[str], Driver]) -> None:
    s = scenario("semaphore_codes")
    a = drivers(client)
    a.call("connect", url=server.url())
    k = key("sem", client)
    g = a.call(
        "acquire", kind="semaphore", key=k, ttl_ms=5000, wait_ms=0, limit=s["limit"], permits=s["permits"], owner="o1"
    )
    r = a.ask("acquire", kind="semaphore", key=k, ttl_ms=5000, wait_ms=0, limit=s["other_limit"], permits=1)
    assert not r["ok"] and r["error"]["kind"] == "limit", r
    r = a.ask(
        "acquire",
        kind="semaphore",
        key=k,
        ttl_ms=5000,
        wait_ms=0,
        limit=s["limit"],
        permits=s["other_permits"],
        owner="o1",
    )
    assert not r["ok"] and r["error"]["kind"] == "permits", r
    a.call("release", handle=g["handle"])


@pytest.mark.parametrize("client", params("sentinel_failover"))
def test_sentinel_failover(client: str, drivers: Callable[[str], Driver]) -> None:
    s = scenario("sentinel_failover")
    master = Server()
    replica = Server(["--replicaof", "127.0.0.1", str(master.port)])
    sentinel = None
    try:
        until(20, "the replica to sync", lambda: replication_has(replica.port, b"master_link_status:up"))
        sentinel = Sentinel(master.port)
        until(20, "the sentinel to find the replica", lambda: sentinel is not None and sentinel.replicas_known() == 1)
        url = f"redis+sentinel://127.0.0.1:{sentinel.port}/mymaster"
        a, b = drivers(client), drivers(client)
        a.call("connect", url=url)
        b.call("connect", url=url)
        k = key("failover", client)
        h = a.call("acquire", kind="write", key=k, ttl_ms=s["ttl_ms"], wait_ms=5000)
        raw(master.port, "WAIT", 1, 5000)
        until(20, "the sentinel to accept the failover", lambda: failover(sentinel.port), 0.2)
        until(
            30,
            "the sentinel to promote the replica",
            lambda: sentinel is not None and sentinel.master_port() == replica.port,
            0.1,
        )
        # And the old master demoted. Sentinel converts it on its next look, seconds later; until
        # then two masters answer, and a client still connected to the old one renews there (only
        # fencing tokens tell them apart: the README's High availability). The harness finishes
        # the failover at once, as Sentinel will, so that the check below is about the client.
        raw(master.port, "REPLICAOF", "127.0.0.1", replica.port)
        until(30, "the old master to be demoted", lambda: replication_has(master.port, b"role:slave"), 0.1)
        # The client follows the new master: a lock on another key is granted there.
        r = a.call(
            "acquire",
            kind="write",
            key=k + ":other",
            ttl_ms=s["ttl_ms"],
            wait_ms=s["follow_within_ms"],
            timeout=s["follow_within_ms"] / 1000 + 30,
        )
        assert "handle" in r, f"a new lock through the Sentinel URL after the failover: {r}"
        # Never two holders: if another process gets the lock, the first reports the loss.
        other = b.call("acquire", kind="write", key=k, ttl_ms=s["ttl_ms"], wait_ms=0, timeout=60)
        if "handle" in other:
            w = a.call("wait_lost", handle=h["handle"], timeout_ms=s["ttl_ms"])
            assert w["lost"], f"another process holds the lock and the first still says held: {w}"
        else:
            st = a.call("status", handle=h["handle"])
            assert st["held"], f"nobody else could take the lock, so the hold survived: {st}"
    finally:
        if sentinel is not None:
            sentinel.stop()
        replica.stop()
        master.stop()

"""The client at its edges (issue 21): a loss inside a ``with`` block raises at its end, a
frozen process sees its loss at once, failures are fast and say what is wrong, the semaphore's
refusals are typed, upgrade/downgrade, ``on_lost`` and the loss warning."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Iterator, List

import pytest
import redis
import redis.asyncio as aredis
import redis_lease.asyncio as alease
from redis_lease import (
    LeaseLost,
    LimitMismatch,
    LossReason,
    ModuleNotLoaded,
    PermitsMismatch,
    RwLock,
    Semaphore,
    TtlTooLong,
    Unavailable,
)
from servers import Server, free_port

CHILD = textwrap.dedent(
    """
    import sys, redis
    from redis_lease import LeaseLost, RwLock
    port, raise_on_lost = int(sys.argv[1]), sys.argv[2] == "1"
    lock = RwLock(redis.Redis(port=port), "freeze", ttl=1.0, raise_on_lost=raise_on_lost)
    lost = []
    try:
        with lock.write(timeout=5) as g:
            g.on_lost(lost.append)
            print("ready", flush=True)
            # Frozen inside this wait, for longer than both the wait and the ttl.
            print("wait_lost", g.wait_lost(timeout=0.8), flush=True)
        print("exit normal", flush=True)
    except LeaseLost as e:
        print("exit LeaseLost", e.reason.name, flush=True)
    print("on_lost", [r.name for r in lost], flush=True)
    """
)


def _frozen_child(server: Server, raise_on_lost: bool) -> List[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(server.port), "1" if raise_on_lost else "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.1)  # inside wait_lost now
        os.kill(child.pid, signal.SIGSTOP)
        try:
            time.sleep(2.5)  # past the ttl (1 s): the server lets another holder in
            other = RwLock(server.client(), "freeze", ttl=5.0).try_write()
            assert other is not None, "the frozen holder's lease lapsed on the server"
        finally:
            os.kill(child.pid, signal.SIGCONT)
        out, _ = child.communicate(timeout=20)
        other.release()
        return out.split("\n")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_with_block_frozen_past_its_ttl_raises_lease_lost_at_its_end(server: Server) -> None:
    lines = _frozen_child(server, raise_on_lost=True)
    assert "wait_lost True" in lines, f"wait_lost answered from the lease's deadline: {lines}"
    assert any(x.startswith("exit LeaseLost") for x in lines), lines
    assert any(x.startswith("on_lost ['") for x in lines), f"on_lost was called: {lines}"


def test_raise_on_lost_false_opts_out(server: Server) -> None:
    lines = _frozen_child(server, raise_on_lost=False)
    assert "wait_lost True" in lines, lines
    assert "exit normal" in lines, lines


def test_a_block_that_raised_keeps_its_own_error(r: "redis.Redis[bytes]") -> None:
    lock = RwLock(r, "lost-and-raised", ttl=5.0)
    with pytest.raises(KeyError):
        with lock.write() as g:
            r.delete("lost-and-raised")
            assert g.wait_lost(timeout=0) is False  # not noticed yet: the next renewal will
            with pytest.raises(LeaseLost):
                g.exec("SET", "lost-and-raised:data", "x")  # FENCED: the guard is lost now
            raise KeyError("mine")


def test_a_release_inside_the_block_is_no_loss(r: "redis.Redis[bytes]") -> None:
    with RwLock(r, "released-inside", ttl=5.0).write() as g:
        assert g.release()


def test_the_loss_is_logged_and_calls_on_lost(r: "redis.Redis[bytes]", caplog: pytest.LogCaptureFixture) -> None:
    g = RwLock(r, "logged", ttl=0.6).write()
    got: List[LossReason] = []
    g.on_lost(got.append)
    with caplog.at_level(logging.WARNING, logger="redis_lease"):
        r.delete("logged")
        assert g.wait_lost(timeout=3.0)
        deadline = time.monotonic() + 2
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
    assert got == [LossReason.REVOKED]
    assert any("is lost" in m and "logged" in m for m in caplog.messages), caplog.messages
    late: List[LossReason] = []
    g.on_lost(late.append)
    assert late == [LossReason.REVOKED], "registered after the loss: called at once"
    g.release()


def test_a_try_against_a_refused_port_fails_fast_and_says_where_and_why() -> None:
    port = free_port()
    lock = RwLock(redis.Redis(port=port), "nobody", ttl=5.0)
    t = time.monotonic()
    with pytest.raises(Unavailable) as e:
        lock.try_write()
    assert time.monotonic() - t < 2.5, "a refused connection is not retried for 30 s"
    assert f"127.0.0.1:{port}" in str(e.value) or f"localhost:{port}" in str(e.value), str(e.value)
    assert "connection refused" in str(e.value).lower(), str(e.value)


async def test_an_async_try_against_a_refused_port_fails_fast() -> None:
    port = free_port()
    client = aredis.Redis(port=port)
    t = time.monotonic()
    with pytest.raises(Unavailable) as e:
        await alease.RwLock(client, "nobody", ttl=5.0).try_write()
    assert time.monotonic() - t < 2.5
    assert str(port) in str(e.value) and "refused" in str(e.value).lower(), str(e.value)
    await client.aclose()


@pytest.fixture(scope="module")
def bare() -> Iterator[Server]:
    s = Server(module=False)
    try:
        yield s
    finally:
        s.stop()


def test_a_server_without_the_module_says_so_and_how_to_load_it(bare: Server) -> None:
    with pytest.raises(ModuleNotLoaded) as e:
        RwLock(bare.client(), "k", ttl=5.0).try_write()
    msg = str(e.value)
    assert "not loaded" in msg and "loadmodule" in msg and f"127.0.0.1:{bare.port}" in msg, msg


async def test_async_without_the_module(bare: Server) -> None:
    client = aredis.Redis(port=bare.port)
    with pytest.raises(ModuleNotLoaded):
        await alease.Semaphore(client, "k", limit=2, ttl=5.0).try_acquire()
    await client.aclose()


@pytest.fixture(scope="module")
def capped() -> Iterator[Server]:
    s = Server(module_args=["max-ttl", "60000"])
    try:
        yield s
    finally:
        s.stop()


def test_a_ttl_above_max_ttl_is_refused_with_its_unit(capped: Server) -> None:
    # ttl=5000 meant as ms is 5000 s: above this server's lease.max-ttl of 60 s.
    with pytest.raises(TtlTooLong) as e:
        RwLock(capped.client(), "k", ttl=5000).try_write()
    msg = str(e.value)
    assert e.value.max_ms == 60000 and e.value.ttl_ms == 5000000
    assert "60000 ms" in msg and "seconds" in msg, msg
    with pytest.raises(TtlTooLong):
        Semaphore(capped.client(), "s", limit=1, ttl=5000).try_acquire()


def test_semaphore_refusals_are_typed(r: "redis.Redis[bytes]") -> None:
    g = Semaphore(r, "typed", limit=2, ttl=5.0, owner="o1").acquire(permits=1)
    with pytest.raises(LimitMismatch):
        Semaphore(r, "typed", limit=3, ttl=5.0).try_acquire()
    with pytest.raises(PermitsMismatch):
        Semaphore(r, "typed", limit=2, ttl=5.0, owner="o1").try_acquire(permits=2)
    g.release()


def test_upgrade_and_downgrade_keep_the_hold(r: "redis.Redis[bytes]") -> None:
    lock = RwLock(r, "updown", ttl=5.0)
    g = lock.read()
    read_token = g.token
    assert g.upgrade(timeout=0)
    assert g.mode == "write" and g.token > read_token
    assert lock.try_read() is None, "no reader while it writes"
    assert g.exec("SET", "updown:data", "w") == b"OK"
    g.downgrade()
    assert g.mode == "read" and g.held
    other = lock.try_read()
    assert other is not None, "readers are let in after the downgrade"
    assert lock.try_write() is None
    other.release()
    assert g.release()
    assert not lock.info().holders, "every hold of the guard was released"
    # A writer downgrades and releases too.
    w = lock.write()
    w.downgrade()
    assert lock.try_write() is None
    w.release()
    assert not lock.info().holders


def test_upgrade_waits_for_the_other_reader(r: "redis.Redis[bytes]") -> None:
    lock = RwLock(r, "updown2", ttl=5.0)
    a, b = lock.read(), lock.read()
    assert not a.upgrade(timeout=0), "another reader holds it"
    b.release()
    assert a.upgrade(timeout=2.0)
    a.release()


async def test_async_parity(server: Server) -> None:
    assert alease.LeaseTiming.of(3.0).ttl_ms == 3000
    client = aredis.Redis(port=server.port)
    lock = alease.RwLock(client, "async-parity", ttl=5.0)
    task = asyncio.create_task(lock.write())
    g = await task
    assert g.held
    got: List[LossReason] = []
    g.on_lost(got.append)
    await g.downgrade()
    assert g.mode == "read"
    assert await g.upgrade(timeout=1.0)
    assert g.mode == "write"
    await client.delete("async-parity")
    assert await g.wait_lost(timeout=5.0)
    assert got == [LossReason.REVOKED]
    with pytest.raises(LeaseLost, match="lost during the async with block"):
        async with lock.write() as g2:
            await client.delete("async-parity")
            with pytest.raises(LeaseLost):
                await g2.exec("GET", "x")
    await g.release()
    await client.aclose()


class _Jump:
    """``time`` for redis_lease.guards, with the monotonic clock moved on by ``offset``: what a
    process frozen (SIGSTOP) inside a wait sees when it wakes, while the watchdog has not run."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


def test_wait_lost_answers_from_the_deadline_when_a_freeze_hits_inside_it(
    r: "redis.Redis[bytes]", monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import redis_lease.guards as guards

    g = RwLock(r, "freeze-inside", ttl=1.0).write()
    clock = _Jump()
    monkeypatch.setattr(guards, "time", clock)
    real = g._state.lost  # noqa: SLF001

    class Frozen(threading.Event):
        def wait(self, timeout: "float | None" = None) -> bool:
            got = real.wait(min(timeout or 0.0, 0.05))
            clock.offset += 5.0  # frozen here, past both the wait's end and the lease's bound
            return got

    monkeypatch.setattr(g._state, "lost", Frozen())  # noqa: SLF001
    assert g.wait_lost(timeout=0.5) is True, "past the lease's deadline: lost, whatever the watchdog did"
    monkeypatch.undo()
    g.release()

"""Fixtures: one real redis-server with the module per test module (``server``), a client on
it (``r``), and the ONE gate for tests of module commands that are specified but not built
yet (the ``needs_command`` marker)."""

from __future__ import annotations

import os
from typing import Iterator

import pytest
import redis

from servers import Server


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server(["--enable-debug-command", "yes"])
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def r(server: Server) -> Iterator["redis.Redis[bytes]"]:
    c = server.client()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(autouse=True)
def _command_gate(request: pytest.FixtureRequest) -> None:
    """``@pytest.mark.needs_command("semaphore.acquire")``: skip the test when the module under
    test lacks that command (``COMMAND INFO name`` answers nil). With REDIS_LEASE_REQUIRE_ALL=1
    a missing command fails the test instead. This is the only gate: once the module has the
    command, the tests run by themselves (and the marker can be deleted)."""
    marker = request.node.get_closest_marker("needs_command")
    if marker is None:
        return
    srv: Server = request.getfixturevalue("server")
    for name in marker.args:
        if not srv.has_command(name):
            msg = f"the module under test has no {name.upper()} yet"
            if os.environ.get("REDIS_LEASE_REQUIRE_ALL") == "1":
                pytest.fail(msg)
            pytest.skip(msg)

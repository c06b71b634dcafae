"""Fixtures: one real redis-server with the module per test module (``server``), and a client
on it (``r``)."""

from __future__ import annotations

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

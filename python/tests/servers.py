"""Real redis-server processes with the redis-lease module, on free loopback ports, each in its
own temporary directory, stopped by pid (the Python twin of testkit/).

Environment: ``REDIS_SERVER`` names the server binary (default ``redis-server``),
``REDIS_LEASE_MODULE`` the module (default ``target/release/libredis_lease.so`` of the repo,
or of ``CARGO_TARGET_DIR``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import redis

ROOT = Path(__file__).resolve().parents[2]


def module_path() -> Path:
    env = os.environ.get("REDIS_LEASE_MODULE")
    if env:
        return Path(env)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    if not target.is_absolute():
        target = ROOT / target
    return target / "release" / "libredis_lease.so"


def server_binary() -> str:
    return os.environ.get("REDIS_SERVER", "redis-server")


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the OS picks it; a race is possible, so starts retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(limit: float, what: str, ok: Callable[[], bool], every: float = 0.05) -> None:
    """Polls ``ok`` until it holds; fails after ``limit`` seconds."""
    end = time.monotonic() + limit
    while not ok():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {limit}s waiting for {what}")
        time.sleep(every)


def raw(port: int, *args: object) -> object:
    """One command on a fresh plain connection, reply unparsed (no redis-py callbacks)."""
    c = redis.Connection(host="127.0.0.1", port=port, socket_timeout=10)
    try:
        c.send_command(*args)
        return c.read_response()
    finally:
        c.disconnect()


def text(v: object) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


class Server:
    """A running redis-server with the module (``module=False``: without it)."""

    def __init__(self, args: Sequence[str] = (), module: bool = True, module_args: Sequence[str] = ()) -> None:
        self.args = list(args)
        self.module = module
        self.module_args = list(module_args)
        self.dir = tempfile.mkdtemp(prefix="redis-lease-py-")
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.port = 0
        last = ""
        for _ in range(5):
            self.port = free_port()
            try:
                self._spawn()
                return
            except RuntimeError as e:
                last = str(e)
        shutil.rmtree(self.dir, ignore_errors=True)
        raise RuntimeError(f"redis-server did not start: {last}")

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not running"
        return self.proc.pid

    def _spawn(self) -> None:
        cmd = [
            server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.dir,
            "--logfile",
            "redis.log",
            "--save",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
        ]
        if self.module:
            mod = module_path()
            if not mod.exists():
                raise RuntimeError(f"module {mod} not built: run `make` first")
            cmd += ["--loadmodule", str(mod), *self.module_args]
        cmd += self.args
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        end = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError(f"redis-server exited; log:\n{self.log()}")
            try:
                c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5)
                if c.ping():
                    c.close()
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > end:
                self.kill9()
                raise RuntimeError(f"redis-server not ready; log:\n{self.log()}")
            time.sleep(0.02)

    def log(self) -> str:
        try:
            return (Path(self.dir) / "redis.log").read_text(errors="replace")
        except OSError:
            return ""

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/"

    def client(self, **kw: object) -> "redis.Redis[bytes]":
        kw.setdefault("socket_timeout", 10)
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)  # type: ignore[arg-type]

    def raw(self, *args: object) -> object:
        return raw(self.port, *args)

    def kill9(self) -> None:
        """SIGKILL (no shutdown save), and wait for the exit."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def restart(self) -> None:
        """Starts again on the same port and directory."""
        self.kill9()
        self._spawn()

    def freeze(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)  # a frozen server cannot die of SIGKILL late
            except OSError:
                pass
        self.kill9()
        shutil.rmtree(self.dir, ignore_errors=True)


def cluster_nodes(port: int) -> List[Dict[str, object]]:
    """``CLUSTER NODES`` seen from ``port``, as dicts: id, port, master, master_id, slots."""
    lines = text(raw(port, "CLUSTER", "NODES"))
    out: List[Dict[str, object]] = []
    for line in lines.splitlines():
        f = line.split()
        if not f:
            continue
        slots: List[Tuple[int, int]] = []
        for s in f[8:]:
            if s.startswith("["):
                continue
            lo, _, hi = s.partition("-")
            slots.append((int(lo), int(hi or lo)))
        out.append(
            {
                "id": f[0],
                "port": int(f[1].split("@")[0].rsplit(":", 1)[1]),
                "master": "master" in f[2],
                "master_id": f[3],
                "slots": slots,
            }
        )
    return out


class Cluster:
    """3 masters and 3 replicas, the module on every node, joined by ``redis-cli --cluster create``."""

    def __init__(self) -> None:
        args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "3000",
            "--appendonly",
            "no",
        ]
        self.nodes: List[Server] = []
        try:
            for _ in range(6):
                self.nodes.append(Server(args))
            out = subprocess.run(
                [
                    "redis-cli",
                    "--cluster",
                    "create",
                    *[f"127.0.0.1:{n.port}" for n in self.nodes],
                    "--cluster-replicas",
                    "1",
                    "--cluster-yes",
                ],
                capture_output=True,
                timeout=60,
            )
            assert out.returncode == 0, out.stdout.decode(errors="replace")
            for n in self.nodes:
                until(30, "cluster_state:ok", lambda n=n: "cluster_state:ok" in text(n.raw("CLUSTER", "INFO")), 0.1)

                def agreed(port: int = n.port) -> bool:
                    nodes = cluster_nodes(port)
                    return (
                        sum(1 for x in nodes if x["master"] and x["slots"]) == 3
                        and sum(1 for x in nodes if not x["master"]) == 3
                    )

                until(30, "every node to agree on roles", agreed, 0.1)
        except BaseException:
            self.stop()
            raise

    def node(self, port: int) -> Server:
        return next(n for n in self.nodes if n.port == port)

    def urls(self) -> List[str]:
        return [n.url() for n in self.nodes]

    def owner_of(self, key: str) -> Dict[str, object]:
        port = self.nodes[0].port
        slot = int(raw(port, "CLUSTER", "KEYSLOT", key))  # type: ignore[call-overload]
        for n in cluster_nodes(port):
            if n["master"] and any(lo <= slot <= hi for lo, hi in n["slots"]):  # type: ignore[attr-defined]
                return n
        raise AssertionError(f"no master serves slot {slot}")

    def fail_over(self, key: str) -> Dict[str, object]:
        """Fails the master serving ``key`` over to its replica (after the replica acknowledged
        every write) and waits until the whole cluster agrees. Answers the new master."""
        master = self.owner_of(key)
        mport = int(master["port"])  # type: ignore[call-overload]
        assert raw(mport, "WAIT", 1, 5000) == 1, "the replica has every write"
        replica = next(n for n in cluster_nodes(mport) if not n["master"] and n["master_id"] == master["id"])
        rport = int(replica["port"])  # type: ignore[call-overload]
        raw(rport, "CLUSTER", "FAILOVER")
        until(30, "the replica to take over", lambda: "role:master" in text(raw(rport, "INFO", "replication")), 0.1)
        until(30, "the cluster to agree", lambda: self.owner_of(key)["id"] == replica["id"], 0.1)
        return replica

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


class Sentinel:
    """One Redis Sentinel on a free loopback port, monitoring ``master_port`` as ``mymaster``
    (quorum 1), started as ``redis-server sentinel.conf --sentinel``."""

    def __init__(self, master_port: int, name: str = "mymaster") -> None:
        self.name = name
        self.dir = tempfile.mkdtemp(prefix="redis-lease-py-sentinel-")
        self.proc: Optional[subprocess.Popen[bytes]] = None
        last = ""
        for _ in range(5):
            self.port = free_port()
            conf = Path(self.dir) / "sentinel.conf"
            conf.write_text(
                f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\nlogfile sentinel.log\n"
                f"sentinel monitor {name} 127.0.0.1 {master_port} 1\n"
                f"sentinel down-after-milliseconds {name} 2000\n"
                f"sentinel failover-timeout {name} 10000\n"
            )
            self.proc = subprocess.Popen(
                [server_binary(), str(conf), "--sentinel"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                until(20, "sentinel to answer", lambda: self.master_port() == master_port)
                return
            except AssertionError as e:
                last = str(e)
                self.stop(keep_dir=True)
        raise RuntimeError(f"redis-sentinel did not start: {last}")

    def master_port(self) -> Optional[int]:
        try:
            addr = raw(self.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.name)
        except (redis.RedisError, OSError):
            return None
        return int(addr[1]) if isinstance(addr, list) and len(addr) == 2 else None  # type: ignore[call-overload]

    def replicas_known(self) -> int:
        reps = raw(self.port, "SENTINEL", "REPLICAS", self.name)
        return len(reps) if isinstance(reps, list) else 0

    def stop(self, keep_dir: bool = False) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

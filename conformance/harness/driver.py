"""A client's conformance driver as a child process: requests out, replies and events in
(PROTOCOL.md)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[2]
# CONFORMANCE_TABLE: another table (e.g. one client's entry under development).
TABLE = json.loads(Path(os.environ.get("CONFORMANCE_TABLE", ROOT / "conformance" / "scenarios.json")).read_text())


def argv(client: str, key: str) -> List[str]:
    return [a.replace("{python}", sys.executable).replace("{root}", str(ROOT)) for a in TABLE["clients"][client][key]]


class DriverError(AssertionError):
    pass


class Driver:
    """One driver process of ``client``."""

    def __init__(self, client: str) -> None:
        self.client = client
        self.proc = subprocess.Popen(
            argv(client, "driver"),
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.replies: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        self.events: List[Dict[str, Any]] = []
        self.stderr: List[str] = []
        self.n = 0
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        hello = self.call("hello")
        self.capabilities = set(hello.get("capabilities", []))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                self.stderr.append(f"(not JSON on stdout) {line}")
                continue
            if "event" in msg:
                self.events.append(msg)
            else:
                self.replies.put(msg)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def send(self, op: str, **fields: Any) -> int:
        self.n += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": self.n, "op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        return self.n

    def reply(self, rid: int, timeout: float = 30.0) -> Dict[str, Any]:
        try:
            msg = self.replies.get(timeout=timeout)
        except queue.Empty:
            raise DriverError(
                f"{self.client} driver: no reply to request {rid} in {timeout}s; stderr: {''.join(self.stderr[-20:])}"
            )
        if msg.get("id") != rid:
            raise DriverError(f"{self.client} driver: reply {msg} to request {rid}")
        return msg

    def ask(self, op: str, timeout: float = 30.0, **fields: Any) -> Dict[str, Any]:
        """The reply, success or failure."""
        return self.reply(self.send(op, **fields), timeout)

    def call(self, op: str, timeout: float = 30.0, **fields: Any) -> Dict[str, Any]:
        """The reply of a request that must succeed."""
        r = self.ask(op, timeout, **fields)
        if not r.get("ok"):
            raise DriverError(f"{self.client} driver: {op} {fields} failed: {r.get('error')}")
        return r

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.kill()
            except OSError:
                pass
        self.proc.wait(10)

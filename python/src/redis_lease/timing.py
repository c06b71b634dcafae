"""Lease timing: the ttl as the server takes it, the renewal period and the drift margin."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

#: The longest ``WAIT`` the module accepts, in ms.
MAX_WAIT_MS = 10**12


def seconds_to_ms(seconds: float, what: str = "ttl") -> int:
    """Whole milliseconds for the server, rounded up (never down), at least 1.

    >>> seconds_to_ms(1.1), seconds_to_ms(0.0001), seconds_to_ms(5)
    (1100, 1, 5000)
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{what} must be a positive, finite number of seconds, not {seconds!r}")
    # round() first so that float noise (1.1 * 1000 == 1100.0000000000002) does not add a ms.
    return max(1, math.ceil(round(seconds * 1000.0, 6)))


@dataclass(frozen=True)
class LeaseTiming:
    """Timing of one lease, as the Rust client's ``LeaseTiming``: renewal every third of the
    ttl, drift margin 1% of the ttl + 2 ms. All values in seconds.

    >>> t = LeaseTiming.of(3.0)
    >>> t.ttl_ms, t.renew_every, round(t.margin, 6)
    (3000, 1.0, 0.032)
    """

    ttl: float
    renew_every: float
    drift_factor: float = 0.01
    drift_floor: float = 0.002

    @classmethod
    def of(cls, ttl: float, renew_every: Optional[float] = None) -> "LeaseTiming":
        """Timing for ``ttl`` seconds; raises ``ValueError`` for a ttl that leaves no room."""
        ms = seconds_to_ms(ttl)
        t = cls(ttl=ms / 1000.0, renew_every=(ms / 1000.0) / 3 if renew_every is None else renew_every)
        t.check()
        return t

    @property
    def ttl_ms(self) -> int:
        """The ttl in whole ms, as sent to the server."""
        return seconds_to_ms(self.ttl)

    @property
    def margin(self) -> float:
        """The drift margin subtracted from every validity bound."""
        return self.ttl * min(max(self.drift_factor, 0.0), 0.5) + self.drift_floor

    def valid_until(self, sent: float) -> float:
        """The validity bound of a lease granted or renewed by a request sent at ``sent``
        (a ``time.monotonic()`` instant): send time + ttl - margin."""
        return sent + max(self.ttl_ms / 1000.0 - self.margin, 0.0)

    def confirm_deadline(self, sent: float, now: float, command_timeout: float) -> float:
        """How long to try confirming a fresh grant with a renewal: until its own validity
        bound, and at least one command timeout (the bound may have passed in the queue)."""
        return max(self.valid_until(sent), now + command_timeout)

    def check(self) -> None:
        if self.margin >= self.ttl:
            raise ValueError(f"the drift margin {self.margin:.4f}s leaves nothing of the ttl {self.ttl}s")
        if self.renew_every < 0.001 or self.renew_every + self.margin >= self.ttl:
            raise ValueError(
                f"renew_every {self.renew_every}s must be at least 1 ms and leave the drift "
                f"margin {self.margin:.4f}s of the ttl {self.ttl}s"
            )


def wait_ms(seconds: float) -> int:
    """A ``WAIT`` argument for ``seconds`` left (whole ms, rounded down, within the server's
    range)."""
    return int(min(max(seconds * 1000.0, 1.0), MAX_WAIT_MS))

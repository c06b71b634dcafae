"""What a guard does when its lease is lost: a ``logging`` warning on the ``redis_lease``
logger, then the guard's ``on_lost`` callbacks (each once, errors logged, never raised into the
watchdog)."""

from __future__ import annotations

import logging
from typing import Any, Callable, List

from .errors import LossReason

log = logging.getLogger("redis_lease")

#: An ``on_lost`` callback: called once with the reason of the loss.
OnLost = Callable[[LossReason], Any]


def announce(key: Any, token: int, reason: LossReason, callbacks: List[OnLost]) -> None:
    log.warning("redis-lease: the lease on %r (token %d) is lost: %s", key, token, reason)
    for cb in callbacks:
        try:
            cb(reason)
        except Exception:  # noqa: BLE001 - a failing callback must not stop the others
            log.exception("redis-lease: an on_lost callback for %r failed", key)

"""redis-lease: distributed read-write locks, leader election and semaphores with a lease per
holder and fencing tokens, on the redis-lease Redis module. Sync API (threads); the same on
asyncio in :mod:`redis_lease.asyncio`.

>>> import redis
>>> from redis_lease import RwLock
>>> lock = RwLock(redis.Redis(), "orders", ttl=5.0)  # doctest: +SKIP
>>> with lock.write(timeout=10.0) as guard:           # doctest: +SKIP
...     guard.token
"""

from .connector import Connector
from .errors import (
    Deadlock,
    Fenced,
    LeaseError,
    LeaseLost,
    LimitMismatch,
    LockGone,
    LossReason,
    MaxHold,
    ModuleNotLoaded,
    NotAcquired,
    PermitsMismatch,
    ProtocolError,
    TtlTooLong,
    Unavailable,
)
from .guards import Guard, Leadership, LockGuard, MultiGuard, SemaphoreGuard
from .leader import LeaderElector, LeaderObserver, current_leader, election_info
from .lock import RwLock
from .multi import MultiLock
from .replies import ElectionInfo, Holder, LeaderInfo, LockInfo, SemaphoreInfo, Waiting
from .retry import RetryPolicy
from .semaphore import Semaphore
from .timing import LeaseTiming

__version__ = "0.1.0"

__all__ = [
    "Connector",
    "Deadlock",
    "ElectionInfo",
    "Fenced",
    "Guard",
    "Holder",
    "LeaderElector",
    "LeaderInfo",
    "LeaderObserver",
    "Leadership",
    "LeaseError",
    "LeaseLost",
    "LeaseTiming",
    "LimitMismatch",
    "LockGone",
    "LockGuard",
    "LockInfo",
    "LossReason",
    "MaxHold",
    "ModuleNotLoaded",
    "MultiGuard",
    "MultiLock",
    "NotAcquired",
    "PermitsMismatch",
    "ProtocolError",
    "RetryPolicy",
    "RwLock",
    "Semaphore",
    "SemaphoreGuard",
    "SemaphoreInfo",
    "TtlTooLong",
    "Unavailable",
    "Waiting",
    "current_leader",
    "election_info",
]

"""The same API as :mod:`redis_lease`, on ``redis.asyncio``::

import redis.asyncio as redis
from redis_lease.asyncio import RwLock

lock = RwLock(redis.Redis(), "orders", ttl=5.0)
async with lock.write(timeout=10.0) as guard:
    guard.token, guard.lost   # lost is an asyncio.Event
"""

from ..errors import (
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
from ..replies import ElectionInfo, Holder, LeaderInfo, LockInfo, SemaphoreInfo, Waiting
from ..retry import RetryPolicy
from ..timing import LeaseTiming
from .connector import Connector
from .guards import Acquiring, Guard, Leadership, LockGuard, MultiGuard, SemaphoreGuard
from .leader import LeaderElector, LeaderObserver, current_leader, election_info
from .lock import RwLock
from .multi import MultiLock
from .semaphore import Semaphore

__all__ = [
    "Acquiring",
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

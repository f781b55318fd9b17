"""The bounds and times of pop consumption, with Apache's proxy's defaults where they suit a local broker."""

from __future__ import annotations

from dataclasses import dataclass

#: most messages one receive delivers (a larger batch size asks for fewer)
MAX_BATCH_SIZE = 1024
#: most FIFO messages of a queue examined and waiting for their message group; beyond, the queue waits
MAX_HELD_PER_QUEUE = 4096
#: a push consumer's client that is no member of its group for this long has left it
CLIENT_GONE_GRACE_MS = 15_000


@dataclass(frozen=True, slots=True)
class PopSettings:
    # invisible durations a receive may ask (Apache's proxy refuses less than 10 s; short ones keep
    # local tests and demos quick) and a change of one may set
    min_invisible_ms: int = 1_000
    max_invisible_ms: int = 12 * 3_600_000
    # the longest a receive waits for messages (Apache: grpcClientConsumerMaxLongPollingTimeoutMillis)
    max_long_polling_ms: int = 20_000
    # a push consumer's message (auto_renew) is invisible this long at a time, renewed this long
    # before that passes while its client stays in the group, at most renew_max_ms in all; once
    # the client left, it is visible again after clear_ms (Apache's renewSliceTimeMillis,
    # renewAheadTimeMillis, renewMaxTimeMillis, invisibleTimeMillisWhenClear)
    renew_slice_ms: int = 60_000
    renew_ahead_ms: int = 10_000
    renew_max_ms: int = 3 * 3_600_000
    clear_ms: int = 1_000
    # receives waiting at once (the 4.x side's maxHeldPullRequests)
    max_waiting: int = 20_000

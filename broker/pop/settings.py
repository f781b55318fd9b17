"""The bounds and times of pop consumption, from broker.conf (broker/config.py names the keys)."""

from __future__ import annotations

from dataclasses import dataclass

from broker.config import BrokerConfig

#: most messages one receive delivers (a larger batch size asks for fewer)
MAX_BATCH_SIZE = 1024
#: most FIFO messages of a queue examined and waiting for their message group; beyond, the queue waits
MAX_HELD_PER_QUEUE = 4096
#: a push consumer's client that is no member of its group for this long has left it
CLIENT_GONE_GRACE_MS = 15_000


@dataclass(frozen=True, slots=True)
class PopSettings:
    # invisible durations a receive may ask, and a change of one may set
    min_invisible_ms: int
    max_invisible_ms: int
    # the longest a receive waits for messages (Apache: grpcClientConsumerMaxLongPollingTimeoutMillis)
    max_long_polling_ms: int
    # a push consumer's message (auto_renew) is invisible this long at a time, renewed this long
    # before that passes while its client stays in the group, at most renew_max_ms in all; once
    # the client left, it is visible again after clear_ms
    renew_slice_ms: int
    renew_ahead_ms: int
    renew_max_ms: int
    clear_ms: int
    # receives waiting at once (the 4.x side's maxHeldPullRequests)
    max_waiting: int

    @classmethod
    def of(cls, config: BrokerConfig) -> PopSettings:
        return cls(
            min_invisible_ms=config.min_invisible_time_mills_for_recv,
            max_invisible_ms=config.max_invisible_time_mills,
            max_long_polling_ms=config.grpc_client_consumer_max_long_polling_timeout_millis,
            renew_slice_ms=config.renew_slice_time_millis,
            renew_ahead_ms=config.renew_ahead_time_millis,
            renew_max_ms=config.renew_max_time_millis,
            clear_ms=config.invisible_time_millis_when_clear,
            max_waiting=config.max_held_pull_requests,
        )

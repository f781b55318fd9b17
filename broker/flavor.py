"""The two flavors of the bundled broker (broker.conf `flavor`), and Apache 4.9's time search.

`rocketspark` (the default) is this project's broker. `apache` answers as Apache RocketMQ 4.9 does
wherever a client could tell: no extension request codes, no duplicate window, Apache's pull caps,
SEARCH_OFFSET_BY_TIMESTAMP by the nearest entry (`nearest_entry`) and Apache's transaction check
and END_TRANSACTION (broker/transaction/apache.py). docs/operations.md lists each difference with
the Apache class that behaves so.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.store.config import StoreConfig

#: Apache 4.9's MessageStoreConfig defaults for one pull of messages still in memory
APACHE_MAX_TRANSFER_COUNT = 32
APACHE_MAX_TRANSFER_BYTES = 256 * 1024


class Flavor(enum.Enum):
    """broker.conf `flavor`; given by name, as every enum setting."""

    rocketspark = "rocketspark"
    apache = "apache"


def flavored(config: BrokerConfig, store_config: StoreConfig) -> tuple[BrokerConfig, StoreConfig]:
    """The settings a broker of `config.flavor` runs with: unchanged for `rocketspark`; for `apache`,
    the Arrow extension off (its request codes are then answered as unknown ones), pulls capped at
    Apache's in-memory defaults and the duplicate window off (every send stored)."""
    if config.flavor is Flavor.rocketspark:
        return config, store_config
    apache = dataclasses.replace(
        config,
        arrow_enable=False,
        max_transfer_count_on_message_in_memory=APACHE_MAX_TRANSFER_COUNT,
        max_transfer_bytes_on_message_in_memory=APACHE_MAX_TRANSFER_BYTES,
    )
    return apache, dataclasses.replace(store_config, duplicate_window_seconds=0)


async def nearest_entry(store_time_at: Callable[[int], Awaitable[int]], low: int, high: int, timestamp: int) -> int:
    """Apache 4.9's answer to SEARCH_OFFSET_BY_TIMESTAMP over the entries [low, high) of a queue
    whose store times `store_time_at(offset)` gives (`ConsumeQueue.getOffsetInQueueByTime`).

    A binary search by store time (middle entry rounded down): the first entry it probes stored
    exactly at `timestamp` (not necessarily the first of equal times); else, of the last entries
    probed below and above the time, the nearer one, ties to the earlier; when every entry is older,
    the last (high - 1); when every one is newer, the first (low). An empty range answers `low`.
    """
    below: tuple[int, int] | None = None  # (offset, store time) of the last probe before the time
    above: tuple[int, int] | None = None  # and after it
    first, last = low, high - 1
    while first <= last:
        middle = (first + last) // 2
        stored = await store_time_at(middle)
        if stored == timestamp:
            return middle
        if stored > timestamp:
            above = (middle, stored)
            last = middle - 1
        else:
            below = (middle, stored)
            first = middle + 1
    if below is None:
        return low if above is None else above[0]
    if above is None:
        return below[0]
    return above[0] if timestamp - below[1] > above[1] - timestamp else below[0]

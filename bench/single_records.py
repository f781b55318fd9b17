"""A broker store of single-message records, written with the store's own code in this process.

A producer sending one message at a time gets one commit log record per message. Sending 10M
messages that way through a broker takes hours on a small machine, so `scale` writes its
single-record store with :class:`MessageStore` directly (a group commit of at most one message
per round: one record each), stops it cleanly, and then starts a broker process on it: recovery,
reads, lookups and restarts all run through the broker's real code.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.consume import BODY, TOPIC, key_of
from bench.ingest import QUEUES
from bench.report import progress
from broker.store.config import StoreConfig
from broker.store.message_store import MessageStore
from broker.store.writer.append_requests import StandardMessage
from rocketspark.message.properties.codec import encode_properties

IN_FLIGHT = 500


def uniq_key_of(n: int) -> str:
    """The UNIQ_KEY of message n (as a producer sets one on every message)."""
    return f"U{n:024X}"


def message_of(n: int) -> StandardMessage:
    keys, uniq = key_of(n), uniq_key_of(n)
    return StandardMessage(
        body=BODY,
        properties=encode_properties({"KEYS": keys, "UNIQ_KEY": uniq}),
        tags=None,
        keys=keys,
        uniq_key=uniq,
        born_timestamp=1_700_000_000_000,
        born_host="127.0.0.1:5555",
    )


async def write_single_records(store_dir: Path, count: int) -> None:
    """Store `count` messages in `store_dir` (the broker's data directory), one record each."""
    config = StoreConfig(
        store_path_root_dir=store_dir, max_group_commit_messages=1, wait_time_mills_in_send_queue=600_000
    )
    store = MessageStore(config, "127.0.0.1:10911")
    await store.start()
    try:
        pending: list[asyncio.Future[object]] = []
        for n in range(count):
            pending.append(store.put_messages(TOPIC, n % QUEUES, [message_of(n)], wait_flush=False))  # type: ignore[arg-type]
            if len(pending) >= IN_FLIGHT:
                await asyncio.gather(*pending)
                pending.clear()
            if (n + 1) % 500_000 == 0:
                progress(f"wrote {n + 1:,} single-message records")
        await asyncio.gather(*pending)
        if store.appender.rounds < count:
            raise RuntimeError(f"{count:,} messages went into {store.appender.rounds:,} records, not one each")
    finally:
        await store.stop()

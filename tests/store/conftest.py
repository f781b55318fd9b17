from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from broker.store.config import StoreConfig
from broker.store.message_store import MessageStore
from broker.store.writer.append_requests import StandardMessage
from rocketspark.message.properties.codec import encode_properties

STORE_HOST = "127.0.0.1:10911"


def message(
    body: bytes, *, tags: str | None = None, keys: str | None = None, uniq: str | None = None
) -> StandardMessage:
    properties: dict[str, str] = {}
    if tags:
        properties["TAGS"] = tags
    if keys:
        properties["KEYS"] = keys
    if uniq:
        properties["UNIQ_KEY"] = uniq
    properties["WAIT"] = "true"
    return StandardMessage(
        body=body,
        properties=encode_properties(properties),
        tags=tags,
        keys=keys,
        uniq_key=uniq,
        born_timestamp=1_700_000_000_000,
        born_host="127.0.0.1:5555",
    )


StoreFactory = Callable[..., Any]


@pytest.fixture
async def open_store(tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """Open stores on tmp_path (same directory each time, so a test can reopen); all are stopped."""
    opened: list[MessageStore] = []

    async def factory(**settings: Any) -> MessageStore:
        settings.setdefault("store_path_root_dir", tmp_path / "store")
        store = MessageStore(StoreConfig(**settings), STORE_HOST)
        await store.start()
        opened.append(store)
        return store

    try:
        yield factory
    finally:
        for store in opened:
            await store.stop()

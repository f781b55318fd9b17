"""Lite-pull consumer under faults, against a broker subprocess: a record the client cannot decode."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest

from rocketspark import AsyncLitePullConsumer, MessageExt, MessageQueue
from tests.client.conftest import Cluster
from tests.client.test_producer_consumer import FIRST, poll_until
from tests.client.test_push_consumer import create_topic, send_round_robin
from tests.client.test_push_faults import send_undecodable
from tests.integration.broker_client import BROKER_NAME


def bodies(polled: list[MessageExt] | list[pa.RecordBatch]) -> list[bytes]:
    found: list[bytes] = []
    for item in polled:
        found.extend(item.column("body").to_pylist() if isinstance(item, pa.RecordBatch) else [item.body])
    return found


@pytest.mark.parametrize("arrow", [False, True], ids=["standard", "arrow"])
async def test_a_record_that_does_not_decode_is_skipped_with_an_error_and_the_queue_goes_on(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, arrow: bool
) -> None:
    topic, group = f"LiteUndecodable{int(arrow)}", f"lite_undecodable_{int(arrow)}"
    await create_topic(cluster, topic, 1)
    await send_round_robin(cluster, topic, [b"before 0", b"before 1"])
    await send_undecodable(cluster, topic)  # offset 2
    await send_round_robin(cluster, topic, [b"after 0", b"after 1"])
    consumer = AsyncLitePullConsumer(
        group, namesrv_addr=cluster.namesrv_addr, consume_from_where=FIRST, arrow=arrow, auto_commit=False
    )
    queue = MessageQueue(topic, BROKER_NAME, 0)
    with caplog.at_level(logging.WARNING, logger="rocketspark.client.consumer.undecodable"):
        async with consumer:
            consumer.subscribe(topic)
            assert bodies(await poll_until(consumer, 4)) == [b"before 0", b"before 1", b"after 0", b"after 1"]
            await consumer.commit()
            assert await consumer.committed(queue) == 5  # the skipped record counts as consumed
    narrowed = [r for r in caplog.records if r.levelno == logging.WARNING and "one by one" in r.getMessage()]
    assert narrowed, caplog.text
    skipped = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(skipped) == 1, caplog.text
    assert f"offset 2 of {queue}" in skipped[0].getMessage()
    assert "does not decompress" in skipped[0].getMessage()

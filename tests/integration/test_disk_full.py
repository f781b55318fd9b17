"""A broker whose disk fills up, on a small tmpfs the test mounts (as Apache RocketMQ behaves):
past diskSpaceWarningLevelRatio, or when a write meets ENOSPC, sends are refused with
SERVICE_NOT_AVAILABLE (14) saying the disk is full, nothing acknowledged is lost, pulls go on,
and sends are accepted again once space is freed; past diskMaxUsedSpaceRatio the oldest segments
are deleted before their time."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketspark.client.api import admin
from rocketspark.client.api.offset import get_min_offset
from rocketspark.errors import RocketMQError
from rocketspark.message.records.decoding import decode_records
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.protocol.codes import ResponseCode
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import pull, pull_all, send
from tests.waiting import eventually

DISK_BYTES = 4 * 1024 * 1024
BODY = 2048
SMALL_SEGMENTS = ["--set", "mappedFileSizeCommitLog=65536"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted for the test (root only), unmounted at teardown. Request it before
    `servers`, so the brokers on it stop first."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount)],
            check=True,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = exc.stderr.decode(errors="replace").strip() if isinstance(exc, subprocess.CalledProcessError) else exc
        pytest.skip(f"cannot mount a tmpfs for a small disk (needs root and mount permission): {detail}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False, capture_output=True, timeout=30)


def fill_up(path: Path) -> None:
    """Write zeros to `path` until the file system has no space left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, bytes(4096))
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)


async def send_until_refused(client: RemotingClient, broker: str, limit: int) -> tuple[list[bytes], RocketMQError]:
    """Sequential sends of BODY bytes to queue 0 until one is refused: the acknowledged bodies and the refusal."""
    acknowledged: list[bytes] = []
    for n in range(limit):
        body = b"%06d" % n + b"x" * (BODY - 6)
        try:
            await send(client, broker, "Full", body)
        except RocketMQError as exc:
            return acknowledged, exc
        acknowledged.append(body)
    raise AssertionError(f"{limit} sends of {BODY} bytes never filled a {DISK_BYTES}-byte disk")


@pytest.mark.slow
async def test_a_full_disk_refuses_sends_until_space_is_freed_and_loses_nothing(
    small_disk: Path, servers: ServerFactory
) -> None:
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * (DISK_BYTES // 4))  # freed later, as an operator would
    namesrv = servers.namesrv()
    data_dir = small_disk / "broker"
    settings = [*SMALL_SEGMENTS, "--set", "diskMaxUsedSpaceRatio=100", "--set", "diskSpaceWarningLevelRatio=90"]
    broker = servers.broker(namesrv.address, *settings, data_dir=data_dir)
    client = RemotingClient(request_timeout_s=10)
    try:
        await admin.create_topic(client, broker.address, TopicConfig("Full", 1, 1))
        acknowledged, refusal = await send_until_refused(client, broker.address, DISK_BYTES // BODY)
        assert refusal.code == ResponseCode.SERVICE_NOT_AVAILABLE, refusal
        assert "disk is full" in str(refusal)
        assert len(acknowledged) > 100

        fill_up(small_disk / "filler")  # nothing left, whatever the broker's own files freed meanwhile

        async def refused() -> bool:
            try:
                await send(client, broker.address, "Full", b"while full")
            except RocketMQError as exc:
                assert exc.code == ResponseCode.SERVICE_NOT_AVAILABLE, exc
                return True
            acknowledged.append(b"while full")  # it fitted in a page the commit log held already
            return False

        await eventually(refused, timeout_s=30, interval_s=0.2, what="sends refused on a full disk")
        assert [m.body for m in await pull_all(client, broker.address, "Full", 0)] == acknowledged

        ballast.unlink()
        (small_disk / "filler").unlink()

        async def accepted() -> bool:
            try:
                await send(client, broker.address, "Full", b"after")
            except RocketMQError as exc:
                assert exc.code == ResponseCode.SERVICE_NOT_AVAILABLE, exc
                return False
            return True

        await eventually(accepted, timeout_s=30, interval_s=0.5, what="a send accepted once space was freed")
        acknowledged.append(b"after")
    finally:
        await client.close()

    broker.kill()  # kill -9: what was acknowledged, before and after the disk was full, is there
    restarted = servers.broker(namesrv.address, *settings, data_dir=data_dir)
    reader = RemotingClient(request_timeout_s=10)
    try:
        stored = [m.body for m in await pull_all(reader, restarted.address, "Full", 0)]
        assert stored == acknowledged
    finally:
        await reader.close()


@pytest.mark.slow
async def test_past_max_used_space_the_oldest_segments_go_before_their_time(
    small_disk: Path, servers: ServerFactory
) -> None:
    namesrv = servers.namesrv()
    settings = [*SMALL_SEGMENTS, "--set", "diskMaxUsedSpaceRatio=30", "--set", "fileReservedTime=72"]
    broker = servers.broker(namesrv.address, *settings, data_dir=small_disk / "broker")
    first_segment = small_disk / "broker" / "commitlog" / f"{0:020d}"
    client = RemotingClient(request_timeout_s=10)
    try:
        await admin.create_topic(client, broker.address, TopicConfig("Full", 1, 1))
        sent = 0

        async def oldest_deleted() -> bool:
            nonlocal sent
            for _ in range(50):
                await send(client, broker.address, "Full", b"%06d" % sent + b"x" * (BODY - 6))
                sent += 1
            return not first_segment.exists()

        await eventually(oldest_deleted, timeout_s=60, interval_s=0.1, what="the oldest segment deleted early")
        assert sent < 2 * DISK_BYTES // BODY  # the disk never filled: sends went on throughout
        low = await get_min_offset(client, broker.address, "Full", 0)
        assert low > 0
        offsets: list[int] = []
        while len(offsets) < sent - low:  # the messages of the segments left are all served
            result = await pull(client, broker.address, "Full", 0, low + len(offsets), max_nums=1000)
            assert result.body, f"no message at offset {low + len(offsets)}"
            offsets += [m.queue_offset for m in decode_records(result.body)]
        assert offsets == list(range(low, sent))
    finally:
        await client.close()

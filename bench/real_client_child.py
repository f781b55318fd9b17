"""The child side of `real-client`: one measurement with the real client `rocketmq==0.4.4` in this process.

Only this module imports the client (a ctypes wrapper of the C++ librocketmq), and only in a child
process with a deadline (see :mod:`bench.real_client`): the C++ client can block for minutes when
something goes wrong. It imports nothing heavy, so that eight children start quickly::

    python -m bench.real_client_child produce '{"namesrv": ..., "topic": ..., "start_at": ..., ...}'
    python -m bench.real_client_child pull '{"namesrv": ..., "topic": ..., "expect": ..., ...}'

Each prints one JSON document on stdout, `{"skipped": reason}` when the client cannot be imported.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from typing import Any

try:
    from rocketmq import client  # type: ignore[import-untyped]
except ImportError as exc:  # not installed, or its librocketmq cannot be loaded
    UNAVAILABLE: str | None = f"{type(exc).__name__}: {exc}"
else:
    UNAVAILABLE = None

JsonDict = dict[str, Any]


def produce(args: JsonDict) -> JsonDict:
    """One producer sends one message at a time (`send_sync`) from `start_at` (wall clock; 0: at once)
    for `seconds` or `limit` sends. A first send, before `start_at`, looks the route up; it is
    acknowledged but not measured.

    Result: `{"ids": [msg id of each acknowledged send], "latencies_s": [one per measured send],
    "started_at", "ended_at" (wall clock), "errors": {text: n}}`.
    """
    errors: Counter[str] = Counter()
    latencies: list[float] = []
    ids: list[str] = []

    def send() -> None:
        message = client.Message(args["topic"])
        # distinct bodies: the client may give two messages one msg id, and the broker's duplicate
        # window then tells them apart by their bodies
        message.set_body(f"{os.getpid()}:{len(ids) + errors.total()}".encode().ljust(args["body_bytes"], b"x"))
        result = producer.send_sync(message)
        if result.status != client.SendStatus.OK:
            raise RuntimeError(f"send status {result.status.name}")
        ids.append(result.msg_id)

    producer = client.Producer(args["group"])
    producer.set_namesrv_addr(args["namesrv"])
    producer.start()
    try:
        send()
        start_at = args["start_at"] or time.time()
        time.sleep(max(0.0, start_at - time.time()))
        started_at = time.time()  # later than start_at when this process started late
        deadline = time.perf_counter() + start_at + args["seconds"] - started_at
        while len(latencies) + errors.total() < args["limit"] and time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                send()
            except Exception as exc:
                errors[f"{type(exc).__name__}: {exc}"] += 1
                continue
            latencies.append(time.perf_counter() - started)
        ended_at = time.time()
    finally:
        producer.shutdown()
    return {
        "ids": ids,
        "latencies_s": latencies,
        "started_at": started_at,
        "ended_at": ended_at,
        "errors": errors,
    }


class TimedPulls:
    """The client module's `dll` with each `Pull` timed: `PullConsumer.pull` calls `dll.Pull` once per
    PULL_MESSAGE request, so this times exactly the requests the consumer makes."""

    def __init__(self, dll: Any) -> None:
        self._dll = dll
        self.latencies_s: list[float] = []

    def Pull(self, *args: Any) -> Any:  # the C function's name
        started = time.perf_counter()
        result = self._dll.Pull(*args)
        self.latencies_s.append(time.perf_counter() - started)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dll, name)


def pull(args: JsonDict) -> JsonDict:
    """One pass of `PullConsumer.pull(topic, max_num=...)`, which pulls each queue of the topic from
    offset 0 until it has no new message, reading every body; it stops early at `expect` messages or
    after `seconds`.

    Result: `{"received", "body_bytes", "elapsed_s", "latencies_s": [one per Pull request]}`.
    """
    timed = client.dll = TimedPulls(client.dll)
    consumer = client.PullConsumer(args["group"])
    consumer.set_namesrv_addr(args["namesrv"])
    consumer.start()
    received = body_bytes = 0
    try:
        started = time.perf_counter()
        deadline = started + args["seconds"]
        for message in consumer.pull(args["topic"], max_num=args["max_num"]):
            body_bytes += len(message.body)
            received += 1
            if received >= args["expect"] or time.perf_counter() > deadline:
                break
        elapsed = time.perf_counter() - started
    finally:
        consumer.shutdown()
    return {"received": received, "body_bytes": body_bytes, "elapsed_s": elapsed, "latencies_s": timed.latencies_s}


COMMANDS = {"produce": produce, "pull": pull}


def main(argv: list[str]) -> int:
    command, args = argv
    result = {"skipped": UNAVAILABLE} if UNAVAILABLE else COMMANDS[command](json.loads(args))
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

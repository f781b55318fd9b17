"""The 5.x side of `bench grpc`: the official RocketMQ 5.x Python client in `.venv-rmq5`.

Run as a script by that venv's interpreter (stdlib and `rocketmq-python-client` only, whose package
`rocketmq` is not rocketmq==0.4.4's), with `HOME` in the run's data directory (the client logs to
`$HOME/logs/rocketmq_python/`); the argument is a JSON object, the result one JSON line on stdout::

    grpc_child.py produce '{"endpoint", "topic", "seconds", "limit", "in_flight"}'
    grpc_child.py consume '{"endpoint", "topic", "group", "seconds", "limit", "batch", "invisible_s"}'

Each measures from after its client started and one warm-up call, and reports `messages`, `seconds`
and per-call latencies (`latencies_s`: one per send, or per receive-and-ack of a batch).
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from typing import Any

# the 5.x client's package (this script runs in .venv-rmq5, never in the project's venv)
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

BODY = b"x" * 128


def _configuration(args: dict[str, Any]) -> Any:
    return ClientConfiguration(args["endpoint"], Credentials(), request_timeout=10)


def _message(topic: str) -> Any:
    message = Message()
    message.topic = topic
    message.body = BODY
    return message


def produce(args: dict[str, Any]) -> dict[str, Any]:
    """Single sends: `send` one at a time (`in_flight` 1) or `send_async` with `in_flight` outstanding."""
    producer = Producer(_configuration(args), [args["topic"]])
    producer.startup()
    try:
        producer.send(_message(args["topic"]))  # routes and channels ready
        in_flight = int(args["in_flight"])
        latencies: list[float] = []
        pending: deque[tuple[float, Any]] = deque()
        sent = 0
        started = time.perf_counter()
        deadline = started + float(args["seconds"])
        while sent < args["limit"] and time.perf_counter() < deadline:
            begun = time.perf_counter()
            if in_flight <= 1:
                producer.send(_message(args["topic"]))
                latencies.append(time.perf_counter() - begun)
            else:
                pending.append((begun, producer.send_async(_message(args["topic"]))))
                while len(pending) >= in_flight:
                    at, future = pending.popleft()
                    future.result(timeout=30)
                    latencies.append(time.perf_counter() - at)
            sent += 1
        while pending:
            at, future = pending.popleft()
            future.result(timeout=30)
            latencies.append(time.perf_counter() - at)
        elapsed = time.perf_counter() - started
    finally:
        producer.shutdown()
    return {"messages": sent, "seconds": elapsed, "latencies_s": latencies}


def consume(args: dict[str, Any]) -> dict[str, Any]:
    """SimpleConsumer: `receive(batch)`, then an ack of every message received, one after another."""
    consumer = SimpleConsumer(
        _configuration(args), args["group"], {args["topic"]: FilterExpression()}, await_duration=2
    )
    consumer.startup()
    try:
        received = 0
        latencies: list[float] = []
        started = time.perf_counter()
        deadline = started + float(args["seconds"])
        while received < args["limit"] and time.perf_counter() < deadline:
            begun = time.perf_counter()
            messages = consumer.receive(int(args["batch"]), int(args["invisible_s"])) or []
            for message in messages:  # 5.1.2's ack_async returns no future to wait for
                consumer.ack(message)
            if messages:
                latencies.append(time.perf_counter() - begun)
            received += len(messages)
        elapsed = time.perf_counter() - started
    finally:
        consumer.shutdown()
    return {"messages": received, "seconds": elapsed, "latencies_s": latencies}


def main(argv: list[str]) -> int:
    command, raw = argv
    result = {"produce": produce, "consume": consume}[command](json.loads(raw))
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Run the real RocketMQ client (`rocketmq==0.4.4`, a ctypes wrapper of the C++ client) in this process.

This module is the child side of :mod:`tests.interop.driver`; the pytest process never imports the
client library, because the C++ client can block for minutes against a server that misbehaves.
Run from the repository root with `HOME` pointing at a scratch directory (the client writes its
logs to `$HOME/logs/rocketmq-cpp/<pid>_rocketmq-cpp.log.0`); the command's arguments are a JSON
object in a file (a thousand messages would overflow the command line)::

    python -m tests.interop.real_client produce produce-args.json  # {"namesrv": ..., "group": ..., "sends": [...]}
    python -m tests.interop.real_client consume consume-args.json  # {"namesrv": ..., "group": ..., "topic": ...}

Each command prints one JSON document on stdout; the shapes are documented on the functions. Either
command signs its requests when its arguments hold `"credentials": {"access_key", "secret_key",
"channel"}` (the client's `set_session_credentials`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

JsonDict = dict[str, Any]


def _text(value: bytes | str | None) -> str | None:
    """A string the C library returned (bytes, or None for NULL); None for an absent value."""
    if value is None:
        return None
    text = value.decode() if isinstance(value, bytes) else value
    return text or None


def _message(spec: JsonDict) -> Any:
    """A `rocketmq.client.Message` from `{"topic", "body", "tags"?, "keys"?, "properties"?}`."""
    from rocketmq.client import Message  # type: ignore[import-untyped]

    message = Message(spec["topic"])
    message.set_body(spec["body"])  # a C string: the body must not contain NUL
    if spec.get("tags"):
        message.set_tags(spec["tags"])
    if spec.get("keys"):
        message.set_keys(spec["keys"])
    for key, value in (spec.get("properties") or {}).items():
        message.set_property(key, value)
    return message


# The C++ client (1.x `TcpRemotingClient::CreateTransport`) answers "no connection" to a thread that
# asks for a broker while another of its threads is still connecting to that broker; the send then
# fails with "No route info of this topic" without reaching the broker. That happens only at the
# first contact, when its heartbeat thread and the sending thread meet on a busy machine.
FIRST_CONTACT_ERROR = "No route info of this topic"
FIRST_CONTACT_TRIES = 5
FIRST_CONTACT_PAUSE_S = 0.2


class _Sender:
    """Sends one request at a time and records each outcome; an exception is recorded for the test to
    report, and sending goes on. Until a send succeeds, one that fails with the first-contact error is
    tried again (at most FIRST_CONTACT_TRIES times), and the tries are noted on stderr."""

    def __init__(self) -> None:
        self.contacted = False

    def outcome(self, send: Callable[..., Any], *send_args: Any) -> JsonDict:
        tries = 1
        while True:
            try:
                result = send(*send_args)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                if self.contacted or FIRST_CONTACT_ERROR not in error or tries == FIRST_CONTACT_TRIES:
                    return {"error": error}
                print(f"first contact: try {tries} failed ({error}); trying again", file=sys.stderr)
                time.sleep(FIRST_CONTACT_PAUSE_S)
                tries += 1
                continue
            self.contacted = True
            if result is None:  # oneway
                return {"status": None}
            return {"status": result.status.name, "msg_id": result.msg_id, "offset": result.offset}

    def send(self, producer: Any, send: JsonDict) -> list[JsonDict]:
        messages = [_message(spec) for spec in send["messages"]]
        match send["method"]:
            case "sync":
                return [self.outcome(producer.send_sync, m) for m in messages]
            case "batch":
                return [self.outcome(producer.send_batch, messages)]
            case "orderly":
                return [self.outcome(producer.send_orderly, m, send["arg"]) for m in messages]
            case "oneway":
                return [self.outcome(producer.send_oneway, m) for m in messages]
            case other:
                raise ValueError(f"unknown send method {other!r}")


def _credentials(client: Any, args: JsonDict) -> None:
    """`set_session_credentials(access_key, secret_key, channel)` when `args` has `credentials`."""
    credentials = args.get("credentials")
    if credentials:
        client.set_session_credentials(credentials["access_key"], credentials["secret_key"], credentials["channel"])


def produce(args: JsonDict) -> None:
    """Send with one producer; each request's outcome in order.

    `args`: `namesrv`, `group`, `sends`: a list of `{"method": "sync" | "batch" | "orderly" | "oneway",
    "messages": [message spec, ...], "arg": int}`. `batch` sends all its messages in one request; the
    other methods send each message on its own. `orderly` passes `arg` to the client's hashing queue
    selector, which picks queue `arg % queue count`.

    Result: `{"results": [{"status": "OK", "msg_id": str, "offset": int} | {"error": str}, ...]}`, one
    entry per request (oneway sends report `{"status": null}`). A send refused at the first contact
    by the client itself is tried again (see `_Sender`).
    """
    from rocketmq.client import Producer

    producer = Producer(args["group"])
    producer.set_namesrv_addr(args["namesrv"])
    _credentials(producer, args)
    producer.start()
    sender = _Sender()
    try:
        results = [outcome for send in args["sends"] for outcome in sender.send(producer, send)]
    finally:
        producer.shutdown()
    _emit({"results": results})


def consume(args: JsonDict) -> None:
    """Run one push consumer until it has received `expect` messages, then `settle_s` more seconds
    (so that extra deliveries show up), or until `max_wait_s` passed; then shut it down, which makes
    the client commit its offsets to the broker.

    `args`: `namesrv`, `group`, `topic`, `expression` ("*" or "TagA || TagB"), `orderly` (bool),
    `broadcasting` (bool), `expect`, `settle_s`, `max_wait_s`, `properties` (user property names to
    read back), `fail_times` (the callback raises on a message consumed fewer times before than this).

    Result: `{"messages": [...], "expected_reached": bool}`; messages in the order the callback saw
    them, each with `topic`, `tags`, `keys`, `body`, `id`, `queue_id`, `queue_offset`,
    `reconsume_times`, `properties`.
    """
    from rocketmq.client import MessageModel, PushConsumer

    model = MessageModel.BROADCASTING if args.get("broadcasting") else MessageModel.CLUSTERING
    consumer = PushConsumer(args["group"], orderly=bool(args.get("orderly")), message_model=model)
    consumer.set_namesrv_addr(args["namesrv"])
    _credentials(consumer, args)
    received: list[JsonDict] = []
    lock = threading.Lock()
    reached = threading.Event()
    names: list[str] = args.get("properties") or []

    def on_message(message: Any) -> None:
        record = {
            "topic": message.topic,
            "tags": _text(message.tags),
            "keys": _text(message.keys),
            "body": message.body.decode(),
            "id": message.id,
            "queue_id": message.queue_id,
            "queue_offset": message.queue_offset,
            "reconsume_times": message.reconsume_times,
            "properties": {name: _text(message.get_property(name)) for name in names},
        }
        with lock:
            received.append(record)
            if len(received) >= args["expect"]:
                reached.set()
        if message.reconsume_times < args.get("fail_times", 0):
            raise RuntimeError("failing on purpose: the client answers RECONSUME_LATER")

    consumer.subscribe(args["topic"], on_message, args.get("expression", "*"))
    consumer.start()
    try:
        expected_reached = reached.wait(args["max_wait_s"])
        if expected_reached:
            time.sleep(args["settle_s"])
        with lock:
            # before the shutdown: the C++ client sometimes aborts in it (SHUTDOWN_ABORT)
            _emit({"messages": list(received), "expected_reached": expected_reached})
    finally:
        consumer.shutdown()


#: what the C++ client prints when it aborts in a consumer's shutdown (a timer thread interrupted
#: while it is being stopped); the driver accepts that abort once the result is out
SHUTDOWN_ABORT = "terminate called after throwing an instance of 'boost::thread_interrupted'"


def _emit(result: JsonDict) -> None:
    """Print the command's one JSON result."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


COMMANDS: dict[str, Callable[[JsonDict], None]] = {"produce": produce, "consume": consume}


def main(argv: list[str]) -> int:
    command, args_file = argv
    with open(args_file) as file:
        COMMANDS[command](json.load(file))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

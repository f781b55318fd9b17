"""The child side of :mod:`tests.interop.v5.driver`: the official RocketMQ 5.x Python client
(`rocketmq-python-client==5.1.2`) run in its own venv (`.venv-rmq5`, made by the Makefile).

It imports the standard library and that client only (the client's top-level package `rocketmq`
is another than `rocketmq==0.4.4` in the test venv), and is run as a script with `HOME` pointing at a
scratch directory (the client logs to `$HOME/logs/rocketmq_python/`). It reads one JSON request a line
on stdin, `{"id": n, "op": "...", "args": {...}}`, and answers each on stdout, `{"id": n, "result": ...}`
or `{"id": n, "error": "Type: text"}`, in order; the ops are the `op_*` methods of `Child`. Clients are
named by the handle `*.start` returns; received messages by the handle `receive` gives each.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from typing import Any

JsonDict = dict[str, Any]
#: a subscription's expression with this prefix is an SQL92 one
SQL92_PREFIX = "SQL92:"


def _message_json(message: Any, handle: int | None = None) -> JsonDict:
    """What a test sees of a received message."""
    return {
        "handle": handle,
        "topic": message.topic,
        "body": message.body.decode(errors="replace"),
        "message_id": message.message_id,
        "tag": message.tag,
        "keys": sorted(message.keys or ()),
        "properties": dict(message.properties or {}),
        "message_group": message.message_group,
        "delivery_timestamp": message.delivery_timestamp,
        "delivery_attempt": message.delivery_attempt,
        "born_timestamp": message.born_timestamp,
        "corrupted": bool(getattr(message, "corrupted", False)),
        "received_at_ms": int(time.time() * 1000),
    }


def _outgoing(spec: JsonDict) -> Any:
    """A client Message from `{"topic", "body", "tag"?, "keys"?, "properties"?, "message_group"?,
    "delivery_timestamp"? (epoch seconds, as the client's API takes it)}`."""
    from rocketmq import Message

    message = Message()
    message.topic = spec["topic"]
    message.body = spec["body"].encode()
    if spec.get("tag"):
        message.tag = spec["tag"]
    for key in spec.get("keys") or ():
        message.keys = key  # the client's setter adds one key per assignment
    for key, value in (spec.get("properties") or {}).items():
        message.add_property(key, value)
    if spec.get("message_group"):
        message.message_group = spec["message_group"]
    if spec.get("delivery_timestamp"):
        message.delivery_timestamp = spec["delivery_timestamp"]
    return message


class Checker:
    """The producer's TransactionChecker: answers each check as `resolutions[message key]` says
    ("commit" or "rollback"; else `default`), and records every check."""

    def __init__(self, resolutions: dict[str, str], default: str) -> None:
        self.resolutions = resolutions
        self.default = default
        self.checks: list[JsonDict] = []
        self.lock = threading.Lock()

    def make(self) -> Any:
        from rocketmq import TransactionChecker, TransactionResolution

        outer = self

        class _Checker(TransactionChecker):
            def check(self, message: Any) -> Any:
                keys = sorted(message.keys or ())
                choice = next((outer.resolutions[k] for k in keys if k in outer.resolutions), outer.default)
                with outer.lock:
                    outer.checks.append({**_message_json(message), "answered": choice})
                return TransactionResolution.COMMIT if choice == "commit" else TransactionResolution.ROLLBACK

        return _Checker()


class Child:
    def __init__(self) -> None:
        self.clients: dict[int, Any] = {}
        self.checkers: dict[int, Checker] = {}
        self.transactions: dict[int, Any] = {}
        self.received: dict[int, Any] = {}
        self.pushed: dict[int, list[JsonDict]] = {}
        self.lock = threading.Lock()
        self.next_handle = 1

    def _handle(self) -> int:
        with self.lock:
            handle = self.next_handle
            self.next_handle += 1
            return handle

    @staticmethod
    def _configuration(args: JsonDict) -> Any:
        from rocketmq import ClientConfiguration, Credentials

        credentials = Credentials(args.get("access_key", ""), args.get("secret_key", ""))
        return ClientConfiguration(
            args["endpoints"], credentials, args.get("namespace", ""), args.get("request_timeout_s", 3)
        )

    @staticmethod
    def _subscriptions(args: JsonDict) -> dict[str, Any]:
        """{topic: tag expression, or "SQL92:" and an SQL92 expression}."""
        from rocketmq import FilterExpression
        from rocketmq.grpc_protocol import FilterType

        subscriptions = {}
        for topic, expression in args["subscriptions"].items():
            if expression.startswith(SQL92_PREFIX):
                subscriptions[topic] = FilterExpression(expression[len(SQL92_PREFIX) :], FilterType.SQL)
            else:
                subscriptions[topic] = FilterExpression(expression)
        return subscriptions

    # -- producers ---------------------------------------------------------------------------

    def op_producer_start(self, args: JsonDict) -> int:
        """`endpoints`, `topics`, `checker`: None or {"resolutions": {key: "commit"|"rollback"}, "default"}."""
        from rocketmq import Producer

        handle = self._handle()
        checker = None
        if args.get("checker") is not None:
            spec = args["checker"]
            self.checkers[handle] = Checker(spec.get("resolutions", {}), spec.get("default", "commit"))
            checker = self.checkers[handle].make()
        producer = Producer(self._configuration(args), args.get("topics") or None, checker, bool(args.get("tls")))
        producer.startup()
        self.clients[handle] = producer
        return handle

    def op_send(self, args: JsonDict) -> JsonDict:
        """`producer`, `message`: the receipt's message id, offset, transaction id."""
        receipt = self.clients[args["producer"]].send(_outgoing(args["message"]))
        return {"message_id": receipt.message_id, "offset": receipt.offset, "transaction_id": receipt.transaction_id}

    def op_send_many(self, args: JsonDict) -> list[JsonDict]:
        """`producer`, `messages`: sent one after another, `send_async` `in_flight` at a time."""
        producer = self.clients[args["producer"]]
        in_flight = int(args.get("in_flight", 1))
        results: list[JsonDict] = []
        pending: list[Any] = []
        for spec in args["messages"]:
            if in_flight <= 1:
                receipt = producer.send(_outgoing(spec))
                results.append({"message_id": receipt.message_id, "offset": receipt.offset})
                continue
            pending.append(producer.send_async(_outgoing(spec)))
            if len(pending) >= in_flight:
                receipt = pending.pop(0).result(timeout=30)
                results.append({"message_id": receipt.message_id, "offset": receipt.offset})
        for future in pending:
            receipt = future.result(timeout=30)
            results.append({"message_id": receipt.message_id, "offset": receipt.offset})
        return results

    def op_send_half(self, args: JsonDict) -> JsonDict:
        """`producer`, `message`, `end`: "commit", "rollback" or None (left to the check): a half message."""
        producer = self.clients[args["producer"]]
        transaction = producer.begin_transaction()
        receipt = producer.send(_outgoing(args["message"]), transaction)
        if args.get("end") == "commit":
            transaction.commit()
        elif args.get("end") == "rollback":
            transaction.rollback()
        return {"message_id": receipt.message_id, "offset": receipt.offset, "transaction_id": receipt.transaction_id}

    def op_checks(self, args: JsonDict) -> list[JsonDict]:
        """`producer`: the checks its checker answered so far."""
        checker = self.checkers[args["producer"]]
        with checker.lock:
            return list(checker.checks)

    # -- consumers ------------------------------------------------------------------------------

    def op_simple_start(self, args: JsonDict) -> int:
        """`endpoints`, `group`, `subscriptions` ({topic: tag expression}), `await_s` (long polling)."""
        from rocketmq import SimpleConsumer

        consumer = SimpleConsumer(
            self._configuration(args),
            args["group"],
            self._subscriptions(args),
            args.get("await_s", 5),
            tls_enable=bool(args.get("tls")),
        )
        consumer.startup()
        handle = self._handle()
        self.clients[handle] = consumer
        return handle

    def op_receive(self, args: JsonDict) -> list[JsonDict]:
        """`consumer`, `max`, `invisible_s`: one receive; each message with a handle for ack/change."""
        messages = self.clients[args["consumer"]].receive(args.get("max", 16), args.get("invisible_s", 15))
        result = []
        for message in messages or []:
            handle = self._handle()
            self.received[handle] = message
            result.append(_message_json(message, handle))
        return result

    def op_ack(self, args: JsonDict) -> None:
        """`consumer`, `message` (a receive's handle)."""
        self.clients[args["consumer"]].ack(self.received[args["message"]])

    def op_change_invisible(self, args: JsonDict) -> None:
        """`consumer`, `message`, `invisible_s`."""
        self.clients[args["consumer"]].change_invisible_duration(self.received[args["message"]], args["invisible_s"])

    def op_push_start(self, args: JsonDict) -> int:
        """`endpoints`, `group`, `subscriptions`, `fail_times` (answer FAILURE to a message delivered
        fewer times than this), `fail_bodies` (answer FAILURE to these bodies always), `threads`: a
        push consumer recording what its listener is given."""
        from rocketmq import ConsumeResult, MessageListener, PushConsumer

        handle = self._handle()
        log: list[JsonDict] = []
        self.pushed[handle] = log
        fail_times = int(args.get("fail_times", 0))
        fail_bodies = set(args.get("fail_bodies", ()))
        lock = self.lock

        class _Listener(MessageListener):
            def consume(self, message: Any) -> Any:
                with lock:
                    log.append(_message_json(message))
                attempt = message.delivery_attempt or 1
                failed = attempt <= fail_times or message.body.decode(errors="replace") in fail_bodies
                return ConsumeResult.FAILURE if failed else ConsumeResult.SUCCESS

        consumer = PushConsumer(
            self._configuration(args),
            args["group"],
            _Listener(),
            self._subscriptions(args),
            consumption_thread_count=int(args.get("threads", 4)),
            tls_enable=bool(args.get("tls")),
        )
        consumer.startup()
        self.clients[handle] = consumer
        return handle

    def op_pushed(self, args: JsonDict) -> list[JsonDict]:
        """`consumer`: what its listener was given so far, in order."""
        with self.lock:
            return list(self.pushed[args["consumer"]])

    def op_shutdown(self, args: JsonDict) -> None:
        """`client`: shut it down (NotifyClientTermination, streams closed)."""
        self.clients.pop(args["client"]).shutdown()


def main() -> int:
    child = Child()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        answer: JsonDict = {"id": request["id"]}
        try:
            answer["result"] = getattr(child, "op_" + request["op"])(request.get("args") or {})
        except Exception as exc:  # reported to the test, which decides
            answer["error"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc(file=sys.stderr)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    for client in list(child.clients.values()):
        try:
            client.shutdown()
        except Exception:
            traceback.print_exc(file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

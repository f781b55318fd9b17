"""The pytest side of the 5.x client tests: the official RocketMQ 5.x Python client in a child process.

The client (`rocketmq-python-client==5.1.2`) lives in a venv of its own, `.venv-rmq5` (the Makefile's
test install makes it), and runs :mod:`tests.interop.v5.child` there with `HOME` pointing at a scratch
directory. One :class:`V5Client` is one child process holding any number of the client's producers and
consumers; each request has a deadline, and the child is killed when the test ends::

    with V5Client(tmp_path) as v5:
        producer = v5.producer(endpoint, topics=["t"])
        receipt = producer.send(V5Message("t", "hello", tag="a"))
        consumer = v5.simple_consumer(endpoint, "group", {"t": "*"})
        (message,) = consumer.receive(max_messages=1, invisible_s=10)
        consumer.ack(message)

On a failed request, :class:`V5Error` carries the client's exception text and the child's stderr.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import subprocess
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

REPO_ROOT = Path(__file__).resolve().parents[3]
V5_VENV = REPO_ROOT / ".venv-rmq5"
V5_PYTHON = V5_VENV / "bin" / "python"
CHILD = Path(__file__).with_name("child.py")
#: a request's deadline unless the call says otherwise (the client's own RPC timeout is 3 s, with retries)
DEFAULT_TIMEOUT_S = 30.0


class V5Error(AssertionError):
    """The 5.x client raised (its text says what), or did not answer in time."""


@dataclass(frozen=True, slots=True)
class V5Message:
    """A message to send; `delivery_timestamp`: epoch seconds (the client's API takes seconds)."""

    topic: str
    body: str
    tag: str | None = None
    keys: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    message_group: str | None = None
    delivery_timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class Receipt:
    message_id: str
    offset: int
    transaction_id: str | None = None


@dataclass(frozen=True, slots=True)
class Received:
    """A message as the client handed it out; `handle` names it for ack/change_invisible (None for push)."""

    handle: int | None
    topic: str
    body: str
    message_id: str
    tag: str | None
    keys: list[str]
    properties: dict[str, str]
    message_group: str | None
    delivery_timestamp: int | None  # ms
    delivery_attempt: int | None
    born_timestamp: int | None
    corrupted: bool
    received_at_ms: int


def require_venv() -> None:
    if not V5_PYTHON.exists():
        raise RuntimeError(
            f"{V5_PYTHON} is missing: `make .venv-rmq5/.installed` makes the 5.x client's venv (make test does)"
        )


class V5Client:
    """One child process running the 5.x client; see the module docstring."""

    def __init__(self, home: Path, env: dict[str, str] | None = None) -> None:
        """`env`: more environment for the child (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH: the CA file the
        client's TLS trusts, for a `tls=True` client)."""
        require_venv()
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self._stderr_path = home / f"v5-child-{id(self)}.stderr"
        self._stderr = self._stderr_path.open("w")
        self._process = subprocess.Popen(
            [str(V5_PYTHON), "-I", str(CHILD)],  # isolated: no test module shadows the client's imports
            cwd=home,
            env={**os.environ, "HOME": str(home), "PYTHONUNBUFFERED": "1", **(env or {})},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._answers.put(json.loads(line))
        self._answers.put(None)

    def request(self, op: str, timeout_s: float = DEFAULT_TIMEOUT_S, **args: Any) -> Any:
        """Run one op of the child (`tests/interop/v5/child.py`'s `op_<op>`) and return its result."""
        with self._lock:  # one request at a time: answers come in order
            number = next(self._ids)
            assert self._process.stdin is not None
            try:
                self._process.stdin.write(json.dumps({"id": number, "op": op, "args": args}) + "\n")
                self._process.stdin.flush()
            except BrokenPipeError:
                raise V5Error(f"the 5.x client's process is gone\n{self.stderr_tail()}") from None
            try:
                answer = self._answers.get(timeout=timeout_s)
            except queue.Empty:
                self.kill()
                raise V5Error(
                    f"the 5.x client did not answer {op} within {timeout_s:.0f} s\n{self.stderr_tail()}"
                ) from None
        if answer is None:
            raise V5Error(f"the 5.x client's process exited during {op}\n{self.stderr_tail()}")
        if "error" in answer:
            raise V5Error(f"the 5.x client's {op} failed: {answer['error']}\n{self.stderr_tail()}")
        return answer.get("result")

    def stderr_tail(self, lines: int = 40) -> str:
        self._stderr.flush()
        text = self._stderr_path.read_text(errors="replace").splitlines()[-lines:]
        return "--- 5.x client stderr:\n" + "\n".join(text)

    # -- clients ---------------------------------------------------------------------------------

    def producer(
        self, endpoints: str, topics: list[str] | None = None, checker: dict[str, Any] | None = None, **config: Any
    ) -> V5Producer:
        """A started producer; `checker`: `{"resolutions": {message key: "commit"|"rollback"}, "default": ...}`
        makes it a transactional producer whose checker answers the broker's checks so. `config`:
        `access_key`, `secret_key`, `namespace`, `request_timeout_s`, `tls` (connect with TLS; every
        client's `config` takes it)."""
        handle = self.request("producer_start", endpoints=endpoints, topics=topics or [], checker=checker, **config)
        return V5Producer(self, handle)

    def simple_consumer(
        self, endpoints: str, group: str, subscriptions: dict[str, str], await_s: int = 5, **config: Any
    ) -> V5SimpleConsumer:
        handle = self.request(
            "simple_start", endpoints=endpoints, group=group, subscriptions=subscriptions, await_s=await_s, **config
        )
        return V5SimpleConsumer(self, handle)

    def push_consumer(
        self, endpoints: str, group: str, subscriptions: dict[str, str], fail_times: int = 0, **config: Any
    ) -> V5PushConsumer:
        """A push consumer whose listener records every message; it answers FAILURE to a message whose
        delivery attempt is at most `fail_times`."""
        handle = self.request(
            "push_start", endpoints=endpoints, group=group, subscriptions=subscriptions, fail_times=fail_times, **config
        )
        return V5PushConsumer(self, handle)

    def shutdown(self, handle: int) -> None:
        self.request("shutdown", client=handle)

    # -- life -------------------------------------------------------------------------------------

    def close(self, timeout_s: float = 20.0) -> None:
        """End the child: its clients shut down (stdin closed), killed if it takes longer than `timeout_s`."""
        if self._process.poll() is None:
            try:
                assert self._process.stdin is not None
                self._process.stdin.close()
                self._process.wait(timeout_s)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._stderr.close()

    def kill(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class V5Producer:
    client: V5Client
    handle: int

    def send(self, message: V5Message, timeout_s: float = DEFAULT_TIMEOUT_S) -> Receipt:
        return Receipt(**self.client.request("send", timeout_s, producer=self.handle, message=asdict(message)))

    def send_many(self, messages: list[V5Message], in_flight: int = 1, timeout_s: float = 120.0) -> list[Receipt]:
        """Send in order; `in_flight` > 1 uses `send_async` with that many outstanding."""
        results = self.client.request(
            "send_many", timeout_s, producer=self.handle, messages=[asdict(m) for m in messages], in_flight=in_flight
        )
        return [Receipt(**result) for result in results]

    def send_half(self, message: V5Message, end: str | None) -> Receipt:
        """A transactional message: committed (`end="commit"`), rolled back, or left to the check (None)."""
        return Receipt(**self.client.request("send_half", producer=self.handle, message=asdict(message), end=end))

    def checks(self) -> list[Received]:
        """The broker's checks the checker answered so far (each with an extra `answered`)."""
        return [
            Received(**{k: v for k, v in check.items() if k != "answered"})
            for check in self.client.request("checks", producer=self.handle)
        ]

    def shutdown(self) -> None:
        self.client.shutdown(self.handle)


@dataclass(frozen=True, slots=True)
class V5SimpleConsumer:
    client: V5Client
    handle: int

    def receive(
        self, max_messages: int = 16, invisible_s: int = 15, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> list[Received]:
        """One receive (a long poll of the consumer's `await_s` when nothing is there)."""
        result = self.client.request(
            "receive", timeout_s, consumer=self.handle, max=max_messages, invisible_s=invisible_s
        )
        return [Received(**message) for message in result]

    def ack(self, message: Received) -> None:
        self.client.request("ack", consumer=self.handle, message=message.handle)

    def change_invisible(self, message: Received, invisible_s: int) -> None:
        self.client.request("change_invisible", consumer=self.handle, message=message.handle, invisible_s=invisible_s)

    def shutdown(self) -> None:
        self.client.shutdown(self.handle)


@dataclass(frozen=True, slots=True)
class V5PushConsumer:
    client: V5Client
    handle: int

    def pushed(self) -> list[Received]:
        return [Received(**message) for message in self.client.request("pushed", consumer=self.handle)]

    def shutdown(self) -> None:
        self.client.shutdown(self.handle)

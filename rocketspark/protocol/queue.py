"""`MessageQueue`: one queue of a topic on one broker.

A wire type: JSON bodies carry it as `{"brokerName", "queueId", "topic"}` (lock requests, queue-keyed
statistics), and everything above the protocol (messages, clients, the broker, Spark) uses it too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """Ordered by topic, broker name, queue id, as Java's `MessageQueue.compareTo`."""

    topic: str
    broker_name: str
    queue_id: int

    def to_dict(self) -> dict[str, object]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> MessageQueue:
        return cls(str(data["topic"]), str(data["brokerName"]), int(str(data["queueId"])))

    def describe(self) -> str:
        """The queue in words, for error messages."""
        return f"topic {self.topic}, broker {self.broker_name}, queue {self.queue_id}"

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}#{self.queue_id}"

"""rocketspark: RocketMQ for PySpark.

The client library::

    from rocketspark import Producer, LitePullConsumer, Message, PushConsumer

    with Producer("my-producer", namesrv_addr="127.0.0.1:9876") as producer:
        producer.send(Message("Orders", b"hello", tags="new"))

`AsyncProducer`, `AsyncLitePullConsumer` and `AsyncPushConsumer` are the asyncio versions. Every error derives from
`RocketMQError`. Against brokers with ACL on, pass `credentials=SessionCredentials(access_key, secret_key)` to any of
them: every request is then signed. `use_tls=True` (with `tls_trust=` a CA file) makes every connection TLS.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rocketspark.client.api.send import SendResult, SendStatus
    from rocketspark.client.consumer.lite_pull import AsyncLitePullConsumer
    from rocketspark.client.consumer.push.consumer import AsyncPushConsumer
    from rocketspark.client.consumer.push.listeners import ConsumeOrderlyStatus, ConsumeStatus
    from rocketspark.client.producer.producer import AsyncProducer
    from rocketspark.client.producer.transaction import (
        AsyncTransactionProducer,
        HalfMessage,
        TransactionListener,
        TransactionSendResult,
        TransactionStatus,
    )
    from rocketspark.client.producer.transaction_sync import TransactionProducer
    from rocketspark.client.sync import LitePullConsumer, Producer, PushConsumer
    from rocketspark.errors import AccessDeniedError, RocketMQError, TlsHandshakeError
    from rocketspark.message.message import Message, MessageExt
    from rocketspark.protocol.body.heartbeat import ConsumeFromWhere, MessageModel
    from rocketspark.protocol.queue import MessageQueue
    from rocketspark.remoting.signing import SessionCredentials
    from rocketspark.remoting.tls import TlsTrust

#: where each public name lives; imported on first use, so `import rocketspark.cli` (and every Spark
#: Python worker that looks data sources up) does not load the client, pyarrow and numpy up front
_EXPORTS = {
    "SendResult": "rocketspark.client.api.send",
    "SendStatus": "rocketspark.client.api.send",
    "AsyncLitePullConsumer": "rocketspark.client.consumer.lite_pull",
    "AsyncProducer": "rocketspark.client.producer.producer",
    "AsyncPushConsumer": "rocketspark.client.consumer.push.consumer",
    "ConsumeOrderlyStatus": "rocketspark.client.consumer.push.listeners",
    "ConsumeStatus": "rocketspark.client.consumer.push.listeners",
    "LitePullConsumer": "rocketspark.client.sync",
    "Producer": "rocketspark.client.sync",
    "PushConsumer": "rocketspark.client.sync",
    "AsyncTransactionProducer": "rocketspark.client.producer.transaction",
    "HalfMessage": "rocketspark.client.producer.transaction",
    "TransactionListener": "rocketspark.client.producer.transaction",
    "TransactionSendResult": "rocketspark.client.producer.transaction",
    "TransactionStatus": "rocketspark.client.producer.transaction",
    "TransactionProducer": "rocketspark.client.producer.transaction_sync",
    "AccessDeniedError": "rocketspark.errors",
    "RocketMQError": "rocketspark.errors",
    "Message": "rocketspark.message.message",
    "MessageExt": "rocketspark.message.message",
    "MessageQueue": "rocketspark.protocol.queue",
    "ConsumeFromWhere": "rocketspark.protocol.body.heartbeat",
    "MessageModel": "rocketspark.protocol.body.heartbeat",
    "TlsHandshakeError": "rocketspark.errors",
    "SessionCredentials": "rocketspark.remoting.signing",
    "TlsTrust": "rocketspark.remoting.tls",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rocketspark' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "AccessDeniedError",
    "AsyncLitePullConsumer",
    "AsyncProducer",
    "AsyncPushConsumer",
    "AsyncTransactionProducer",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "HalfMessage",
    "LitePullConsumer",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "Producer",
    "PushConsumer",
    "RocketMQError",
    "SendResult",
    "SendStatus",
    "SessionCredentials",
    "TlsHandshakeError",
    "TlsTrust",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionStatus",
    "__version__",
]

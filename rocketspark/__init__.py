"""rocketspark: RocketMQ for PySpark.

The client library::

    from rocketspark import Producer, LitePullConsumer, Message

    with Producer("my-producer", namesrv_addr="127.0.0.1:9876") as producer:
        producer.send(Message("Orders", b"hello", tags="new"))

`AsyncProducer` and `AsyncLitePullConsumer` are the asyncio versions. Every error derives from
`RocketMQError`.
"""

from rocketspark.client.api.send import SendResult, SendStatus
from rocketspark.client.lite_pull import AsyncLitePullConsumer
from rocketspark.client.producer import AsyncProducer
from rocketspark.client.sync import LitePullConsumer, Producer
from rocketspark.errors import RocketMQError
from rocketspark.message.message import Message, MessageExt
from rocketspark.message.queue import MessageQueue
from rocketspark.remoting.body.heartbeat import ConsumeFromWhere, MessageModel

__version__ = "0.1.0"

__all__ = [
    "AsyncLitePullConsumer",
    "AsyncProducer",
    "ConsumeFromWhere",
    "LitePullConsumer",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "Producer",
    "RocketMQError",
    "SendResult",
    "SendStatus",
    "__version__",
]

"""Failed messages go back to the broker: the group's %RETRY% topic redelivers them later.

As Java's DefaultMQPushConsumerImpl.sendMessageBack, in clustering mode: CONSUMER_SEND_MSG_BACK to
the broker the message came from (which stores it in %RETRY%<group> with a growing delay, or in
%DLQ%<group> once its reconsume times reach `max_reconsume_times`); if that fails, an ordinary send
of the message to %RETRY%<group> carrying the reconsume times (the broker applies the same limit);
if that fails too, the caller retries it locally. Messages redelivered from the retry topic show
their original topic again (Java's resetRetryAndNamespace).
"""

from __future__ import annotations

import logging
import time

from rocketspark.client.api.send import send_back, send_message
from rocketspark.client.instance import ClientInstance
from rocketspark.errors import RocketMQError
from rocketspark.message.message import MessageExt
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import AUTO_CREATE_TOPIC_KEY, FIRST_RETRY_DELAY_LEVEL, retry_topic
from rocketspark.protocol.headers.send import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader

log = logging.getLogger(__name__)

#: RPC timeout of a send-back (Java: 5 s)
SEND_BACK_TIMEOUT_S = 5.0
#: client-side properties that are not sent back
_NOT_SENT_BACK = (props.MIN_OFFSET, props.MAX_OFFSET, props.TRANSACTION_PREPARED)


def restore_original_topics(messages: list[MessageExt], group: str) -> None:
    """Messages of the group's retry topic are shown under the topic they were first sent to."""
    own_retry_topic = retry_topic(group)
    for message in messages:
        original = message.properties.get(props.RETRY_TOPIC)
        if message.topic == own_retry_topic and original:
            message.topic = original


class MessageReturner:
    def __init__(self, instance: ClientInstance, group: str, max_reconsume_times: int) -> None:
        self.instance = instance
        self.group = group
        self.max_reconsume_times = max_reconsume_times

    async def return_message(self, broker_name: str, message: MessageExt) -> bool:
        """Return `message` (pulled from `broker_name`) for a later retry; False if nothing took it."""
        header = ConsumerSendMsgBackRequestHeader(
            offset=message.commit_log_offset,
            group=self.group,
            delay_level=0,  # the broker's choice: 3 + the times consumed before
            origin_msg_id=message.msg_id,
            origin_topic=message.topic,
            max_reconsume_times=self.max_reconsume_times,
        )
        try:
            address = await self.instance.broker_address(broker_name)
            await send_back(self.instance.remoting, address, header, SEND_BACK_TIMEOUT_S)
        except RocketMQError as exc:
            log.warning(
                "group %s: sending message %s back failed (%s); sending it to %s instead",
                self.group,
                message.msg_id,
                exc,
                retry_topic(self.group),
            )
        else:
            return True
        try:
            await self._send_to_retry_topic(broker_name, message)
        except RocketMQError as exc:
            log.warning("group %s: message %s stays here for a local retry: %s", self.group, message.msg_id, exc)
            return False
        return True

    async def _send_to_retry_topic(self, broker_name: str, message: MessageExt) -> None:
        properties = {k: v for k, v in message.properties.items() if k not in _NOT_SENT_BACK}
        properties[props.RETRY_TOPIC] = properties.get(props.RETRY_TOPIC) or message.topic
        properties[props.ORIGIN_MESSAGE_ID] = properties.get(props.ORIGIN_MESSAGE_ID) or message.msg_id
        properties[props.DELAY_TIME_LEVEL] = str(FIRST_RETRY_DELAY_LEVEL + message.reconsume_times)
        topic = retry_topic(self.group)
        header = SendMessageRequestHeader(
            producer_group=self.group,
            topic=topic,
            default_topic=AUTO_CREATE_TOPIC_KEY,
            default_topic_queue_nums=1,
            queue_id=-1,  # the broker picks one
            sys_flag=0,  # the body was inflated when it was pulled
            born_timestamp=int(time.time() * 1000),
            flag=message.flag,
            properties=props.encode_properties(properties),
            reconsume_times=message.reconsume_times + 1,
            max_reconsume_times=self.max_reconsume_times,
        )
        address = await self.instance.broker_address(broker_name)
        await send_message(
            self.instance.remoting,
            address,
            broker_name,
            header,
            message.body,
            msg_id=message.msg_id,
            timeout_s=SEND_BACK_TIMEOUT_S,
        )

"""ACL on the bundled broker's batch forms of transactional messages (docs/protocol.md, "Extensions"):
a batch of half messages (ARROW_SEND_HALF_MESSAGE) needs PUB on its topic, as a send does, and a
range end (END_TRANSACTION_RANGE), whose header names no topic, needs PUB on the real topic of every
half message it ends, as END_TRANSACTION does: an account denied the topic neither sends nor ends."""

from __future__ import annotations

import pyarrow as pa

from rocketspark.message.batches.ipc import ipc_stream
from rocketspark.message.batches.producer import producer_batch
from rocketspark.message.batches.schema import PRODUCER_SCHEMA
from rocketspark.message.properties import codec as props
from rocketspark.message.sysflag import TRANSACTION_COMMIT_TYPE
from rocketspark.protocol.codes import ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.send import ArrowSendResponseHeader
from rocketspark.protocol.headers.transaction import (
    EndTransactionRangeRequestHeader,
    EndTransactionRangeResponseHeader,
)
from rocketspark.remoting.signing import SessionCredentials
from tests.integration.broker_client import send_header
from tests.integration.raw_frames import RawConnection
from tests.security.conftest import ADMIN, DENIED_TOPIC, USER, AclBroker, signed
from tests.security.test_acl_raw_frames import stored_count

GROUP = "txn_range_group"


def half_batch(topic: str, credentials: SessionCredentials) -> RemotingCommand:
    common = {props.TRANSACTION_PREPARED: "true", props.PRODUCER_GROUP: GROUP, props.TRANSACTION_ID: "t1"}
    rows = producer_batch(pa.table({"body": [b"a", b"b", b"c"], "uniq_key": ["U1", "U2", "U3"]}))
    header = send_header(topic, props=props.encode_properties(common))
    request = RemotingCommand(
        code=ExtensionCode.ARROW_SEND_HALF_MESSAGE,
        ext_fields=header.to_ext_fields(),
        body_view=ipc_stream(PRODUCER_SCHEMA, [rows]),
    )
    return signed(request, credentials)


def range_end(first: int, credentials: SessionCredentials) -> RemotingCommand:
    header = EndTransactionRangeRequestHeader(GROUP, "t1", first, first + 2, TRANSACTION_COMMIT_TYPE)
    return signed(RemotingCommand.request(ExtensionCode.END_TRANSACTION_RANGE, header), credentials)


async def test_batches_of_half_messages_and_their_range_ends_need_pub_on_the_topic(acl_broker: AclBroker) -> None:
    async with RawConnection(acl_broker.broker.address) as connection:
        refused = await connection.invoke(half_batch(DENIED_TOPIC, USER))
        assert refused.code == ResponseCode.NO_PERMISSION, refused.remark
        sent = await connection.invoke(half_batch(DENIED_TOPIC, ADMIN))
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        first = sent.decode_header(ArrowSendResponseHeader).queue_offset

        denied = await connection.invoke(range_end(first, USER))
        assert denied.code == ResponseCode.NO_PERMISSION
        assert denied.remark == f"No permission: PUB on topic {DENIED_TOPIC} for access key {USER.access_key}"
        assert await stored_count(connection, DENIED_TOPIC) == 0
        ended = await connection.invoke(range_end(first, ADMIN))  # still open: an account that may PUB ends it
        assert ended.code == ResponseCode.SUCCESS, ended.remark
        assert ended.decode_header(EndTransactionRangeResponseHeader).count == 3
        assert await stored_count(connection, DENIED_TOPIC) == 3

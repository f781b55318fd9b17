"""Ways around ACL that a signed account tried (issue 41, items 1, 2 and 5): a message of a topic the
account may not read copied into its group's retry topic, a transaction ended on a topic it may not
publish to, and VIEW_MESSAGE_BY_ID telling a refused message from a missing one."""

from __future__ import annotations

from typing import cast

from broker.acl.accounts import parse_acl
from broker.acl.guard import GuardedProcessorTable, late_refusal
from broker.acl.resources import end_transaction_needs
from broker.acl.validator import AccessValidator
from rocketspark.message.ids import decode_offset_msg_id
from rocketspark.message.records.decoding import decode_records
from rocketspark.message.sysflag import TRANSACTION_COMMIT_TYPE, TRANSACTION_PREPARED_TYPE
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.admin import ViewMessageRequestHeader
from rocketspark.protocol.headers.send import ConsumerSendMsgBackRequestHeader, SendMessageResponseHeader
from rocketspark.protocol.headers.transaction import EndTransactionRequestHeader
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.signing import SessionCredentials
from tests.integration.broker_client import properties
from tests.integration.raw_frames import RawConnection
from tests.security.conftest import ACCOUNTS, ADMIN, DENIED_TOPIC, READ_ONLY_TOPIC, USER, AclBroker, signed
from tests.security.test_acl_raw_frames import TOPIC, send_request, stored_count


async def commit_log_offset(connection: RawConnection, topic: str) -> int:
    sent = await connection.invoke(signed(send_request(topic, b"held in " + topic.encode()), ADMIN))
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    return decode_offset_msg_id(sent.decode_header(SendMessageResponseHeader).msg_id)[1]


def send_back(offset: int, group: str) -> RemotingCommand:
    header = ConsumerSendMsgBackRequestHeader(offset, group, delay_level=-1)  # straight to %DLQ%<group>
    return signed(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header), USER)


async def test_send_back_needs_sub_on_the_messages_own_topic(acl_broker: AclBroker) -> None:
    group = "holes_group"
    async with RawConnection(acl_broker.broker.address) as connection:
        denied = await commit_log_offset(connection, DENIED_TOPIC)
        allowed = await commit_log_offset(connection, TOPIC)
        refused = await connection.invoke(send_back(denied, group))
        assert refused.code == ResponseCode.NO_PERMISSION
        assert refused.remark == f"No permission: SUB on topic {DENIED_TOPIC} for access key {USER.access_key}"
        stored = await connection.invoke(send_back(allowed, group))
        assert stored.code == ResponseCode.SUCCESS, stored.remark
        assert await stored_count(connection, f"%DLQ%{group}") == 1  # only the allowed message was copied


def end_transaction(topic: str | None = None) -> RemotingCommand:
    header = EndTransactionRequestHeader("txn_group", 0, 0, TRANSACTION_COMMIT_TYPE, "UNIQ", topic=topic)
    return signed(RemotingCommand.request(RequestCode.END_TRANSACTION, header), USER)


class _Peer:
    """What the guard reads of a connection: its address and attributes."""

    remote_address = "10.1.2.3:50000"

    def __init__(self) -> None:
        self.attributes: dict[str, object] = {}


def test_end_transaction_needs_pub_on_the_half_messages_topic() -> None:
    validator = AccessValidator(parse_acl(ACCOUNTS, "accounts"))
    # the topic a 5.x client names in the header is checked before the processor runs
    assert validator.check("10.1.2.3", end_transaction(DENIED_TOPIC)) == (
        f"No permission: PUB on topic {DENIED_TOPIC} for access key {USER.access_key}"
    )
    assert validator.check("10.1.2.3", end_transaction(READ_ONLY_TOPIC)) is not None
    assert validator.check("10.1.2.3", end_transaction()) is None  # 4.x: the processor asks the rest
    # the processor's hook, with the REAL_TOPIC of the half message it read
    table = GuardedProcessorTable(validator)
    peer = cast(Connection, _Peer())
    request = end_transaction()
    refusal = late_refusal(table, peer, request, end_transaction_needs(DENIED_TOPIC))
    assert refusal == f"No permission: PUB on topic {DENIED_TOPIC} for access key {USER.access_key}"
    assert late_refusal(table, peer, request, end_transaction_needs(TOPIC)) is None
    assert late_refusal(ProcessorTable(), peer, request, end_transaction_needs(DENIED_TOPIC)) is None  # ACL off


async def test_viewing_a_refused_message_looks_like_viewing_none(acl_broker: AclBroker) -> None:
    """An offset msgId reaches any message of the commit log: the message's own topic is checked, and a
    refusal is answered as an offset without a message, so it maps no topic."""

    def view(offset: int, credentials: SessionCredentials = USER, topic: str | None = None) -> RemotingCommand:
        request = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset, topic))
        return signed(request, credentials)

    async with RawConnection(acl_broker.broker.address) as connection:
        denied = await commit_log_offset(connection, DENIED_TOPIC)
        allowed = await commit_log_offset(connection, TOPIC)
        nowhere = 10**12
        missing = await connection.invoke(view(nowhere))
        for request in (view(denied), view(denied, topic=TOPIC)):  # a topic in the header changes nothing
            refused = await connection.invoke(request)
            assert (refused.code, refused.remark, refused.body) == (
                missing.code,
                (missing.remark or "").replace(str(nowhere), str(denied)),
                missing.body,
            )
        assert missing.code == ResponseCode.SYSTEM_ERROR
        shown = await connection.invoke(view(allowed))
        assert shown.code == ResponseCode.SUCCESS, shown.remark
        assert decode_records(shown.body)[0].body == b"held in " + TOPIC.encode()
        by_admin = await connection.invoke(view(denied, ADMIN))
        assert by_admin.code == ResponseCode.SUCCESS, by_admin.remark


async def test_ending_a_half_message_needs_pub_on_its_real_topic(acl_broker: AclBroker) -> None:
    """A 4.x END_TRANSACTION names no topic: the processor reads the half message and asks PUB on its
    REAL_TOPIC, so an account denied the topic can neither commit nor roll back its half messages."""
    group = "txn_group"
    half = send_request(
        DENIED_TOPIC,
        b"half of " + DENIED_TOPIC.encode(),
        properties=properties(keys="k", TRAN_MSG="true", PGROUP=group),
        sys_flag=TRANSACTION_PREPARED_TYPE,
    )
    async with RawConnection(acl_broker.broker.address) as connection:
        sent = await connection.invoke(signed(half, ADMIN))
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        answer = sent.decode_header(SendMessageResponseHeader)
        offset = decode_offset_msg_id(answer.msg_id)[1]

        def end(credentials: SessionCredentials) -> RemotingCommand:
            header = EndTransactionRequestHeader(group, answer.queue_offset, offset, TRANSACTION_COMMIT_TYPE, "UNIQ")
            return signed(RemotingCommand.request(RequestCode.END_TRANSACTION, header), credentials)

        refused = await connection.invoke(end(USER))
        assert refused.code == ResponseCode.NO_PERMISSION
        assert refused.remark == f"No permission: PUB on topic {DENIED_TOPIC} for access key {USER.access_key}"
        committed = await connection.invoke(end(ADMIN))  # still open: an account that may PUB ends it
        assert committed.code == ResponseCode.SUCCESS, committed.remark

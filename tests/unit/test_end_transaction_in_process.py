"""END_TRANSACTION driven in process: no controller, no sockets, no broker started.

A half message is sent through SendMessageProcessor as a transactional producer sends it, and ended
through EndTransactionProcessor with the header the producer builds from the send's answer; the
real TransactionService and MessageStore (on tmp_path) do the work, and PullMessageProcessor shows
what consumers see. Requests are built and handled as in tests/unit/processor_parts.py.
"""

from __future__ import annotations

import pytest

from broker.processors.end_transaction import EndTransactionProcessor
from broker.processors.pull import PullMessageProcessor
from broker.processors.send import SendMessageProcessor
from rocketspark.message import sysflag
from rocketspark.message.ids import decode_offset_msg_id
from rocketspark.message.validation import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.send import SendMessageResponseHeader
from rocketspark.protocol.headers.transaction import EndTransactionRequestHeader
from rocketspark.remoting.processor import ProcessorTable
from tests.unit.processor_parts import (
    PRODUCER_GROUP,
    TOPIC,
    BrokerParts,
    EndTransactionParts,
    FakeChannel,
    PullParts,
    SendParts,
    handle,
    narrow,
    pull_request,
    pulled,
    registered,
    send_request,
)

QUEUE = 1
UNIQ_KEY = "TX-0001"


@pytest.fixture
def table(parts: BrokerParts) -> ProcessorTable:
    return registered(
        SendMessageProcessor(narrow(SendParts, parts)),
        PullMessageProcessor(narrow(PullParts, parts)),
        EndTransactionProcessor(narrow(EndTransactionParts, parts)),
    )


async def send_half(parts: BrokerParts, table: ProcessorTable) -> SendMessageResponseHeader:
    """Send a half message to TOPIC's queue QUEUE; check that consumers cannot see it yet."""
    request = send_request(
        b"half",
        queue_id=QUEUE,
        uniq_key=UNIQ_KEY,
        extra={"TRAN_MSG": "true", "PGROUP": PRODUCER_GROUP},
        sys_flag=sysflag.TRANSACTION_PREPARED_TYPE,
        code=RequestCode.SEND_MESSAGE_V2,
    )
    response = await handle(table, FakeChannel(), request)
    assert response.code == ResponseCode.SUCCESS, response.remark
    answer = response.decode_header(SendMessageResponseHeader)
    assert (answer.queue_id, answer.queue_offset) == (QUEUE, 0)  # the queue it was sent to, its half offset
    assert parts.store.max_offset(TRANS_HALF_TOPIC, 0) == 1
    assert parts.store.max_offset(TOPIC, QUEUE) == 0
    assert (await handle(table, FakeChannel(), pull_request(0, queue_id=QUEUE))).code == ResponseCode.PULL_NOT_FOUND
    return answer


def end_request(
    half: SendMessageResponseHeader, state: int, *, group: str = PRODUCER_GROUP, half_offset_shift: int = 0
) -> RemotingCommand:
    """END_TRANSACTION as the producer builds it from the half message's send result (two-way)."""
    _, commit_log_offset = decode_offset_msg_id(half.msg_id)
    header = EndTransactionRequestHeader(
        producer_group=group,
        tran_state_table_offset=half.queue_offset + half_offset_shift,
        commit_log_offset=commit_log_offset,
        commit_or_rollback=state,
        msg_id=UNIQ_KEY,
        from_transaction_check=False,
        transaction_id=UNIQ_KEY,
        topic=TOPIC,
    )
    return RemotingCommand.request(RequestCode.END_TRANSACTION, header)


async def test_a_commit_makes_the_half_message_visible(parts: BrokerParts, table: ProcessorTable) -> None:
    half = await send_half(parts, table)
    channel = FakeChannel()

    response = await handle(table, channel, end_request(half, sysflag.TRANSACTION_COMMIT_TYPE))
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert response.remark == "commit of the half message at offset 0 stored"
    assert parts.store.max_offset(TOPIC, QUEUE) == 1
    assert parts.store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 1  # its end record

    response = await handle(table, channel, pull_request(0, queue_id=QUEUE))
    assert response.code == ResponseCode.SUCCESS, response.remark
    [message] = pulled(response)
    assert (message.body, message.msg_id, message.topic, message.queue_id) == (b"half", UNIQ_KEY, TOPIC, QUEUE)
    assert sysflag.transaction_type(message.sys_flag) == sysflag.TRANSACTION_COMMIT_TYPE
    assert "TRAN_MSG" not in message.properties
    assert message.properties["TRAN_PREPARED_QUEUE_OFFSET"] == "0"

    # a second commit (a retry, or a check's answer) changes nothing; a rollback is refused
    response = await handle(table, channel, end_request(half, sysflag.TRANSACTION_COMMIT_TYPE))
    assert response.code == ResponseCode.SUCCESS
    assert response.remark == "the half message at offset 0 ended already"
    response = await handle(table, channel, end_request(half, sysflag.TRANSACTION_ROLLBACK_TYPE))
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark is not None and "was committed already" in response.remark
    assert parts.store.max_offset(TOPIC, QUEUE) == 1
    assert parts.store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 1


async def test_a_rollback_leaves_it_invisible(parts: BrokerParts, table: ProcessorTable) -> None:
    half = await send_half(parts, table)
    channel = FakeChannel()

    response = await handle(table, channel, end_request(half, sysflag.TRANSACTION_ROLLBACK_TYPE))
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert response.remark == "rollback of the half message at offset 0 stored"
    assert parts.store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 1

    response = await handle(table, channel, end_request(half, sysflag.TRANSACTION_ROLLBACK_TYPE))
    assert response.code == ResponseCode.SUCCESS
    assert response.remark == "the half message at offset 0 ended already"
    # a commit after the rollback (say, a check rolled it back first) is refused, not stored, also
    # once the check's progress moved past the half message
    for _ in range(2):
        response = await handle(table, channel, end_request(half, sysflag.TRANSACTION_COMMIT_TYPE))
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert response.remark is not None and "was rolled back already" in response.remark
        parts.transactions.state.advance(0)
        assert parts.transactions.state.next_half == 1
    assert parts.store.max_offset(TOPIC, QUEUE) == 0
    response = await handle(table, channel, pull_request(0, queue_id=QUEUE))
    assert response.code == ResponseCode.PULL_NOT_FOUND


@pytest.mark.parametrize(
    ("state", "fields", "code", "remark"),
    [
        (sysflag.TRANSACTION_COMMIT_TYPE, {"group": "other-producers"}, ResponseCode.SYSTEM_ERROR, "producer group"),
        (sysflag.TRANSACTION_COMMIT_TYPE, {"half_offset_shift": 1}, ResponseCode.SYSTEM_ERROR, "tranStateTableOffset"),
        (sysflag.TRANSACTION_PREPARED_TYPE, {}, ResponseCode.SYSTEM_ERROR, "is no transaction state"),
        (sysflag.TRANSACTION_NOT_TYPE, {}, ResponseCode.SUCCESS, "waits for the check"),  # state unknown
    ],
    ids=["other producer group", "other half offset", "prepared is no end", "unknown state"],
)
async def test_ends_that_end_nothing(
    parts: BrokerParts, table: ProcessorTable, state: int, fields: dict[str, object], code: ResponseCode, remark: str
) -> None:
    half = await send_half(parts, table)
    response = await handle(table, FakeChannel(), end_request(half, state, **fields))  # type: ignore[arg-type]
    assert response.code == code
    assert remark in (response.remark or "")
    assert parts.store.max_offset(TOPIC, QUEUE) == 0
    assert parts.store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 0
    # the half message can still be committed
    response = await handle(table, FakeChannel(), end_request(half, sysflag.TRANSACTION_COMMIT_TYPE))
    assert response.code == ResponseCode.SUCCESS
    assert parts.store.max_offset(TOPIC, QUEUE) == 1


async def test_an_end_naming_no_half_message(parts: BrokerParts, table: ProcessorTable) -> None:
    assert (await handle(table, FakeChannel(), send_request(b"plain", queue_id=0))).code == ResponseCode.SUCCESS
    plain = parts.store.commit_log.max_offset
    half = await send_half(parts, table)
    _, half_offset = decode_offset_msg_id(half.msg_id)
    assert half_offset >= plain > 0
    # the commit log offset of a message that is no half message (the plain one at 0), or of none at all
    for commit_log_offset in (0, 10**9):
        header = end_request(half, sysflag.TRANSACTION_COMMIT_TYPE).decode_header(EndTransactionRequestHeader)
        header.commit_log_offset = commit_log_offset
        request = RemotingCommand.request(RequestCode.END_TRANSACTION, header)
        response = await handle(table, FakeChannel(), request)
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert f"commit log offset {commit_log_offset}" in (response.remark or "")
    assert parts.store.max_offset(TOPIC, QUEUE) == 0
    assert parts.store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 0

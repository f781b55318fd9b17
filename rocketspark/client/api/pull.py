"""PULL_MESSAGE and the Arrow pull; `read_pull`, the pull of a reader that consumes nothing."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rocketspark.client.api.common import call
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.pull import FLAG_SUBSCRIPTION, PullMessageRequestHeader, PullMessageResponseHeader
from rocketspark.remoting.client import RemotingClient


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(frozen=True, slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    body: bytes  # standard records, or an Arrow IPC stream for Arrow pulls


async def pull_message(
    client: RemotingClient,
    broker_addr: str,
    header: PullMessageRequestHeader,
    *,
    arrow: bool = False,
    timeout_s: float | None = None,
) -> PullResult:
    code = ExtensionCode.ARROW_PULL_MESSAGE if arrow else RequestCode.PULL_MESSAGE
    response = await call(client, broker_addr, RemotingCommand.request(code, header), timeout_s, accept=tuple(_STATUS))
    answer = response.decode_header(PullMessageResponseHeader)
    return PullResult(
        _STATUS[ResponseCode(response.code)],
        answer.next_begin_offset,
        answer.min_offset,
        answer.max_offset,
        response.body,
    )


async def read_pull(
    client: RemotingClient,
    broker_addr: str,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_messages: int,
    timeout_s: float | None = None,
) -> PullResult:
    """A standard pull that only reads, as `group`: every tag, nothing committed, never held by
    the broker (no suspend): for looking at stored messages (their store times, a time range)."""
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_messages,
        sys_flag=FLAG_SUBSCRIPTION,
        commit_offset=0,
        suspend_timeout_millis=0,
        sub_version=0,
        subscription="*",
        expression_type="TAG",
    )
    return await pull_message(client, broker_addr, header, timeout_s=timeout_s)

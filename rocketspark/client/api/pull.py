"""PULL_MESSAGE and the Arrow pull."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rocketspark.client.api.common import call
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.pull import PullMessageRequestHeader, PullMessageResponseHeader
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

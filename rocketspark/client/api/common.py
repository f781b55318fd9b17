"""What every RPC helper shares: invoking and checking the response code."""

from __future__ import annotations

from rocketspark.errors import ResponseError
from rocketspark.protocol.codes import ResponseCode, code_name
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.client import RemotingClient


async def call(
    client: RemotingClient,
    address: str,
    request: RemotingCommand,
    timeout_s: float | None = None,
    *,
    accept: tuple[int, ...] = (ResponseCode.SUCCESS,),
) -> RemotingCommand:
    """Send `request`; raise the matching ResponseError unless the answer's code is in `accept`."""
    response = await client.invoke(address, request, timeout_s)
    if response.code not in accept:
        raise ResponseError.for_code(response.code, response.remark, f"{code_name(request.code)} to {address}")
    return response


def describe(code: int) -> str:
    return code_name(code, ResponseCode)

"""END_TRANSACTION (37): a producer ends a half message (commit, rollback or unknown); this project's
END_TRANSACTION_RANGE (31005): those of one transaction in a half-queue range, a step a request."""

from __future__ import annotations

from rocketspark.client.api.common import call
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.transaction import (
    EndTransactionRangeRequestHeader,
    EndTransactionRangeResponseHeader,
    EndTransactionRequestHeader,
)
from rocketspark.remoting.client import RemotingClient


async def end_transaction(
    client: RemotingClient,
    broker_addr: str,
    header: EndTransactionRequestHeader,
    *,
    oneway: bool = True,
    timeout_s: float | None = None,
) -> None:
    """Oneway, as Java's producer sends it; else wait until the broker stored the end (or refused it)."""
    request = RemotingCommand.request(RequestCode.END_TRANSACTION, header, oneway=oneway)
    if oneway:
        await client.invoke_oneway(broker_addr, request, timeout_s)
    else:
        await call(client, broker_addr, request, timeout_s)


async def end_transaction_range(
    client: RemotingClient, broker_addr: str, header: EndTransactionRangeRequestHeader, timeout_s: float | None = None
) -> EndTransactionRangeResponseHeader:
    """One step of a range end: where to go on and how many half messages of the transaction the
    step ended; RequestCodeNotSupportedError from brokers without the extension."""
    request = RemotingCommand.request(ExtensionCode.END_TRANSACTION_RANGE, header)
    response = await call(client, broker_addr, request, timeout_s)
    return response.decode_header(EndTransactionRangeResponseHeader)

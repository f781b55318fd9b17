"""END_TRANSACTION (37): a producer ends a half message (commit, rollback or unknown)."""

from __future__ import annotations

from rocketspark.client.api.common import call
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.transaction import EndTransactionRequestHeader
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

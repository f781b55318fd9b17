"""The client's signing hook: every request a RemotingClient sends, answered or oneway, reaches the
server with an `AccessKey` and a `Signature` that the secret verifies, computed over the request as
it went out; answers to requests the server sends are not signed; and the credentials given to the
producer and consumers reach the hook of their connections."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from collections.abc import AsyncIterator

import pytest

from rocketspark import AsyncLitePullConsumer, AsyncProducer, AsyncPushConsumer, SessionCredentials
from rocketspark.client.config import ClientConfig
from rocketspark.client.instance import ClientInstance
from rocketspark.errors import AccessDeniedError, NoPermissionError, ResponseError, ServerSystemError
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.client import RemotingClient
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.server import RemotingServer
from rocketspark.remoting.signing import AclClientRPCHook, sign, signature, verify

CREDENTIALS = SessionCredentials("rocketspark-ak", "s3cr3t-\u00e9", "token-1")
ECHO, ONEWAY, CALL_BACK = 9001, 9002, 9003


def test_signature_is_hmac_sha1_over_sorted_values_then_body() -> None:
    request = RemotingCommand(code=10, ext_fields={"b": "2", "a": "1", "c": "x\u00e9"}, body=b"BODY")
    sign(request, CREDENTIALS)
    # sorted keys: AccessKey, SecurityToken, a, b, c; the signature itself is not covered
    content = ("rocketspark-ak" + "token-1" + "1" + "2" + "x\u00e9").encode() + b"BODY"
    expected = base64.b64encode(hmac.new("s3cr3t-\u00e9".encode(), content, hashlib.sha1).digest()).decode()
    assert request.ext_fields["Signature"] == expected
    assert signature(CREDENTIALS.secret_key, request.ext_fields, request.body) == expected
    assert verify(request, CREDENTIALS.secret_key)
    assert not verify(request, "another secret")


def test_unique_key_query_added_after_signing_still_verifies() -> None:
    request = RemotingCommand(code=12, ext_fields={"topic": "T", "key": "k"})
    sign(request, CREDENTIALS)
    request.ext_fields["_UNIQUE_KEY_QUERY"] = "true"  # what Java adds after its hook ran
    assert verify(request, CREDENTIALS.secret_key)
    request.ext_fields["topic"] = "U"  # any other change breaks it
    assert not verify(request, CREDENTIALS.secret_key)


def test_secret_and_token_stay_out_of_reprs() -> None:
    request = RemotingCommand(code=10, ext_fields={"topic": "T"})
    sign(request, CREDENTIALS)
    shown = repr(CREDENTIALS) + repr(AclClientRPCHook(CREDENTIALS)) + repr(ClientConfig(credentials=CREDENTIALS))
    shown += repr(request)
    assert "rocketspark-ak" in shown
    assert CREDENTIALS.secret_key not in shown
    assert "token-1" not in shown


class _SigningChecker:
    """A real remoting server that records every request as it decoded it from the wire."""

    def __init__(self) -> None:
        self.received: list[RemotingCommand] = []
        self.oneway_arrived = asyncio.Event()
        self.table = ProcessorTable()
        self.table.register(ECHO, self._echo)
        self.table.register(ONEWAY, self._oneway)
        self.table.register(CALL_BACK, self._call_back)
        self.answers: list[RemotingCommand] = []

    def _echo(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        self.received.append(request)
        return request.response(body=request.body)

    def _oneway(self, connection: Connection, request: RemotingCommand) -> None:
        self.received.append(request)
        self.oneway_arrived.set()

    async def _call_back(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """Asks the client a question of its own before answering: the client's answer is not signed."""
        self.received.append(request)
        self.answers.append(await connection.invoke(RemotingCommand.request(ECHO, body=b"from server"), 5))
        return request.response()


@pytest.fixture
def checker() -> _SigningChecker:
    return _SigningChecker()


@pytest.fixture
async def server(checker: _SigningChecker) -> AsyncIterator[RemotingServer]:
    server = RemotingServer(checker.table)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_every_request_is_signed_on_its_way_out(server: RemotingServer, checker: _SigningChecker) -> None:
    client_table = ProcessorTable()
    client_table.register(ECHO, lambda _connection, request: request.response(body=request.body))
    client = RemotingClient(client_table, credentials=CREDENTIALS)
    try:
        answered = RemotingCommand.request(ECHO, body=b"payload")
        answered.ext_fields["topic"] = "Orders"
        await client.invoke(server.address, answered)
        await client.invoke_oneway(server.address, RemotingCommand.request(ONEWAY, body=b"fire"))
        await asyncio.wait_for(checker.oneway_arrived.wait(), 5)
        await client.invoke(server.address, RemotingCommand.request(CALL_BACK))
    finally:
        await client.close()
    assert [r.code for r in checker.received] == [ECHO, ONEWAY, CALL_BACK]
    for request in checker.received:
        assert request.ext_fields["AccessKey"] == "rocketspark-ak"
        assert request.ext_fields["SecurityToken"] == "token-1"
        assert verify(request, CREDENTIALS.secret_key), request
    assert checker.received[0].ext_fields["topic"] == "Orders"
    assert checker.received[1].is_oneway
    # the client's answer to the server's own request carries no signature
    (answer,) = checker.answers
    assert answer.body == b"from server"
    assert not {"AccessKey", "Signature"} & answer.ext_fields.keys()


async def test_the_hook_sees_the_request_last(server: RemotingServer, checker: _SigningChecker) -> None:
    """A request re-sent after a change (as the name-server failover re-sends with a new opaque)
    is signed again over what it holds now; a hook of one's own sees every request."""
    seen: list[int] = []

    class Counting:
        def before_request(self, address: str, request: RemotingCommand) -> None:
            seen.append(request.code)
            sign(request, CREDENTIALS)

    client = RemotingClient(rpc_hook=Counting())
    try:
        request = RemotingCommand.request(ECHO, body=b"one")
        await client.invoke(server.address, request)
        request.body = b"two"
        request.ext_fields["extra"] = "added later"
        await client.invoke(server.address, request)
    finally:
        await client.close()
    assert seen == [ECHO, ECHO]
    assert [verify(r, CREDENTIALS.secret_key) for r in checker.received] == [True, True]
    assert checker.received[1].ext_fields["extra"] == "added later"


def test_rpc_hook_and_credentials_are_exclusive() -> None:
    with pytest.raises(ValueError, match="not both"):
        RemotingClient(rpc_hook=AclClientRPCHook(CREDENTIALS), credentials=CREDENTIALS)


async def test_credentials_reach_the_connections_of_every_client() -> None:
    """`credentials=` of the producer and consumers end in their instance's signing hook; clients
    with other credentials (or none) never share an instance."""
    namesrv = "127.0.0.1:1"  # never contacted: only the instances are looked at
    producer = AsyncProducer("signing-p", namesrv_addr=namesrv, credentials=CREDENTIALS)
    lite = AsyncLitePullConsumer("signing-l", namesrv_addr=namesrv, credentials=CREDENTIALS)
    push = AsyncPushConsumer("signing-c", namesrv_addr=namesrv, credentials=CREDENTIALS)
    for config in (producer.client_config, lite.client_config, push.client_config):
        assert config.credentials == CREDENTIALS
    signed = await ClientInstance.acquire(producer.client_config)
    same = await ClientInstance.acquire(lite.client_config)
    other = await ClientInstance.acquire(ClientConfig(namesrv_addr=namesrv, credentials=SessionCredentials("x", "y")))
    unsigned = await ClientInstance.acquire(ClientConfig(namesrv_addr=namesrv))
    try:
        assert same is signed
        assert len({id(signed), id(other), id(unsigned)}) == 3
        assert isinstance(signed.remoting.rpc_hook, AclClientRPCHook)
        assert signed.remoting.rpc_hook.credentials == CREDENTIALS
        assert unsigned.remoting.rpc_hook is None
    finally:
        for instance in (signed, same, other, unsigned):
            await instance.release()


@pytest.mark.parametrize(
    ("code", "remark", "expected", "reason"),
    [
        (16, "No permission: PUB on topic Orders for access key ak", AccessDeniedError, "PUB on topic Orders"),
        (16, "the topic[Orders] sending message is forbidden", NoPermissionError, "Orders] sending message"),
        (
            1,
            "org.apache.rocketmq.acl.common.AclException: No default permission for Orders, "
            "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:451)",
            AccessDeniedError,
            "send failed with SYSTEM_ERROR(1): No default permission for Orders",
        ),
        (1, "java.lang.NullPointerException", ServerSystemError, "NullPointerException"),
    ],
)
def test_refusals_map_to_access_denied(code: int, remark: str, expected: type[ResponseError], reason: str) -> None:
    error = ResponseError.for_code(code, remark, "send")
    assert type(error) is expected
    assert reason in str(error)
    assert error.remark == remark
    assert not error.retriable
    if expected is AccessDeniedError:
        assert isinstance(error, NoPermissionError)
        assert "PlainPermissionManager.java" not in str(error)

"""docs/protocol.md's RocketMQ 5.x table tells the truth: every RPC of the service is listed, those it
says are served answer something other than NOT_IMPLEMENTED, the others answer NOT_IMPLEMENTED."""

from __future__ import annotations

import re
from pathlib import Path

import grpc
from google.protobuf.message import Message

from broker.grpc.v2 import definition_pb2 as pb
from broker.grpc.v2 import service_pb2 as service
from tests.harness import ServerFactory
from tests.interop.v5.servers import grpc_broker

PROTOCOL = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
HEADERS = [("x-mq-client-id", "table-test@1"), ("x-mq-language", "PYTHON")]
SERVICE = service.DESCRIPTOR.services_by_name["MessagingService"]


def documented() -> dict[str, bool]:
    """RPC -> served, from the table of the section "RocketMQ 5.x (gRPC)"."""
    section = re.search(r"^## RocketMQ 5\.x \(gRPC\)\n(.*?)(?=^## )", PROTOCOL, re.M | re.S)
    assert section, "docs/protocol.md has no section 'RocketMQ 5.x (gRPC)'"
    table = re.search(r"^\| RPC \|.*?\n((?:\|.*\n)+)", section.group(1), re.M)
    assert table, "no table of RPCs"
    rows = {}
    for row in table.group(1).splitlines()[1:]:
        names, served = row.split("|")[1:3]
        for name in re.findall(r"`(\w+)`", names):
            rows[name] = served.strip() == "yes"
    return rows


def test_every_rpc_is_in_the_table() -> None:
    assert set(documented()) == {method.name for method in SERVICE.methods}


async def test_documented_rpcs_are_served_and_the_others_are_not(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    _, endpoint = grpc_broker(servers, namesrv.address)
    table = documented()
    async with grpc.aio.insecure_channel(endpoint) as channel:
        answers: dict[str, int] = {}
        for method in SERVICE.methods:
            if method.client_streaming:  # Telemetry: its answer to settings is checked by test_grpc_wire.py
                continue
            request_type = service.__dict__[method.input_type.name]
            response_type = service.__dict__[method.output_type.name]
            path = f"/{SERVICE.full_name}/{method.name}"
            request: Message = request_type()
            if method.server_streaming:
                stream = channel.unary_stream(path, request_type.SerializeToString, response_type.FromString)
                first = await stream(request, metadata=HEADERS, timeout=30).read()
                answers[method.name] = first.status.code
            else:
                call = channel.unary_unary(path, request_type.SerializeToString, response_type.FromString)
                answers[method.name] = (await call(request, metadata=HEADERS, timeout=30)).status.code
    wrong = {name: pb.Code.Name(code) for name, code in answers.items() if (code == pb.NOT_IMPLEMENTED) == table[name]}
    assert not wrong, f"answers that contradict docs/protocol.md: {wrong}"

"""ACL on the gRPC endpoint: the official 5.x Python client signs with its `Credentials` against the
same plain_acl.yml and rules as the 4.x port (broker/grpc/auth.py).

A producer with its account's secret sends; a wrong secret, no credentials and an unknown access key
are refused UNAUTHORIZED; an account without PUB on the topic is refused FORBIDDEN; a SimpleConsumer
needs SUB on the topic and on its group. The same account works on the 4.x port.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketspark import Message, Producer, SessionCredentials
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all
from tests.interop.v5.driver import V5Client, V5Error, V5Message
from tests.interop.v5.servers import grpc_broker

pytestmark = pytest.mark.interop

WRITER = ("v5_writer", "writer-secret-1")
READER = ("v5_reader", "reader-secret-2")
TOPIC, OTHER_TOPIC, GROUP, OTHER_GROUP = "v5_acl", "v5_acl_other", "v5_acl_group", "v5_acl_other_group"
ACCOUNTS = f"""
accounts:
  - accessKey: {WRITER[0]}
    secretKey: {WRITER[1]}
    defaultTopicPerm: DENY
    topicPerms: [{TOPIC}=PUB]
  - accessKey: {READER[0]}
    secretKey: {READER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{TOPIC}=SUB, {OTHER_TOPIC}=SUB]
    groupPerms: [{GROUP}=SUB]
"""


@pytest.fixture
def acl_endpoint(servers: ServerFactory, tmp_path: Path) -> tuple[str, str, str]:
    """(name server, 4.x broker address, gRPC endpoint) of a broker with ACL on."""
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text(ACCOUNTS)
    namesrv = servers.namesrv()
    broker, endpoint = grpc_broker(
        servers, namesrv.address, "--set", "aclEnable=true", "--set", f"plainAclFile={accounts}"
    )
    return namesrv.address, broker.address, endpoint


class ClientLog:
    """The 5.x client's log (in the `v5` fixture's HOME), where it writes the status its calls got."""

    def __init__(self, home: Path) -> None:
        self.path = home / "logs" / "rocketmq_python" / "rocketmq_client.log"
        self.seen = 0

    def new_lines(self) -> str:
        text = self.path.read_text(errors="replace") if self.path.exists() else ""
        new, self.seen = text[self.seen :], len(text)
        return new


def refused(v5: V5Client, log: ClientLog, endpoint: str, topic: str, **credentials: str) -> str:
    """The status the client was refused with (at start-up, or at its first send), from its log."""
    log.new_lines()
    with pytest.raises(V5Error):
        producer = v5.producer(endpoint, topics=[topic], **credentials)
        producer.send(V5Message(topic, "refused"))
    return log.new_lines()


async def test_signed_calls_pass_and_the_others_are_refused(
    acl_endpoint: tuple[str, str, str], v5: V5Client, tmp_path: Path
) -> None:
    namesrv, broker, endpoint = acl_endpoint
    log = ClientLog(tmp_path / "v5-home")
    writer = dict(access_key=WRITER[0], secret_key=WRITER[1])
    producer = v5.producer(endpoint, topics=[TOPIC], **writer)
    receipt = producer.send(V5Message(TOPIC, "signed"))
    producer.shutdown()

    wrong = refused(v5, log, endpoint, TOPIC, access_key=WRITER[0], secret_key="not-the-secret")
    assert "40100, the QueryRoute call's signature does not match for access key v5_writer" in wrong  # UNAUTHORIZED
    assert "40100, the QueryRoute call is not signed" in refused(v5, log, endpoint, TOPIC)
    unknown = refused(v5, log, endpoint, TOPIC, access_key="nobody_here", secret_key="x" * 8)
    assert "40100, access key nobody_here has no account" in unknown
    forbidden = refused(v5, log, endpoint, OTHER_TOPIC, **writer)
    assert f"40300, No permission: PUB or SUB on topic {OTHER_TOPIC} for access key v5_writer" in forbidden

    reader = dict(access_key=READER[0], secret_key=READER[1])
    consumer = v5.simple_consumer(endpoint, GROUP, {TOPIC: "*"}, **reader)
    (message,) = consumer.receive(max_messages=1, invisible_s=10)
    assert message.message_id == receipt.message_id
    consumer.ack(message)
    consumer.shutdown()
    other = v5.simple_consumer(endpoint, OTHER_GROUP, {TOPIC: "*"}, **reader)
    with pytest.raises(V5Error, match=f"40300, No permission: SUB on group {OTHER_GROUP} for access key v5_reader"):
        other.receive(max_messages=1, invisible_s=10)

    # the same account, on the 4.x port
    with Producer("v5_acl_4x", namesrv_addr=namesrv, credentials=SessionCredentials(*WRITER)) as producer4:
        producer4.send(Message(TOPIC, b"from 4.x"))
    remoting = RemotingClient(credentials=SessionCredentials(*READER))
    try:
        stored = [m.body for q in range(8) for m in await pull_all(remoting, broker, TOPIC, q, group=GROUP)]
    finally:
        await remoting.close()
    assert sorted(stored) == [b"from 4.x", b"signed"]

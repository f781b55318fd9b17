"""The broker's ACL against raw frames: unsigned, tampered and replayed requests are refused with
NO_PERMISSION (16), nothing of them is stored, and the same connection serves the next good request."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from broker.acl.accounts import parse_acl
from broker.acl.addresses import client_ip
from broker.acl.resources import RULES
from broker.acl.validator import AccessValidator
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.admin import CreateTopicRequestHeader
from rocketspark.protocol.headers.offset import QueueRequestHeader
from rocketspark.protocol.headers.pull import FLAG_SUBSCRIPTION, PullMessageRequestHeader
from rocketspark.protocol.headers.send import SendMessageRequestHeader, encode_send_header
from rocketspark.remoting.signing import SessionCredentials
from tests.harness import ServerFactory
from tests.integration.broker_client import properties, send_header
from tests.integration.raw_frames import RawConnection, arrow_send_request, producer_rows
from tests.security.conftest import (
    ACCOUNTS,
    ADMIN,
    DENIED_GROUP,
    DENIED_TOPIC,
    READ_ONLY_TOPIC,
    TRUSTED_KEY,
    USER,
    AclBroker,
    signed,
    start_acl_broker,
)

TOPIC = "AclRawTopic"


def send_request(topic: str, body: bytes, **changes: object) -> RemotingCommand:
    header = dataclasses.replace(send_header(topic, props=properties(keys="k")), **changes)  # type: ignore[arg-type]
    code = RequestCode.SEND_MESSAGE_V2
    return RemotingCommand(code=code, opaque=_next(), ext_fields=encode_send_header(header, code), body=body)


def max_offset_request(topic: str) -> RemotingCommand:
    return signed(RemotingCommand.request(RequestCode.GET_MAX_OFFSET, QueueRequestHeader(topic, 0)), ADMIN)


def pull_request(topic: str, group: str) -> RemotingCommand:
    header = PullMessageRequestHeader(group, topic, 0, 0, 32, FLAG_SUBSCRIPTION, 0, 0, 0, "*", "TAG")
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header)


_opaques = iter(range(1_000_000, 2_000_000))


def _next() -> int:
    return next(_opaques)


async def stored_count(connection: RawConnection, topic: str) -> int:
    response = await connection.invoke(max_offset_request(topic))
    assert response.code == ResponseCode.SUCCESS, response.remark
    return int(response.ext_fields["offset"])


async def test_unsigned_tampered_and_replayed_requests_are_refused(acl_broker: AclBroker) -> None:
    async with RawConnection(acl_broker.broker.address) as connection:
        good = await connection.invoke(signed(send_request(TOPIC, b"first"), USER))
        assert good.code == ResponseCode.SUCCESS, good.remark
        assert await stored_count(connection, TOPIC) == 1

        unsigned = await connection.invoke(send_request(TOPIC, b"unsigned"))
        tampered_body = signed(send_request(TOPIC, b"as signed"), USER)
        tampered_body.body = b"changed after signing"
        tampered_header = signed(send_request(TOPIC, b"header"), USER)
        tampered_header.ext_fields["b"] = READ_ONLY_TOPIC + "X"  # another topic than the one signed
        replayed = send_request(TOPIC, b"another body")
        original = signed(send_request(TOPIC, b"signed body"), USER)
        replayed.ext_fields = dict(original.ext_fields)  # the same header, signature included
        wrong_secret = signed(send_request(TOPIC, b"wrong secret"), SessionCredentials(USER.access_key, "not-it-123"))
        refusals = [unsigned] + [
            await connection.invoke(request) for request in (tampered_body, tampered_header, replayed, wrong_secret)
        ]
        for response in refusals:
            assert response.code == ResponseCode.NO_PERMISSION
        # each refusal names the permission and the resource the request needs
        needs = f"(needs PUB on topic {TOPIC})"
        assert (
            unsigned.remark
            == f"No permission: SEND_MESSAGE_V2(310) carries no AccessKey; this broker needs signed requests {needs}"
        )
        mismatch = f"No permission: signature does not match for access key {USER.access_key}"
        assert [r.remark for r in refusals[1:]] == [
            f"{mismatch} {needs}",
            f"{mismatch} (needs PUB on topic {READ_ONLY_TOPIC}X)",
            f"{mismatch} {needs}",
            f"{mismatch} {needs}",
        ]
        assert all(USER.secret_key not in (r.remark or "") for r in refusals)

        # the same connection serves on, and none of the refused sends was stored
        again = await connection.invoke(signed(send_request(TOPIC, b"second"), USER))
        assert again.code == ResponseCode.SUCCESS, again.remark
        assert await stored_count(connection, TOPIC) == 2


async def test_unknown_key_deny_and_read_only_are_refused_with_the_resource(acl_broker: AclBroker) -> None:
    unknown = SessionCredentials("nobody_here", "whatever-123")
    async with RawConnection(acl_broker.broker.address) as connection:
        cases = [
            (
                signed(send_request(TOPIC, b"x"), unknown),
                f"access key nobody_here has no account on this broker (needs PUB on topic {TOPIC})",
            ),
            (
                pull_request(TOPIC, "some_group"),  # unsigned
                f"carries no AccessKey; this broker needs signed requests (needs SUB on topic {TOPIC}, "
                "SUB on group some_group)",
            ),
            (signed(send_request(DENIED_TOPIC, b"x"), USER), f"PUB on topic {DENIED_TOPIC}"),
            (signed(send_request(READ_ONLY_TOPIC, b"x"), USER), f"PUB on topic {READ_ONLY_TOPIC}"),
            (signed(pull_request(DENIED_TOPIC, "some_group"), USER), f"SUB on topic {DENIED_TOPIC}"),
            (signed(pull_request(TOPIC, DENIED_GROUP), USER), f"SUB on group {DENIED_GROUP}"),
            # a send to a retry topic is its group's business
            (signed(send_request("%RETRY%" + DENIED_GROUP, b"x"), USER), f"SUB on group {DENIED_GROUP}"),
        ]
        for request, reason in cases:
            response = await connection.invoke(request)
            assert response.code == ResponseCode.NO_PERMISSION, (reason, response.remark)
            assert reason in (response.remark or ""), response.remark
        for topic in (DENIED_TOPIC, READ_ONLY_TOPIC, TOPIC):
            assert await stored_count(connection, topic) == 0
        read_only = await connection.invoke(signed(pull_request(READ_ONLY_TOPIC, "some_group"), USER))
        assert read_only.code != ResponseCode.NO_PERMISSION, read_only.remark


async def test_topic_creation_needs_an_admin_account(acl_broker: AclBroker) -> None:
    def create(topic: str) -> RemotingCommand:
        header = CreateTopicRequestHeader(topic, "TBW102", 4, 4, 6)
        return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header)

    async with RawConnection(acl_broker.broker.address) as connection:
        refused = await connection.invoke(signed(create("ByUser"), USER))
        assert refused.code == ResponseCode.NO_PERMISSION
        assert refused.remark == (
            f"No permission: UPDATE_AND_CREATE_TOPIC(17) needs an admin account, "
            f"and access key {USER.access_key} is not one"
        )
        created = await connection.invoke(signed(create("ByAdmin"), ADMIN))
        assert created.code == ResponseCode.SUCCESS, created.remark


async def test_arrow_send_and_batch_send_need_pub(acl_broker: AclBroker) -> None:
    header = SendMessageRequestHeader(**{**dataclasses.asdict(send_header(DENIED_TOPIC)), "properties": None})
    async with RawConnection(acl_broker.broker.address) as connection:
        arrow = await connection.invoke(signed(arrow_send_request(header, producer_rows([b"a", b"b"])), USER))
        assert arrow.code == ResponseCode.NO_PERMISSION
        assert f"PUB on topic {DENIED_TOPIC}" in (arrow.remark or "")
        allowed = dataclasses.replace(header, topic=TOPIC)
        stored = await connection.invoke(signed(arrow_send_request(allowed, producer_rows([b"a", b"b"])), USER))
        assert stored.code == ResponseCode.SUCCESS, stored.remark
        assert await stored_count(connection, DENIED_TOPIC) == 0
        assert await stored_count(connection, TOPIC) == 2


async def test_an_address_on_the_accounts_white_list_skips_the_signature(acl_broker: AclBroker) -> None:
    async with RawConnection(acl_broker.broker.address) as connection:
        request = send_request(TOPIC, b"trusted")
        request.ext_fields["AccessKey"] = TRUSTED_KEY  # and no signature at all
        response = await connection.invoke(request)
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert await stored_count(connection, TOPIC) == 1


async def test_an_unreadable_header_is_answered_as_its_processor_would(acl_broker: AclBroker) -> None:
    request = signed(pull_request(TOPIC, "some_group"), USER)
    del request.ext_fields["consumerGroup"]
    request.ext_fields["Signature"] = signed(request, USER).ext_fields["Signature"]
    async with RawConnection(acl_broker.broker.address) as connection:
        response = await connection.invoke(request)
    assert response.code == ResponseCode.INVALID_PARAMETER
    assert "consumerGroup" in (response.remark or "")


async def test_the_global_white_list_needs_no_access_key(servers: ServerFactory, tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("globalWhiteRemoteAddresses:\n  - 127.0.0.*\n" + ACCOUNTS.split("\n", 3)[3])
    acl = start_acl_broker(servers, acl_file)
    async with RawConnection(acl.broker.address) as connection:
        unsigned = await connection.invoke(send_request(DENIED_TOPIC, b"from a trusted address"))
        assert unsigned.code == ResponseCode.SUCCESS, unsigned.remark
        assert await stored_count(connection, DENIED_TOPIC) == 1


def test_a_code_without_a_rule_needs_an_admin_account() -> None:
    validator = AccessValidator(parse_acl(ACCOUNTS, "accounts"))
    unlisted = RequestCode.WIPE_WRITE_PERM_OF_BROKER
    assert unlisted not in RULES
    refusal = validator.check("10.1.2.3", signed(RemotingCommand.request(unlisted), USER))
    expected = f"needs an admin account, and access key {USER.access_key} is not one"
    assert refusal == f"No permission: WIPE_WRITE_PERM_OF_BROKER(205) {expected}"
    assert validator.check("10.1.2.3", signed(RemotingCommand.request(unlisted), ADMIN)) is None


def test_refusals_before_the_permission_step_name_what_the_request_needs() -> None:
    validator = AccessValidator(parse_acl(ACCOUNTS, "accounts"))
    unlisted = RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER)
    assert validator.check("10.1.2.3", unlisted) == (
        "No permission: WIPE_WRITE_PERM_OF_BROKER(205) carries no AccessKey; this broker needs signed requests "
        "(needs an admin account)"
    )
    unreadable = pull_request(TOPIC, "some_group")
    del unreadable.ext_fields["consumerGroup"]  # the refusal stands without the needs it cannot read
    assert validator.check("10.1.2.3", unreadable) == (
        "No permission: PULL_MESSAGE(11) carries no AccessKey; this broker needs signed requests"
    )


def test_client_addresses_are_matched_by_their_ip() -> None:
    assert client_ip("127.0.0.1:50123") == "127.0.0.1"
    assert client_ip("::ffff:10.0.0.9:50123") == "10.0.0.9"
    assert client_ip("::1:50123") == "::1"

"""A captured signature cannot be re-aimed at another request code (issue 41, item 3).

ACL 1.0 signs the field values joined in key order, not the code nor the field names: an admin's
UPDATE_AND_CREATE_TOPIC(Orders) re-keyed as DELETE_TOPIC_IN_BROKER with the values arranged to give
the same joined text carries the same valid signature. The shape check (broker.acl.shapes) refuses it,
and a signed request missing a field its code requires; the extra fields real clients send pass
(the real client's tests in test_acl_real_client.py and our client's in test_client_acl.py run through
the same check)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from broker.acl.accounts import parse_acl
from broker.acl.validator import AccessValidator
from broker.config import BrokerConfig
from rocketspark.errors import HeaderFieldError
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.admin import CreateTopicRequestHeader
from rocketspark.remoting.signing import SIGNATURE, verify
from rocketspark.remoting.tls import TlsMode
from tests.integration.raw_frames import RawConnection
from tests.security.conftest import ACCOUNTS, ADMIN, USER, AclBroker, signed
from tests.security.test_acl_raw_frames import TOPIC, max_offset_request, pull_request, send_request
from tests.tls.certs import make_certificates

IP = "10.1.2.3"


def create(topic: str) -> RemotingCommand:
    header = CreateTopicRequestHeader(topic, "TBW102", 4, 4, 6)
    return signed(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header), ADMIN)


def joined_values(fields: dict[str, str]) -> str:
    return "".join(value for key, value in sorted(fields.items()) if key != SIGNATURE)


def reaimed_as_delete(captured: RemotingCommand, filler: tuple[str, str]) -> RemotingCommand:
    """DELETE_TOPIC_IN_BROKER(topic) whose fields join to the captured request's text: the values
    before `topic` go in one field named `filler[0]`, those after it in one named `filler[1]`."""
    fields = captured.ext_fields
    keys = [key for key in sorted(fields) if key not in (SIGNATURE, "AccessKey")]
    at = keys.index("topic")
    before = "".join(fields[key] for key in keys[:at])
    after = "".join(fields[key] for key in keys[at + 1 :])
    ext = {"AccessKey": fields["AccessKey"], filler[0]: before, "topic": fields["topic"], filler[1]: after}
    ext[SIGNATURE] = fields[SIGNATURE]
    request = RemotingCommand(code=RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields=ext)
    assert joined_values(ext) == joined_values(fields)
    assert verify(request, ADMIN.secret_key)  # the signature itself holds: only the shape tells
    return request


def test_a_signature_re_aimed_at_another_code_is_refused() -> None:
    validator = AccessValidator(parse_acl(ACCOUNTS, "accounts"))
    captured = create("Orders")
    assert validator.check(IP, captured) is None
    with_header_fields = reaimed_as_delete(captured, ("defaultTopic", "topicFilterType"))
    assert validator.check(IP, with_header_fields) == (
        "No permission: DELETE_TOPIC_IN_BROKER(215) carries 'defaultTopic', a header field of another request: "
        "a signature covers one request code's fields"
    )
    with_unknown_names = reaimed_as_delete(captured, ("bb", "zz"))  # names no header declares
    assert validator.check(IP, with_unknown_names) == (
        "No permission: DELETE_TOPIC_IN_BROKER(215) needs an admin account and carries 'bb', no field of its header"
    )


def test_another_codes_field_and_a_missing_field_are_refused_and_client_extras_pass() -> None:
    validator = AccessValidator(parse_acl(ACCOUNTS, "accounts"))
    pull = pull_request(TOPIC, "some_group")
    pull.ext_fields["defaultTopic"] = "TBW102"  # SEND_MESSAGE's field on a pull
    refusal = validator.check(IP, signed(pull, USER))
    assert refusal is not None and "PULL_MESSAGE(11) carries 'defaultTopic'" in refusal

    missing = pull_request(TOPIC, "some_group")
    del missing.ext_fields["queueOffset"]
    with pytest.raises(HeaderFieldError, match="PULL_MESSAGE\\(11\\) lacks the required header field 'queueOffset'"):
        validator.check(IP, signed(missing, USER))

    extras = pull_request(TOPIC, "some_group")
    extras.ext_fields.update({"OnsChannel": "ALIYUN", "bname": "broker-a", "lo": "true", "unknownToAll": "x"})
    assert validator.check(IP, signed(extras, USER)) is None
    long_names = send_request(TOPIC, b"x")  # SEND_MESSAGE_V2 under SEND_MESSAGE's long names is decoded too
    long_names.ext_fields = {
        {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId"}.get(
            k, {"f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties"}.get(k, k)
        ): v
        for k, v in long_names.ext_fields.items()
    }
    assert validator.check(IP, signed(long_names, USER)) is None


async def test_the_broker_refuses_a_re_aimed_delete(acl_broker: AclBroker) -> None:
    async with RawConnection(acl_broker.broker.address) as connection:
        captured = create(TOPIC)
        created = await connection.invoke(captured)
        assert created.code == ResponseCode.SUCCESS, created.remark
        stored = await connection.invoke(signed(send_request(TOPIC, b"kept"), USER))
        assert stored.code == ResponseCode.SUCCESS, stored.remark
        reaimed = reaimed_as_delete(captured, ("defaultTopic", "topicFilterType"))
        reaimed.opaque = 4242
        refused = await connection.invoke(reaimed)
        assert refused.code == ResponseCode.NO_PERMISSION
        assert "carries 'defaultTopic', a header field of another request" in (refused.remark or "")
        missing = signed(RemotingCommand(code=RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields={}), ADMIN)
        invalid = await connection.invoke(missing)
        assert invalid.code == ResponseCode.INVALID_PARAMETER
        assert invalid.remark == "DELETE_TOPIC_IN_BROKER(215) lacks the required header field 'topic'"
        after = await connection.invoke(max_offset_request(TOPIC))
        assert after.code == ResponseCode.SUCCESS and after.ext_fields["offset"] == "1"


def test_acl_with_a_certificate_enforces_tls_by_default(tmp_path: Path) -> None:
    """A signature sent in plain text can be replayed: with ACL on and a certificate, no
    `tls.server.mode` means `enforcing` (and `permissive` without ACL, as before)."""
    certs = make_certificates(tmp_path)
    with_cert = BrokerConfig(tls_server_cert_path=certs.cert, tls_server_key_path=certs.key)
    assert dataclasses.replace(with_cert, acl_enable=True).server_tls().mode is TlsMode.ENFORCING
    assert with_cert.server_tls().mode is TlsMode.PERMISSIVE
    permissive = dataclasses.replace(with_cert, acl_enable=True, tls_server_mode="permissive")
    assert permissive.server_tls().mode is TlsMode.PERMISSIVE
    assert BrokerConfig(acl_enable=True).server_tls().mode is TlsMode.DISABLED

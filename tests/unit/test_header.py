from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rocketspark.errors import HeaderFieldError
from rocketspark.protocol.header import CommandHeader
from rocketspark.protocol.headers.namesrv import RegisterBrokerRequestHeader
from rocketspark.protocol.schema import wire


@dataclass(slots=True)
class ShortNames(CommandHeader):
    producer_group: str = field(metadata=wire("a"))
    queue_id: int = field(metadata=wire("e"))
    unit_mode: bool | None = field(default=None, metadata=wire("k"))


def test_register_header_round_trip_with_java_names() -> None:
    header = RegisterBrokerRequestHeader("broker-a", "127.0.0.1:10911", "DefaultCluster", "127.0.0.1:10912", 0)
    ext = header.to_ext_fields()
    assert ext == {
        "brokerName": "broker-a",
        "brokerAddr": "127.0.0.1:10911",
        "clusterName": "DefaultCluster",
        "haServerAddr": "127.0.0.1:10912",
        "brokerId": "0",
        "compressed": "false",
        "bodyCrc32": "0",
    }
    assert RegisterBrokerRequestHeader.from_ext_fields(ext) == header


def test_explicit_wire_names_and_booleans() -> None:
    header = ShortNames("pg", 3, True)
    assert header.to_ext_fields() == {"a": "pg", "e": "3", "k": "true"}
    assert ShortNames.from_ext_fields({"a": "pg", "e": " 3", "k": "TRUE"}) == header
    assert ShortNames.from_ext_fields({"a": "pg", "e": "3", "k": ""}).unit_mode is None


def test_missing_required_field_names_it() -> None:
    with pytest.raises(HeaderFieldError, match="missing required field 'e'"):
        ShortNames.from_ext_fields({"a": "pg"})


def test_unparsable_value_names_field_and_value() -> None:
    with pytest.raises(HeaderFieldError, match="'e' = 'three'"):
        ShortNames.from_ext_fields({"a": "pg", "e": "three"})
    with pytest.raises(HeaderFieldError, match="'k'"):
        ShortNames.from_ext_fields({"a": "pg", "e": "1", "k": "yes"})

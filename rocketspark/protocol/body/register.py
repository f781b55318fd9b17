"""The body a broker sends with REGISTER_BROKER, in its JSON and its compressed form."""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass, field

import orjson

from rocketspark.protocol.body.jsonbody import JsonBody, loads
from rocketspark.protocol.body.topic import DataVersion, TopicConfig, TopicConfigSerializeWrapper

_INT = struct.Struct(">i")


@dataclass(slots=True)
class RegisterBrokerBody(JsonBody):
    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(default_factory=TopicConfigSerializeWrapper)
    filter_server_list: list[str] = field(default_factory=list)

    def encode(self, compressed: bool = False) -> bytes:
        if not compressed:
            return self.to_json()
        wrapper = self.topic_config_serialize_wrapper
        out = io.BytesIO()
        _write_chunk(out, wrapper.data_version.to_json())
        out.write(_INT.pack(len(wrapper.topic_config_table)))
        for config in wrapper.topic_config_table.values():
            _write_chunk(out, config.encode_compact().encode())
        _write_chunk(out, orjson.dumps(self.filter_server_list))
        out.write(_INT.pack(0))  # no static-topic queue mappings
        return zlib.compress(out.getvalue(), 9)

    @classmethod
    def decode(cls, data: bytes, compressed: bool) -> RegisterBrokerBody:
        """Decode either form; raises ValueError on anything malformed."""
        if not compressed:
            return cls.from_json(data)
        try:
            raw = io.BytesIO(zlib.decompress(data))
        except zlib.error as exc:
            raise ValueError(f"compressed registration body does not inflate: {exc}") from None
        data_version = DataVersion.from_json(_read_chunk(raw))
        table: dict[str, TopicConfig] = {}
        for _ in range(_read_int(raw)):
            config = TopicConfig.decode_compact(_read_chunk(raw).decode())
            table[config.topic_name] = config
        filter_servers = [str(s) for s in loads(_read_chunk(raw)) or []]
        # Java 5.x appends static-topic queue mappings; this project has no static topics.
        return cls(TopicConfigSerializeWrapper(table, data_version), filter_servers)


def _write_chunk(out: io.BytesIO, data: bytes) -> None:
    out.write(_INT.pack(len(data)))
    out.write(data)


def _read_int(stream: io.BytesIO) -> int:
    raw = stream.read(4)
    if len(raw) != 4:
        raise ValueError("compressed registration body ends early")
    (value,) = _INT.unpack(raw)
    if value < 0:
        raise ValueError(f"negative length {value} in compressed registration body")
    return int(value)


def _read_chunk(stream: io.BytesIO) -> bytes:
    length = _read_int(stream)
    data = stream.read(length)
    if len(data) != length:
        raise ValueError("compressed registration body ends early")
    return data

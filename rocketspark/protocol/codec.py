"""Frame codec: RemotingCommand <-> bytes, for both header serializations.

Frame layout (big-endian)::

    int32 length            4 + header length + body length (does not count itself)
    int32 serType<<24 | hdrLen
    header                  JSON (type 0) or ROCKETMQ binary (type 1)
    body

Decoding honours the type byte of every frame, because a RocketMQ peer answers in its own
configured serialization, not the request's. Encoding uses JSON by default: C++ clients (and
everything built on them) only read JSON headers. Any malformed input becomes a
:class:`ProtocolError`, after which framing is lost and the connection must be closed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, cast

import orjson

from rocketspark.errors import ConfigError, ProtocolError
from rocketspark.protocol.codes import LanguageCode, SerializeType
from rocketspark.protocol.command import RemotingCommand

DEFAULT_MAX_FRAME_LENGTH = 16 * 1024 * 1024
#: the smallest frame cap a server may be given: room for any header and a useful body
MIN_FRAME_MAX_LENGTH = 1024 * 1024
_MAX_HEADER_LENGTH = 0xFFFFFF

_FRAME_PREFIX = struct.Struct(">ii")
_BINARY_FIXED = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remarkLen
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">H")


def check_frame_max_length(value: int, key: str) -> None:
    """Settings validation of a server's frame cap (`key` names the setting in the error)."""
    if not MIN_FRAME_MAX_LENGTH <= value <= 2**31 - 1:
        raise ConfigError(f"{key} must be within {MIN_FRAME_MAX_LENGTH}..{2**31 - 1} bytes, got {value}")


# ---------------------------------------------------------------------------------------------
# encoding


def encode_json_header(cmd: RemotingCommand) -> bytes:
    header: dict[str, Any] = {
        "code": cmd.code,
        "extFields": cmd.ext_fields,
        "flag": cmd.flag,
        "language": cmd.language.name,
        "opaque": cmd.opaque,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = cmd.version
    return orjson.dumps(header)


def encode_binary_header(cmd: RemotingCommand) -> bytes:
    if not (-(2**15) <= cmd.code < 2**15 and -(2**15) <= cmd.version < 2**15):
        raise ValueError(f"code {cmd.code} / version {cmd.version} do not fit the ROCKETMQ header's shorts")
    remark = cmd.remark.encode() if cmd.remark is not None else b""
    parts = [
        _BINARY_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, len(remark)),
        remark,
    ]
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        k, v = key.encode(), value.encode()
        ext += _SHORT.pack(len(k)) + k + _INT.pack(len(v)) + v
    parts.append(_INT.pack(len(ext)))
    parts.append(bytes(ext))
    return b"".join(parts)


def encode(cmd: RemotingCommand, serialize_type: SerializeType = SerializeType.JSON) -> bytes:
    """The complete frame for `cmd`, length prefix included."""
    return b"".join((frame_head(cmd, serialize_type), cmd.wire_body))


def frame_head(cmd: RemotingCommand, serialize_type: SerializeType = SerializeType.JSON) -> bytes:
    """The frame for `cmd` up to its body: length prefix and header (a large body is written after
    it as it is, not copied into one frame)."""
    json = serialize_type is SerializeType.JSON
    header = encode_json_header(cmd) if json else encode_binary_header(cmd)
    if len(header) > _MAX_HEADER_LENGTH:
        raise ValueError(f"header of {len(header)} bytes exceeds the 24-bit header length field")
    length = 4 + len(header) + len(cmd.wire_body)
    return _FRAME_PREFIX.pack(length, (serialize_type << 24) | len(header)) + header


# ---------------------------------------------------------------------------------------------
# decoding


def _ext_value(value: Any) -> str | None:
    """Normalise what real clients put in extFields: strings, numbers, booleans, null."""
    if isinstance(value, str):
        return value
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return orjson.dumps(value).decode()


def _language(value: Any) -> LanguageCode:
    if isinstance(value, str):
        return LanguageCode.__members__.get(value, LanguageCode.OTHER)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return LanguageCode(value)
        except ValueError:
            return LanguageCode.OTHER
    return LanguageCode.OTHER


def _int_field(header: dict[str, Any], name: str, default: int | None) -> int:
    """A field Java declares `int`: a number (or a numeric string) within 32 bits."""
    value = header.get(name, default)
    if isinstance(value, bool) or value is None:
        raise ProtocolError(f"JSON header field '{name}' is missing or not a number: {value!r}")
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, int):
        raise ProtocolError(f"JSON header field '{name}' is not a number: {value!r}")
    if not -(2**31) <= value < 2**31:
        raise ProtocolError(f"JSON header field '{name}' = {value} does not fit a 32-bit int")
    return value


def decode_json_header(data: bytes | memoryview) -> RemotingCommand:
    try:
        header = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"undecodable JSON header: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError(f"JSON header is a {type(header).__name__}, not an object")
    raw_ext = header.get("extFields")
    if raw_ext is not None and not isinstance(raw_ext, dict):
        raise ProtocolError(f"JSON header extFields is a {type(raw_ext).__name__}, not an object")
    ext: dict[str, str] = {}
    if raw_ext:
        for key, value in raw_ext.items():
            if type(value) is str:  # what Java and this project send: the fast path
                ext[key] = value
            else:
                normalised = _ext_value(value)
                if normalised is not None:
                    ext[key] = normalised
    remark = header.get("remark")
    return RemotingCommand(
        code=_int_field(header, "code", None),
        language=_language(header.get("language")),
        version=_int_field(header, "version", 0),
        opaque=_int_field(header, "opaque", 0),
        flag=_int_field(header, "flag", 0),
        remark=remark if isinstance(remark, str) else None,
        ext_fields=ext,
    )


def decode_binary_header(data: bytes | memoryview) -> RemotingCommand:
    view = memoryview(data)
    code, language, version, opaque, flag, remark_len = _BINARY_FIXED.unpack_from(view, 0)
    pos = _BINARY_FIXED.size
    if remark_len < 0 or pos + remark_len > len(view):
        raise ProtocolError(f"binary header remark length {remark_len} overruns the header")
    remark = bytes(view[pos : pos + remark_len]).decode() if remark_len > 0 else None
    pos += remark_len
    (ext_len,) = _INT.unpack_from(view, pos)
    pos += 4
    end = pos + ext_len
    if ext_len < 0 or end > len(view):
        raise ProtocolError(f"binary header extFields length {ext_len} overruns the header")
    ext: dict[str, str] = {}
    while pos < end:
        (key_len,) = _SHORT.unpack_from(view, pos)
        pos += 2
        key = bytes(view[pos : pos + key_len]).decode()
        pos += key_len
        (value_len,) = _INT.unpack_from(view, pos)
        pos += 4
        if value_len < 0 or pos + value_len > end:
            raise ProtocolError(f"binary header value of '{key}' overruns the extFields map")
        ext[key] = bytes(view[pos : pos + value_len]).decode()
        pos += value_len
    return RemotingCommand(
        code=code,
        language=_language(language),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
    )


def decode_frame(frame: bytes | memoryview) -> RemotingCommand:
    """Decode one frame given without its leading length field."""
    view = memoryview(frame)
    cmd, body_at = _decode_head(view)
    cmd.body = view[body_at:].tobytes()
    return cmd


def _decode_head(view: memoryview) -> tuple[RemotingCommand, int]:
    """The command of a frame (without its leading length field) but its body, and where the
    body starts in the frame."""
    try:
        (type_and_length,) = _INT.unpack_from(view, 0)
        serialize_type = (type_and_length >> 24) & 0xFF
        header_length = type_and_length & 0xFFFFFF
        if 4 + header_length > len(view):
            raise ProtocolError(f"header length {header_length} exceeds the frame of {len(view)} bytes")
        header = view[4 : 4 + header_length]
        if serialize_type == SerializeType.JSON:
            cmd = decode_json_header(header)
        elif serialize_type == SerializeType.ROCKETMQ:
            cmd = decode_binary_header(header)
        else:
            raise ProtocolError(f"unknown header serialization type {serialize_type}")
        header.release()
    except ProtocolError:
        raise
    except (struct.error, UnicodeDecodeError, ValueError, TypeError, OverflowError) as exc:
        raise ProtocolError(f"undecodable header: {exc}") from None
    return cmd, 4 + header_length


class FrameDecoder:
    """Incremental decoder for a byte stream of frames.

    Feed it whatever the socket delivered; it yields each complete command. After it raises
    :class:`ProtocolError` the stream position is unknown: every later `feed` raises too, and the
    connection must be closed.

    A response whose body is OWN_BUFFER_BODY_BYTES or more (a large pull's answer) takes the
    decoder's buffer as its body, a `bytearray`, rather than a copy of it: the buffer is cut to the
    body in place, and what followed the frame moves to a new buffer. The body reads as bytes do,
    but is not hashable. Copying a 20 MB answer out of the buffer took about a quarter of an Arrow
    consumer's CPU (py-spy, `bench consume`).
    """

    OWN_BUFFER_BODY_BYTES = 4 * 1024 * 1024

    def __init__(self, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        self.max_frame_length = max_frame_length
        self._buffer = bytearray()
        self._failed = False

    def feed(self, data: bytes) -> Iterator[RemotingCommand]:
        if self._failed:
            raise ProtocolError("the stream already held an undecodable frame; close the connection")
        buffer = self._buffer
        buffer += data
        pos = 0
        size = len(buffer)
        view = memoryview(buffer)
        large: tuple[RemotingCommand, int, int] | None = None  # a response taking the buffer, its body
        try:
            while size - pos >= 4:
                (length,) = _INT.unpack_from(view, pos)
                if length < 4 or length + 4 > self.max_frame_length:
                    raise ProtocolError(f"frame length {length} is outside 4..{self.max_frame_length - 4} bytes")
                if size - pos - 4 < length:
                    break
                frame = view[pos + 4 : pos + 4 + length]
                cmd, body_at = _decode_head(frame)
                frame.release()
                if cmd.is_response and length - body_at >= self.OWN_BUFFER_BODY_BYTES:
                    large = (cmd, pos + 4 + body_at, pos + 4 + length)
                    break
                cmd.body = view[pos + 4 + body_at : pos + 4 + length].tobytes()
                pos += 4 + length
                yield cmd
        except ProtocolError:
            # The traceback still holds slices of `view`, which pin the buffer's size: resizing it
            # would raise BufferError instead of this error. The buffer is useless now anyway.
            self._failed = True
            self._buffer = bytearray()
            raise
        finally:
            view.release()
            if not self._failed and large is None:
                del buffer[:pos]
        if large is not None:
            cmd, body_start, body_end = large
            self._buffer = buffer[body_end:]  # what follows the frame: at most what one read brought
            del buffer[body_end:]
            del buffer[:body_start]  # in place: a bytearray cut at its front only moves its start
            cmd.body = cast(bytes, buffer)  # a bytearray: see RemotingCommand.body
            yield cmd
            yield from self.feed(b"")

    @property
    def buffered(self) -> int:
        return len(self._buffer)

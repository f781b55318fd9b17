"""Frame codec: golden bytes from the real client, leniency, round trips, fuzzing."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketspark.errors import ProtocolError
from rocketspark.protocol.codec import FrameDecoder, decode_frame, encode, encode_binary_header
from rocketspark.protocol.codes import LanguageCode, RequestCode, SerializeType
from rocketspark.protocol.command import RemotingCommand

GOLDEN = Path(__file__).parents[1] / "fixtures" / "real_client" / "get_routeinfo_by_topic.bin"


def json_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def decode_one(frame: bytes) -> RemotingCommand:
    commands = list(FrameDecoder().feed(frame))
    assert len(commands) == 1
    return commands[0]


def test_decodes_the_real_clients_first_frame() -> None:
    frame = GOLDEN.read_bytes()
    command = decode_one(frame)
    assert command.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
    assert command.language is LanguageCode.CPP
    assert command.version == 63
    assert command.opaque == 0
    assert not command.is_response and not command.is_oneway
    assert command.ext_fields["topic"] == "GoldenTopic"
    assert {"AccessKey", "OnsChannel", "Signature"} <= command.ext_fields.keys()
    assert command.body == b""
    # the header length counts the trailing newline the C++ client writes
    assert frame.endswith(b"}\n")


def test_binary_header_matches_the_reference_example() -> None:
    command = RemotingCommand(
        code=105, language=LanguageCode.PYTHON, version=413, opaque=1, ext_fields={"topic": "TopicTest"}
    )
    expected = bytes.fromhex(
        "0069 03 019d 00000001 00000000 00000000 00000014"  # code lang version opaque flag remarkLen extLen
        "0005 746f706963 00000009 546f70696354657374"  # "topic" -> "TopicTest"
    )
    assert encode_binary_header(command) == expected
    assert decode_one(encode(command, SerializeType.ROCKETMQ)) == command


def test_json_header_leniency() -> None:
    header = (
        orjson.dumps(
            {
                "code": 10,
                "language": "JAVA",
                "opaque": 7,
                "flag": 0,
                "extFields": {
                    "queueId": 3,
                    "unitMode": False,
                    "batch": True,
                    "ratio": 1.5,
                    "absent": None,
                    "s": "x",
                },
            }
        )
        + b"\n"
    )
    command = decode_one(json_frame(header, b"body"))
    assert command.ext_fields == {
        "queueId": "3",
        "unitMode": "false",
        "batch": "true",
        "ratio": "1.5",
        "s": "x",
    }
    assert command.version == 0  # missing version: old clients are accepted
    assert command.body == b"body"


@pytest.mark.parametrize("ext", [b'"extFields":null,', b""])
def test_null_or_missing_ext_fields(ext: bytes) -> None:
    header = b'{"code":34,' + ext + b'"flag":0,"language":"CPP","opaque":1,"version":63}'
    assert decode_one(json_frame(header)).ext_fields == {}


def test_language_as_number_or_unknown_name() -> None:
    assert decode_one(json_frame(b'{"code":1,"language":9,"opaque":1}')).language is LanguageCode.GO
    assert decode_one(json_frame(b'{"code":1,"language":"COBOL","opaque":1}')).language is LanguageCode.OTHER


def test_responses_use_the_frames_own_serialization() -> None:
    request = RemotingCommand.request(RequestCode.HEART_BEAT, body=b"{}")
    response = request.response(remark="ok")
    for serialize_type in SerializeType:
        assert decode_one(encode(response, serialize_type)) == response


def test_frames_split_and_coalesced_across_reads() -> None:
    commands = [RemotingCommand.request(RequestCode.PULL_MESSAGE, body=bytes([i]) * i) for i in range(1, 6)]
    stream = b"".join(encode(c, SerializeType(i % 2)) for i, c in enumerate(commands))
    decoder = FrameDecoder()
    decoded: list[RemotingCommand] = []
    for i in range(0, len(stream), 7):
        decoded.extend(decoder.feed(stream[i : i + 7]))
    assert decoded == commands
    assert decoder.buffered == 0


@pytest.mark.parametrize("chunk", [65_536, 3_000_000, 64 * 1024 * 1024])
def test_large_response_bodies_take_the_buffer_and_later_frames_still_decode(chunk: int) -> None:
    """A response body of OWN_BUFFER_BODY_BYTES or more is the decoder's buffer, cut in place; a
    request of that size, and smaller responses, still get bytes; frames after it decode."""
    big = FrameDecoder.OWN_BUFFER_BODY_BYTES
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, body=b"q" * big)
    commands = [
        request,
        request.response(body=bytes(range(256)) * (big // 256 + 1)),
        request.response(body=b"small"),
        request.response(body=b"z" * big, remark="last"),
        RemotingCommand.request(RequestCode.HEART_BEAT),
    ]
    stream = b"".join(encode(c, SerializeType(i % 2)) for i, c in enumerate(commands))
    decoder = FrameDecoder(max_frame_length=64 * 1024 * 1024)
    decoded: list[RemotingCommand] = []
    for i in range(0, len(stream), chunk):
        decoded.extend(decoder.feed(stream[i : i + chunk]))
    assert decoded == commands
    assert [type(c.body) for c in decoded] == [bytes, bytearray, bytes, bytearray, bytes]
    assert decoder.buffered == 0


def test_oversize_frame_is_a_protocol_error() -> None:
    decoder = FrameDecoder(max_frame_length=1024)
    with pytest.raises(ProtocolError, match="frame length"):
        list(decoder.feed(struct.pack(">i", 2000) + b"x" * 10))


@pytest.mark.parametrize(
    "frame",
    [
        json_frame(b"not json"),
        json_frame(b"[1,2]"),
        json_frame(b'{"language":"JAVA"}'),  # no code
        struct.pack(">ii", 8, 100) + b"{}{}",  # header longer than the frame
        struct.pack(">ii", 6, 7 << 24 | 2) + b"{}",  # unknown serialization type
    ],
)
def test_undecodable_headers_are_protocol_errors(frame: bytes) -> None:
    with pytest.raises(ProtocolError):
        list(FrameDecoder().feed(frame))


ext_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    language=st.sampled_from(LanguageCode),
    version=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | ext_text,
    ext_fields=st.dictionaries(ext_text, ext_text, max_size=8),
    body=st.binary(max_size=256),
)


@given(command=commands, serialize_type=st.sampled_from(SerializeType))
def test_round_trip(command: RemotingCommand, serialize_type: SerializeType) -> None:
    frame = encode(command, serialize_type)
    expected = command
    if serialize_type is SerializeType.ROCKETMQ and command.remark == "":
        expected = dataclasses.replace(command, remark=None)  # the binary format writes "" as null
    assert decode_frame(frame[4:]) == expected


@settings(max_examples=500)
@given(data=st.binary(max_size=512), chunk=st.integers(1, 64))
def test_arbitrary_bytes_yield_commands_or_a_protocol_error(data: bytes, chunk: int) -> None:
    decoder = FrameDecoder(max_frame_length=4096)
    try:
        for i in range(0, len(data), chunk):
            for command in decoder.feed(data[i : i + chunk]):
                assert isinstance(command, RemotingCommand)
    except ProtocolError:
        pass


@settings(max_examples=300)
@given(prefix=commands, noise=st.binary(min_size=1, max_size=64))
def test_valid_frame_then_garbage(prefix: RemotingCommand, noise: bytes) -> None:
    decoder = FrameDecoder(max_frame_length=4096)
    seen = []
    try:
        for command in decoder.feed(encode(prefix) + noise):
            seen.append(command)
    except ProtocolError:
        pass
    assert seen[:1] == [prefix]


MALFORMED_FRAMES = [
    json_frame(b"not json"),
    json_frame(b'{"code":1,"extFields":[1]}'),
    json_frame(b'{"code":"x1"}'),
    json_frame(b'{"code":4294967296}'),  # beyond Java's int
    struct.pack(">ii", 8, 100) + b"{}{}",
    struct.pack(">ii", 6, 7 << 24 | 2) + b"{}",
    struct.pack(">ii", 8, 1 << 24 | 4) + b"\x00\x01\x02\x03",  # binary header cut short
    encode(RemotingCommand(code=1, remark="r"), SerializeType.ROCKETMQ).replace(b"r", b"\xff"),
]


@pytest.mark.parametrize("malformed", MALFORMED_FRAMES)
def test_valid_frame_then_malformed_one_is_a_protocol_error(malformed: bytes) -> None:
    """The first frame is decoded, the second raises ProtocolError (not BufferError), and the
    decoder refuses further input, since the stream position is lost."""
    first = RemotingCommand.request(RequestCode.HEART_BEAT, body=b"{}")
    decoder = FrameDecoder()
    seen = []
    with pytest.raises(ProtocolError):
        for command in decoder.feed(encode(first) + malformed):
            seen.append(command)
    assert seen == [first]
    with pytest.raises(ProtocolError, match="already held an undecodable frame"):
        list(decoder.feed(encode(first)))


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    """A valid frame damaged where the header decoders look, its length field kept consistent
    so that the damage reaches the header decoders instead of the framing check."""
    command = draw(commands)
    frame = bytearray(encode(command, draw(st.sampled_from(SerializeType))))
    header_length = struct.unpack_from(">i", frame, 4)[0] & 0xFFFFFF
    mutation = draw(st.sampled_from(["overwrite", "truncate", "header_length", "serialize_type"]))
    if mutation == "overwrite" and header_length:
        for _ in range(draw(st.integers(1, 4))):
            frame[8 + draw(st.integers(0, header_length - 1))] = draw(st.integers(0, 255))
    elif mutation == "truncate":
        del frame[8 + draw(st.integers(0, header_length)) :]
    elif mutation == "header_length":
        struct.pack_into(">i", frame, 4, frame[4] << 24 | draw(st.integers(0, 0xFFFFFF)))
    else:
        frame[4] = draw(st.integers(0, 255))
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    return bytes(frame)


@settings(max_examples=1000)
@given(first=commands, damaged=mutated_frames(), chunk=st.integers(1, 4096))
def test_valid_frame_then_damaged_frame(first: RemotingCommand, damaged: bytes, chunk: int) -> None:
    decoder = FrameDecoder()
    stream = encode(first) + damaged
    seen: list[RemotingCommand] = []
    try:
        for i in range(0, len(stream), chunk):
            seen.extend(decoder.feed(stream[i : i + chunk]))
    except ProtocolError:
        assert len(seen) == 1
    else:
        assert len(seen) == 2  # damage the decoders tolerate still yields a command
    assert seen[0] == first

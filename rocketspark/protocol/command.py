"""`RemotingCommand`: one request or response of the remoting protocol."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import TypeVar

from rocketspark.protocol.codes import CURRENT_VERSION, LanguageCode, ResponseCode
from rocketspark.protocol.header import CommandHeader

RPC_TYPE_RESPONSE = 0x1
RPC_ONEWAY = 0x2
_MAX_OPAQUE = 2**31 - 1

H = TypeVar("H", bound=CommandHeader)

#: ext fields a repr (and so a log line or a test failure) never shows: a signed request's security token
_HIDDEN_FIELDS = frozenset({"SecurityToken"})

_opaque_counter = itertools.count(1)
_opaque_lock = threading.Lock()  # callers include executor threads of the sync facade


def next_opaque() -> int:
    """A process-wide request id, as Java's global AtomicInteger; wraps within int32."""
    with _opaque_lock:
        return next(_opaque_counter) % _MAX_OPAQUE


@dataclass(slots=True)
class RemotingCommand:
    """A request or response: the header fields of the wire format plus the body bytes."""

    code: int
    language: LanguageCode = LanguageCode.PYTHON
    version: int = CURRENT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    #: typed bytes; a response body of FrameDecoder.OWN_BUFFER_BODY_BYTES or more (a large pull's
    #: answer) is the decoder's buffer cut in place, a bytearray, which every reader of bodies takes
    #: as it takes bytes (orjson, zlib, struct, numpy, pyarrow): not hashable, and not `bytes` to
    #: isinstance
    body: bytes = b""
    #: a body written from memory the command does not own (a pull answer's Arrow stream) in place
    #: of `body`, so that it is not copied into bytes first; commands read from the wire have none
    body_view: memoryview | None = None

    @property
    def wire_body(self) -> bytes | memoryview:
        """The body as it is written: `body_view` when there is one, else `body`."""
        return self.body if self.body_view is None else self.body_view

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_TYPE_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    @classmethod
    def request(
        cls, code: int, header: CommandHeader | None = None, body: bytes = b"", *, oneway: bool = False
    ) -> RemotingCommand:
        return cls(
            code=int(code),
            opaque=next_opaque(),
            flag=RPC_ONEWAY if oneway else 0,
            ext_fields=header.to_ext_fields() if header is not None else {},
            body=body,
        )

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        header: CommandHeader | None = None,
        body: bytes = b"",
        *,
        body_view: memoryview | None = None,
    ) -> RemotingCommand:
        """A response answering this request (same opaque, response flag set)."""
        return RemotingCommand(
            code=int(code),
            opaque=self.opaque,
            flag=RPC_TYPE_RESPONSE,
            remark=remark,
            ext_fields=header.to_ext_fields() if header is not None else {},
            body=body,
            body_view=body_view,
        )

    def decode_header(self, header_type: type[H]) -> H:
        return header_type.from_ext_fields(self.ext_fields)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "request"
        fields = {k: "***" if k in _HIDDEN_FIELDS else v for k, v in self.ext_fields.items()}
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} flag={self.flag} "
            f"language={self.language.name} version={self.version} remark={self.remark!r} "
            f"ext_fields={fields!r} body={len(self.wire_body)} bytes)"
        )

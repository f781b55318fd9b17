"""Which ext fields a signed request may carry: its own code's header, so a signature cannot be re-aimed.

ACL 1.0 signs the ext field *values* joined in key order and neither the request code nor the field
names, so a captured request can be sent again under another code with its fields renamed to give
the same joined text. The shape check closes what it can without changing the signature: a signed
request must carry every field its code's header requires, and no field of another code's header
(a field no header declares passes, as real clients add some: `OnsChannel` of the C++ client, the
`bname`/`ns`/`nsd`/`oway`/`lo` fields of Apache 5's clients). A request that needs an admin account
may carry only its own header's fields, those of the signature and those known extras.

A code this table does not list is not checked here (it needs `admin` and its processor answers it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rocketspark.errors import ACL_REFUSAL_PREFIX as REFUSED
from rocketspark.errors import HeaderFieldError
from rocketspark.protocol.codes import RequestCode, code_name
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.header import CommandHeader
from rocketspark.protocol.headers.admin import (
    CreateTopicRequestHeader,
    GetConsumeStatsRequestHeader,
    QueryMessageRequestHeader,
    TopicRequestHeader,
    ViewMessageRequestHeader,
)
from rocketspark.protocol.headers.client import ConsumerGroupRequestHeader, UnregisterClientRequestHeader
from rocketspark.protocol.headers.offset import (
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rocketspark.protocol.headers.pull import PullMessageRequestHeader
from rocketspark.protocol.headers.queue_bytes import QueueBodyBytesRequestHeader
from rocketspark.protocol.headers.send import (
    V2_FIELD_NAMES,
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
)
from rocketspark.protocol.headers.transaction import EndTransactionRangeRequestHeader, EndTransactionRequestHeader
from rocketspark.protocol.schema import wire_fields
from rocketspark.remoting.signing import ACCESS_KEY, SECURITY_TOKEN, SIGNATURE, UNIQUE_KEY_QUERY

#: fields of the signature, and fields real clients add to any request
SIGNING_FIELDS = frozenset({ACCESS_KEY, SECURITY_TOKEN, SIGNATURE})
CLIENT_EXTRAS = frozenset({"OnsChannel", UNIQUE_KEY_QUERY, "bname", "ns", "nsd", "oway", "lo"})


@dataclass(frozen=True, slots=True)
class Shape:
    """The wire names of one code's header fields, and those it requires."""

    fields: frozenset[str]
    required: frozenset[str]
    admin: bool = False  # needs an admin account: carries nothing beyond its header and the extras


def _shape(header: type[CommandHeader] | None, *, admin: bool = False) -> Shape:
    fields = wire_fields(header) if header is not None else ()
    return Shape(frozenset(f.wire_name for f in fields), frozenset(f.wire_name for f in fields if f.required), admin)


def _renamed(shape: Shape, names: Mapping[str, str]) -> Shape:
    """`shape` under the one-letter names of SEND_MESSAGE_V2 (its long names are still accepted)."""
    return Shape(shape.fields | {names[f] for f in shape.fields}, frozenset(names[f] for f in shape.required))


_SEND = _shape(SendMessageRequestHeader)
_SEND_V2 = _renamed(_SEND, V2_FIELD_NAMES)  # as decode_send_header: one-letter names when `b` is there
_NONE = _shape(None)

SHAPES: dict[int, Shape] = {
    RequestCode.SEND_MESSAGE: _SEND,
    RequestCode.SEND_MESSAGE_V2: _SEND_V2,
    RequestCode.SEND_BATCH_MESSAGE: _SEND_V2,
    ExtensionCode.ARROW_SEND_MESSAGE: _SEND,
    ExtensionCode.ARROW_SEND_HALF_MESSAGE: _SEND,
    RequestCode.CONSUMER_SEND_MSG_BACK: _shape(ConsumerSendMsgBackRequestHeader),
    RequestCode.PULL_MESSAGE: _shape(PullMessageRequestHeader),
    ExtensionCode.ARROW_PULL_MESSAGE: _shape(PullMessageRequestHeader),
    RequestCode.QUERY_CONSUMER_OFFSET: _shape(QueryConsumerOffsetRequestHeader),
    RequestCode.UPDATE_CONSUMER_OFFSET: _shape(UpdateConsumerOffsetRequestHeader),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _shape(ConsumerGroupRequestHeader),
    RequestCode.HEART_BEAT: _NONE,
    RequestCode.UNREGISTER_CLIENT: _shape(UnregisterClientRequestHeader),
    RequestCode.LOCK_BATCH_MQ: _NONE,
    RequestCode.UNLOCK_BATCH_MQ: _NONE,
    RequestCode.GET_MAX_OFFSET: _shape(QueueRequestHeader),
    RequestCode.GET_MIN_OFFSET: _shape(QueueRequestHeader),
    RequestCode.GET_EARLIEST_MSG_STORETIME: _shape(QueueRequestHeader),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _shape(SearchOffsetRequestHeader),
    ExtensionCode.QUEUE_BODY_BYTES: _shape(QueueBodyBytesRequestHeader),
    RequestCode.GET_TOPIC_STATS_INFO: _shape(TopicRequestHeader),
    RequestCode.QUERY_MESSAGE: _shape(QueryMessageRequestHeader),
    RequestCode.GET_CONSUME_STATS: _shape(GetConsumeStatsRequestHeader),
    RequestCode.VIEW_MESSAGE_BY_ID: _shape(ViewMessageRequestHeader),
    RequestCode.END_TRANSACTION: _shape(EndTransactionRequestHeader),
    ExtensionCode.END_TRANSACTION_RANGE: _shape(EndTransactionRangeRequestHeader),
    RequestCode.GET_ALL_TOPIC_CONFIG: _NONE,
    RequestCode.GET_BROKER_RUNTIME_INFO: _NONE,
    RequestCode.UPDATE_AND_CREATE_TOPIC: _shape(CreateTopicRequestHeader, admin=True),
    RequestCode.DELETE_TOPIC_IN_BROKER: _shape(TopicRequestHeader, admin=True),
    RequestCode.GET_BROKER_CONFIG: _shape(None, admin=True),
}

#: every field some header declares: carried by a request of another code, it is refused
HEADER_FIELDS: frozenset[str] = frozenset().union(*(shape.fields for shape in SHAPES.values()))


def refused_shape(request: RemotingCommand) -> str | None:
    """Why signed `request` does not have its code's shape, or None. A required field missing raises
    HeaderFieldError (INVALID_PARAMETER), as the code's processor would answer it."""
    shape = SHAPES.get(request.code)
    if shape is None:
        return None
    fields = request.ext_fields.keys()
    name = code_name(request.code)
    required = _SEND.required if shape is _SEND_V2 and V2_FIELD_NAMES["topic"] not in fields else shape.required
    missing = sorted(required - fields)
    if missing:
        raise HeaderFieldError(f"{name} lacks the required header field '{missing[0]}'")
    for field in sorted(fields - shape.fields - SIGNING_FIELDS):
        if field in HEADER_FIELDS:
            return (
                f"{REFUSED}{name} carries '{field}', a header field of another request: "
                "a signature covers one request code's fields"
            )
        if shape.admin and field not in CLIENT_EXTRAS:
            return f"{REFUSED}{name} needs an admin account and carries '{field}', no field of its header"
    return None

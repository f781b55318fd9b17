"""Request codes of this project's extensions to the RocketMQ protocol (docs/protocol.md).

They lie outside Apache RocketMQ's table and fit the binary header's 16-bit code. An Apache broker
answers them REQUEST_CODE_NOT_SUPPORTED, after which clients use the standard codes with it.
"""

from __future__ import annotations

from enum import IntEnum


class ExtensionCode(IntEnum):
    ARROW_SEND_MESSAGE = 31001  # body: Arrow IPC stream of PRODUCER_SCHEMA batches
    ARROW_PULL_MESSAGE = 31002  # same headers as PULL_MESSAGE; body: Arrow IPC stream of STORED_SCHEMA
    QUEUE_BODY_BYTES = 31003  # headers only: the body bytes stored over a queue's offsets
    ARROW_SEND_HALF_MESSAGE = 31004  # ARROW_SEND_MESSAGE's, stored as half messages of one transaction
    END_TRANSACTION_RANGE = 31005  # headers only: ends the half messages of a transaction in an offset range

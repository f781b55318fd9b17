"""The RocketMQ properties of a whole column of messages: parsed into maps and values, built from maps.

RocketMQ properties travel as one string per message, ``k\\x01v\\x02k\\x01v\\x02``
(:mod:`rocketspark.message.properties.codec`). :func:`properties_to_map` and :func:`property_values` parse
a column of them by locating the separator bytes of the whole data buffer with numpy at once, then
cutting keys and values out of that buffer as Arrow arrays. :func:`encode_properties_column` builds
the strings producers send from a map column and the tags, keys and UNIQ_KEY columns.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.message.batches.arrays import binary_from_ranges, offsets_and_buffer, unsliced_offsets
from rocketspark.message.batches.schema import SPARK_SCHEMA
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import validate_properties_length

#: map<string not null, string not null>: properties as PRODUCER_SCHEMA and SPARK_SCHEMA hold them.
PROPERTIES_MAP = SPARK_SCHEMA.field("properties").type
_NAME_VALUE = ord(props.NAME_VALUE_SEPARATOR)
_PROPERTY_END = ord(props.PROPERTY_SEPARATOR)


class _Pairs(NamedTuple):
    """Where the property pairs of a column are, in row order, as byte positions in its buffer.

    The key of pair j is ``buffer[starts[j]:splits[j]]``, its value ``buffer[splits[j] + 1:ends[j]]``;
    the pairs of row i are ``row_offsets[i]:row_offsets[i + 1]``, its string
    ``buffer[offsets[i]:offsets[i + 1]]``.
    """

    buffer: pa.Buffer
    offsets: np.ndarray
    row_offsets: np.ndarray
    starts: np.ndarray
    splits: np.ndarray
    ends: np.ndarray

    def rows(self) -> np.ndarray:
        """The row of each pair."""
        return np.repeat(np.arange(len(self.row_offsets) - 1), np.diff(self.row_offsets))

    def keys(self) -> pa.Array:
        return binary_from_ranges(self.buffer, self.starts, self.splits, pa.string())

    def values(self) -> pa.Array:
        return binary_from_ranges(self.buffer, self.splits + 1, self.ends, pa.string())


def _property_pairs(properties: pa.Array) -> _Pairs:
    """Split a column of property strings into pairs, as :func:`properties.decode_properties` does.

    A pair ends at 0x02 or at the end of its string; its key is what precedes its first 0x01;
    pairs without 0x01 are skipped. The separator bytes of all rows are found in one pass over
    the data buffer. Because the rows lie back to back in that buffer and every row's last pair
    is terminated (by its 0x02, or by a zero-width terminator added at its end), a pair always
    starts right after the previous terminator, whichever row that belonged to.
    """
    column = pc.fill_null(properties.cast(pa.string()), "")
    offsets, buffer = offsets_and_buffer(column)
    data = np.frombuffer(buffer, dtype=np.uint8)
    low = int(offsets[0])
    window = data[low : int(offsets[-1])]
    events = np.flatnonzero((window - np.uint8(_NAME_VALUE)) < 2) + low  # positions of 0x01 and 0x02
    is_end = data[events] == _PROPERTY_END
    width = np.ones(len(events), dtype=np.int64)  # bytes a terminator takes
    non_empty = np.flatnonzero(np.diff(offsets) > 0)
    open_rows = non_empty[data[offsets[non_empty + 1] - 1] != _PROPERTY_END]
    if len(open_rows):
        virtual = offsets[open_rows + 1]
        # before a separator at the same position, which belongs to the next row
        order = np.argsort(np.concatenate([2 * events + 1, 2 * virtual]), kind="stable")
        events = np.concatenate([events, virtual])[order]
        is_end = np.concatenate([is_end, np.ones(len(virtual), dtype=bool)])[order]
        width = np.concatenate([width, np.zeros(len(virtual), dtype=np.int64)])[order]
    ends = np.flatnonzero(is_end)  # the terminator of each pair, as an index into events
    first_event = np.zeros_like(ends)  # the first separator of each pair
    first_event[1:] = ends[:-1] + 1
    starts = np.full_like(ends, low)
    starts[1:] = events[ends[:-1]] + width[ends[:-1]]
    has_key = first_event < ends  # the pair's first separator is a 0x01
    starts, ends = starts[has_key], ends[has_key]
    last_byte = events[ends] - 1 + width[ends]  # of the pair and its terminator, inside its row
    return _Pairs(
        buffer, offsets, np.searchsorted(last_byte, offsets), starts, events[first_event[has_key]], events[ends]
    )


def properties_to_map(properties: pa.Array) -> pa.MapArray:
    """A column of property strings as map<string, string> (null and "" give an empty map).

    Pairs keep their order; a key repeated in one string (which RocketMQ never writes) stays
    repeated in the map.
    """
    pairs = _property_pairs(properties)
    offsets = pa.array(pairs.row_offsets.astype(np.int32))
    return pa.MapArray.from_arrays(offsets, pairs.keys(), pairs.values(), type=PROPERTIES_MAP)


def property_values(properties: pa.Array, *names: str) -> list[pa.Array]:
    """For each name, a string column of that property's value per row (null where absent).

    A repeated key yields its last value, as Java's and :func:`properties.decode_properties`'s
    maps do.
    """
    pairs = _property_pairs(properties)
    rows = pairs.rows()
    keys = pairs.keys()
    result = []
    for name in names:
        hits = np.flatnonzero(pc.equal(keys, name).to_numpy(zero_copy_only=False))
        hit_rows = rows[hits]
        last = np.ones(len(hits), dtype=bool)  # the last hit of each row
        last[:-1] = hit_rows[1:] != hit_rows[:-1]
        hits, hit_rows = hits[last], hit_rows[last]
        # rows without the property get an empty range at their start, keeping the ranges in order
        starts = pairs.offsets[:-1].copy()
        ends = starts.copy()
        starts[hit_rows] = pairs.splits[hits] + 1
        ends[hit_rows] = pairs.ends[hits]
        missing = np.ones(len(starts), dtype=bool)
        missing[hit_rows] = False
        result.append(binary_from_ranges(pairs.buffer, starts, ends, pa.string(), missing))
    return result


def map_to_properties(user: pa.MapArray) -> pa.StringArray:
    """Inverse of :func:`properties_to_map`: each map as a property string (null gives "")."""
    entries = pc.binary_join_element_wise(
        user.keys.cast(pa.string()),
        props.NAME_VALUE_SEPARATOR,
        user.items.cast(pa.string()),
        props.PROPERTY_SEPARATOR,
        "",
    )
    mask = user.is_null() if user.null_count else None
    joined = pc.binary_join(pa.ListArray.from_arrays(unsliced_offsets(user), entries, mask=mask), "")
    if joined.null_count != user.null_count:
        raise ValueError("property values must not be null")
    return pc.fill_null(joined, "")


def encode_properties_column(
    user: pa.MapArray | None, *, tags: pa.Array, keys: pa.Array, uniq_key: pa.Array
) -> pa.StringArray:
    """The properties string of each message, as producers send it.

    It holds the user properties, then TAGS, KEYS and UNIQ_KEY where those are not null. Raises
    ValidationError (a ValueError) if one exceeds the 32767 bytes a record can hold.
    """
    parts = [] if user is None else [map_to_properties(user)]
    for name, column in ((props.TAGS, tags), (props.KEYS, keys), (props.UNIQ_KEY, uniq_key)):
        part = pc.binary_join_element_wise(
            name + props.NAME_VALUE_SEPARATOR, column.cast(pa.string()), props.PROPERTY_SEPARATOR, ""
        )
        parts.append(pc.fill_null(part, ""))
    encoded = pc.binary_join_element_wise(*parts, "")
    _check_properties_length(encoded)
    return encoded


def _check_properties_length(encoded: pa.Array) -> None:
    if len(encoded) == 0:
        return
    lengths = pc.binary_length(encoded).to_numpy(zero_copy_only=False)
    too_long = np.flatnonzero(lengths > props.MAX_PROPERTIES_LENGTH)
    if len(too_long):
        row = int(too_long[0])
        validate_properties_length(int(lengths[row]), message=row)

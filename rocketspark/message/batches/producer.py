"""What users hand the Arrow producer (pyarrow batches or tables, pandas frames) as PRODUCER_SCHEMA batches."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.message.batches.arrays import first_null, unsliced_offsets
from rocketspark.message.batches.schema import PRODUCER_SCHEMA
from rocketspark.message.properties import codec as props
from rocketspark.message.properties.columns import PROPERTIES_MAP

_STRING_COLUMNS = ("tags", "keys", "uniq_key")


def producer_batch(data: Any) -> pa.RecordBatch:
    """Normalise what a user hands the Arrow producer to a PRODUCER_SCHEMA batch.

    `data` is a pyarrow RecordBatch or Table or a pandas DataFrame with a `body` column
    (binary, or strings sent as UTF-8) and optionally `tags`, `keys`, `uniq_key` (strings; "" counts
    as absent, as Java readers drop empty properties) and `properties` (a map of strings, a struct
    of strings, or in pandas a column of dicts). Missing optional columns become nulls.
    """
    table = _as_table(data)
    unknown = [name for name in table.column_names if name not in PRODUCER_SCHEMA.names]
    if unknown or "body" not in table.column_names:
        raise ValueError(
            f"a producer batch has the columns {', '.join(PRODUCER_SCHEMA.names)} (body required); "
            f"got {', '.join(table.column_names) or 'none'}"
        )
    n = table.num_rows
    columns = {name: table.column(name).combine_chunks() for name in table.column_names}
    arrays = [_body_column(columns["body"])]
    for name in _STRING_COLUMNS:
        arrays.append(_string_column(columns[name], name) if name in columns else pa.nulls(n, pa.string()))
    user = columns.get("properties")
    arrays.append(pa.nulls(n, PROPERTIES_MAP) if user is None else _properties_column(user))
    return pa.RecordBatch.from_arrays(arrays, schema=PRODUCER_SCHEMA)


def _as_table(data: Any) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    import pandas as pd  # noqa: PLC0415  # on demand: it takes long to import and most callers pass Arrow

    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"expected a pyarrow RecordBatch or Table or a pandas DataFrame, got {type(data).__name__}")
    arrays, names = [], []
    for name in data.columns:
        # dicts become maps, not the structs pyarrow would infer
        type_ = pa.map_(pa.string(), pa.string()) if name == "properties" else None
        try:
            arrays.append(pa.array(data[name], type=type_, from_pandas=True))
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise ValueError(f"column {name!r} does not convert to Arrow: {exc}") from None
        names.append(str(name))
    return pa.Table.from_arrays(arrays, names=names)


def _body_column(body: pa.Array) -> pa.Array:
    if pa.types.is_null(body.type):  # an empty or all-None pandas column
        body = body.cast(pa.binary())
    if not (pa.types.is_binary(body.type) or pa.types.is_large_binary(body.type) or _is_string(body.type)):
        raise ValueError(f"body must be binary or string, not {body.type}")
    if body.null_count:
        raise ValueError(f"body must not be null (row {first_null(body)})")
    return body.cast(pa.binary())


def _is_string(type_: pa.DataType) -> bool:
    return bool(pa.types.is_string(type_) or pa.types.is_large_string(type_))


def _string_column(column: pa.Array, name: str) -> pa.Array:
    try:
        strings = column.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"column {name!r} must hold strings, not {column.type}: {exc}") from None
    return pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()), strings)


def _properties_column(column: pa.Array) -> pa.MapArray:
    try:
        if pa.types.is_null(column.type):  # what pandas gives for a column of None
            return pa.nulls(len(column), PROPERTIES_MAP)
        if pa.types.is_map(column.type):
            offsets, keys, values = unsliced_offsets(column), column.keys, column.items
        elif pa.types.is_struct(column.type):
            offsets, keys, values = _struct_entries(column)
        else:
            raise ValueError(f"properties must be a map or struct of strings, not {column.type}")
        keys, values = keys.cast(pa.string()), values.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"property keys and values must be strings: {exc}") from None
    mask = column.is_null() if column.null_count else None
    result = pa.MapArray.from_arrays(offsets, keys, values, type=PROPERTIES_MAP, mask=mask)
    first, last = result.offsets[0].as_py(), result.offsets[-1].as_py()
    used_keys, used_values = result.keys.slice(first, last - first), result.items.slice(first, last - first)
    if used_values.null_count:
        raise ValueError("property values must not be null")
    reserved = used_keys.filter(pc.is_in(used_keys, pa.array(sorted(props.SYSTEM_KEYS))))
    if len(reserved):
        raise ValueError(
            f"properties may not use the system keys {sorted(set(reserved.to_pylist()))}; "
            "tags, keys and uniq_key have columns of their own"
        )
    return result


def _struct_entries(column: pa.StructArray) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(offsets, keys, values) of maps holding each row's non-null struct fields, in field order."""
    rows = [np.empty(0, dtype=np.int64)]
    keys = [pa.array([], pa.string())]
    values = [pa.array([], pa.string())]
    for field, child in zip(column.type, column.flatten(), strict=True):  # flatten: sliced, null in null rows
        valid = child.is_valid()
        rows.append(np.flatnonzero(valid.to_numpy(zero_copy_only=False)))
        keys.append(pa.repeat(pa.scalar(field.name, pa.string()), len(rows[-1])))
        values.append(child.filter(valid).cast(pa.string()))
    all_rows = np.concatenate(rows)
    order = np.argsort(all_rows, kind="stable")
    offsets = np.searchsorted(all_rows[order], np.arange(len(column) + 1)).astype(np.int32)
    return pa.array(offsets), pa.concat_arrays(keys).take(order), pa.concat_arrays(values).take(order)

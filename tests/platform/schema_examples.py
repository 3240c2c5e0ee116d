"""A valid instance of any schema message, built from its type information (msgspec.inspect), so
every event type and KV value, present and future, has a document to fuzz from without a
hand-written sample that could drift from the schema."""

from __future__ import annotations

from typing import Any

import msgspec
import msgspec.inspect as mi


def example(message: type[msgspec.Struct]) -> Any:
    """The JSON document of a `message` with every field set (tag included); it decodes back."""
    document = msgspec.to_builtins(msgspec.convert(_value(mi.type_info(message)), message))
    msgspec.json.decode(msgspec.json.encode(document), type=message)  # fail here, not later
    return document


def _value(info: mi.Type) -> Any:
    match info:
        case mi.StructType():
            fields = {field.encode_name: _value(field.type) for field in info.fields}
            if info.tag_field is not None:
                fields[info.tag_field] = info.tag
            return fields
        case mi.UnionType():
            chosen = next(t for t in info.types if not isinstance(t, mi.NoneType))
            return _value(chosen)
        case mi.LiteralType():
            return info.values[0]
        case mi.EnumType():
            return next(iter(info.cls)).value
        case mi.ListType() | mi.SetType() | mi.FrozenSetType() | mi.VarTupleType():
            return [_value(info.item_type)]
        case mi.TupleType():
            return [_value(item) for item in info.item_types]
        case mi.DictType():
            return {"key": _value(info.value_type)}
        case mi.BoolType():
            return True
        case mi.IntType():
            return 1
        case mi.FloatType():
            return 1.5
        case mi.BytesType():
            return "eA=="
        case mi.DateTimeType():
            return "2026-01-01T00:00:00+00:00"
        case _:
            return "x"

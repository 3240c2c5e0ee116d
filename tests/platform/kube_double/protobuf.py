"""Request bodies in Kubernetes' protobuf encoding, for the kinds kubectl sends that way.

kubectl's typed commands (`kubectl create namespace`, `create secret`, `create configmap`) send
`application/vnd.kubernetes.protobuf`, as the real server accepts for every built-in kind. The
double decodes the wire format for those three kinds only, into the JSON form it stores; any other
kind in protobuf is a 415 naming what the double decodes, so a test that needs more fails saying
so instead of storing something wrong.

The layout (upstream, Kubernetes v1.36):
- the envelope: the 4 bytes `k8s\\0`, then a `runtime.Unknown` (k8s.io/apimachinery
  pkg/runtime/generated.proto: typeMeta 1 {apiVersion 1, kind 2}, raw 2, contentEncoding 3,
  contentType 4); `raw` is the object;
- `ObjectMeta` (k8s.io/apimachinery pkg/apis/meta/v1/generated.proto): name 1, generateName 2,
  namespace 3, labels 11, annotations 12, finalizers 14 (the fields a create sends);
- `Namespace` (k8s.io/api core/v1/generated.proto): metadata 1, spec 2 {finalizers 1};
  `Secret`: metadata 1, data 2, type 3, stringData 4, immutable 5; `ConfigMap`: metadata 1,
  data 2, binaryData 3, immutable 4. A map is a repeated entry {key 1, value 2}.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

from . import errors

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field: an int for varints, bytes for the rest."""
    at = 0
    while at < len(data):
        tag, at = _varint(data, at)
        number, wire = tag >> 3, tag & 7
        if wire == _VARINT:
            value, at = _varint(data, at)
            yield number, value
        elif wire == _BYTES:
            size, at = _varint(data, at)
            yield number, data[at : at + size]
            at += size
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            yield number, data[at : at + size]
            at += size
        else:
            raise ValueError(f"wire type {wire} of field {number}")


def _text(value: int | bytes) -> str:
    assert isinstance(value, bytes)
    return value.decode()


def _entry(value: int | bytes) -> tuple[str, bytes]:
    """One map entry: its key and its value's bytes."""
    assert isinstance(value, bytes)
    found = dict(_fields(value))
    raw = found.get(2, b"")
    assert isinstance(raw, bytes)
    return _text(found.get(1, b"")), raw


def _metadata(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    names = {1: "name", 2: "generateName", 3: "namespace"}
    for number, value in _fields(data):
        if number in names:
            meta[names[number]] = _text(value)
        elif number in (11, 12):
            key, raw = _entry(value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = raw.decode()
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(value))
    return meta


def _object(kind: str, data: bytes) -> dict[str, Any]:
    """The JSON form of one Namespace, Secret or ConfigMap."""
    obj: dict[str, Any] = {"metadata": {}}
    for number, value in _fields(data):
        if number == 1:
            assert isinstance(value, bytes)
            obj["metadata"] = _metadata(value)
        elif kind == "Namespace" and number == 2:
            assert isinstance(value, bytes)
            finalizers = [_text(v) for n, v in _fields(value) if n == 1]
            obj["spec"] = {"finalizers": finalizers} if finalizers else {}
        elif kind in ("Secret", "ConfigMap") and number == 2:
            key, raw = _entry(value)
            stored = base64.b64encode(raw).decode() if kind == "Secret" else raw.decode()
            obj.setdefault("data", {})[key] = stored
        elif kind == "Secret" and number == 3:
            obj["type"] = _text(value)
        elif (kind, number) == ("Secret", 4):
            key, raw = _entry(value)
            obj.setdefault("stringData", {})[key] = raw.decode()
        elif (kind, number) == ("ConfigMap", 3):
            key, raw = _entry(value)
            obj.setdefault("binaryData", {})[key] = base64.b64encode(raw).decode()
        elif (kind, number) in (("Secret", 5), ("ConfigMap", 4)):
            obj["immutable"] = bool(value)
    return obj


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf request body as the JSON object it stands for (apiVersion and kind too)."""
    if not body.startswith(_MAGIC):
        raise errors.bad_request("couldn't get version/kind; protobuf body without its prefix")
    envelope = dict(_fields(body[len(_MAGIC) :]))
    type_meta = envelope.get(1, b"")
    raw = envelope.get(2, b"")
    assert isinstance(type_meta, bytes)
    assert isinstance(raw, bytes)
    names = {n: _text(v) for n, v in _fields(type_meta)}
    api_version, kind = names.get(1, ""), names.get(2, "")
    if (api_version, kind) not in (("v1", "Namespace"), ("v1", "Secret"), ("v1", "ConfigMap")):
        raise errors.status(
            415,
            "UnsupportedMediaType",
            f"the double decodes protobuf only for v1 Namespace, Secret and ConfigMap, not "
            f"{api_version} {kind}: send it as application/json",
        )
    return {"apiVersion": api_version, "kind": kind, **_object(kind, raw)}

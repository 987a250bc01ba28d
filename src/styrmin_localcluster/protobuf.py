"""Reading the Kubernetes protobuf encoding of the bodies clients send that way.

client-go sends built-in objects as protobuf when asked to; Helm's release storage does so for Secrets
and ConfigMaps, and then also sends DeleteOptions that way. The server answers in JSON, which clients
accept. Only these kinds are decoded; another kind sent as protobuf is answered 415.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from .errors import ApiError

MAGIC = b"k8s\x00"
Fields = list[tuple[int, int, Any]]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> Fields:
    """The (field number, wire type, value) triples of one message."""
    fields: Fields = []
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        value: Any
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        fields.append((number, wire, value))
    return fields


def _text(value: bytes) -> str:
    return value.decode("utf-8")


def _map_entry(value: bytes) -> tuple[str, bytes]:
    key, item = "", b""
    for number, _, field_value in _fields(value):
        if number == 1:
            key = _text(field_value)
        elif number == 2:
            item = field_value
    return key, item


def _time(value: bytes) -> str:
    seconds = 0
    for number, _, field_value in _fields(value):
        if number == 1:
            seconds = field_value
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _owner_reference(value: bytes) -> dict[str, Any]:
    names = {5: "apiVersion", 1: "kind", 3: "name", 4: "uid"}
    ref: dict[str, Any] = {}
    for number, _, field_value in _fields(value):
        if number in names:
            ref[names[number]] = _text(field_value)
        elif number == 6:
            ref["controller"] = bool(field_value)
        elif number == 7:
            ref["blockOwnerDeletion"] = bool(field_value)
    return ref


def _object_meta(value: bytes) -> dict[str, Any]:
    strings = {1: "name", 2: "generateName", 3: "namespace", 4: "selfLink", 5: "uid", 6: "resourceVersion"}
    meta: dict[str, Any] = {}
    for number, _, field_value in _fields(value):
        if number in strings:
            meta[strings[number]] = _text(field_value)
        elif number == 7:
            meta["generation"] = field_value
        elif number == 8:
            meta["creationTimestamp"] = _time(field_value)
        elif number == 9:
            meta["deletionTimestamp"] = _time(field_value)
        elif number == 10:
            meta["deletionGracePeriodSeconds"] = field_value
        elif number in (11, 12):
            key, item = _map_entry(field_value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = _text(item)
        elif number == 13:
            meta.setdefault("ownerReferences", []).append(_owner_reference(field_value))
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(field_value))
    # Empty strings are how protobuf says "unset"; JSON clients would leave them out.
    return {k: v for k, v in meta.items() if v != ""}


def _secret(raw: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret"}
    for number, _, value in _fields(raw):
        if number == 1:
            obj["metadata"] = _object_meta(value)
        elif number == 2:
            key, item = _map_entry(value)
            obj.setdefault("data", {})[key] = base64.b64encode(item).decode()
        elif number == 3:
            obj["type"] = _text(value)
        elif number == 4:
            key, item = _map_entry(value)
            obj.setdefault("stringData", {})[key] = _text(item)
        elif number == 5:
            obj["immutable"] = bool(value)
    return obj


def _configmap(raw: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap"}
    for number, _, value in _fields(raw):
        if number == 1:
            obj["metadata"] = _object_meta(value)
        elif number == 2:
            key, item = _map_entry(value)
            obj.setdefault("data", {})[key] = _text(item)
        elif number == 3:
            key, item = _map_entry(value)
            obj.setdefault("binaryData", {})[key] = base64.b64encode(item).decode()
        elif number == 4:
            obj["immutable"] = bool(value)
    return obj


def _delete_options(raw: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    for number, _, value in _fields(raw):
        if number == 1:
            obj["gracePeriodSeconds"] = value
        elif number == 2:
            preconditions = {}
            for sub_number, _, sub_value in _fields(value):
                preconditions["uid" if sub_number == 1 else "resourceVersion"] = _text(sub_value)
            obj["preconditions"] = preconditions
        elif number == 3:
            obj["orphanDependents"] = bool(value)
        elif number == 4:
            obj["propagationPolicy"] = _text(value)
        elif number == 5:
            obj.setdefault("dryRun", []).append(_text(value))
    return obj


_DECODERS = {"Secret": _secret, "ConfigMap": _configmap, "DeleteOptions": _delete_options}


def decode(body: bytes) -> dict[str, Any]:
    """A JSON-like object from a protobuf-encoded Secret, ConfigMap or DeleteOptions."""
    if not body.startswith(MAGIC):
        raise ApiError(400, "BadRequest", "the protobuf body does not start with the Kubernetes magic number")
    try:
        type_meta: dict[str, str] = {}
        raw = b""
        for number, _, value in _fields(body[len(MAGIC) :]):
            if number == 1:
                for sub_number, _, sub_value in _fields(value):
                    type_meta["apiVersion" if sub_number == 1 else "kind"] = _text(sub_value)
            elif number == 2:
                raw = value
        decoder = _DECODERS.get(type_meta.get("kind", ""))
        if decoder is None:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the local cluster reads protobuf bodies of Secret, ConfigMap and DeleteOptions only, "
                f"not {type_meta.get('kind') or 'this kind'}; send it as application/json",
            )
        obj = decoder(raw)
        if type_meta.get("apiVersion"):
            obj["apiVersion"] = type_meta["apiVersion"]
        return obj
    except (ValueError, UnicodeDecodeError, IndexError) as exc:
        raise ApiError(400, "BadRequest", f"the protobuf body could not be read: {exc}") from exc

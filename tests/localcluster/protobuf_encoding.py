"""Encode Secrets and ConfigMaps as Kubernetes protobuf, as client-go does, to test the server's decoding."""

from __future__ import annotations

import base64
from typing import Any

from styrmin_localcluster.protobuf import MAGIC


def encode_object(kind: str, obj: dict[str, Any]) -> bytes:

    def varint(value: int) -> bytes:
        out = bytearray()
        while True:
            byte = value & 0x7F
            value >>= 7
            if value:
                out.append(byte | 0x80)
            else:
                out.append(byte)
                return bytes(out)

    def field(number: int, payload: bytes) -> bytes:
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    def entry(key: str, value: bytes) -> bytes:
        return field(1, key.encode()) + field(2, value)

    meta_in = obj.get("metadata") or {}
    meta = b""
    for number, name in ((1, "name"), (3, "namespace"), (6, "resourceVersion")):
        if meta_in.get(name):
            meta += field(number, meta_in[name].encode())
    for key, value in (meta_in.get("labels") or {}).items():
        meta += field(11, entry(key, value.encode()))
    raw = field(1, meta)
    if kind == "Secret":
        for key, value in (obj.get("data") or {}).items():
            raw += field(2, entry(key, base64.b64decode(value)))
        if obj.get("type"):
            raw += field(3, obj["type"].encode())
    else:
        for key, value in (obj.get("data") or {}).items():
            raw += field(2, entry(key, value.encode()))
    type_meta = field(1, b"v1") + field(2, kind.encode())
    return MAGIC + field(1, type_meta) + field(2, raw) + field(4, b"application/vnd.kubernetes.protobuf")

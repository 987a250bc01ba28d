"""SPDY/3.1 framing, as far as a server of Kubernetes' streaming protocols needs it.

Frames are read from a byte stream with `FrameReader` and written with `FrameWriter`. Header blocks are
zlib-compressed with the SPDY/3 dictionary, one compression context per direction for the whole connection,
so each connection needs exactly one reader and one writer.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

SYN_STREAM = 1
SYN_REPLY = 2
RST_STREAM = 3
SETTINGS = 4
PING = 6
GOAWAY = 7
HEADERS = 8
WINDOW_UPDATE = 9

FLAG_FIN = 0x01

# RST_STREAM status codes.
PROTOCOL_ERROR = 1
INVALID_STREAM = 2
REFUSED_STREAM = 3
CANCEL = 5
INTERNAL_ERROR = 6

# GOAWAY status codes.
GOAWAY_OK = 0
GOAWAY_PROTOCOL_ERROR = 1

VERSION = 3
# A peer may announce frames up to 16 MiB; this server accepts smaller ones and ends the connection
# otherwise, so that one frame never holds more than this much memory.
MAX_CONTROL_FRAME = 64 * 1024
MAX_DATA_FRAME = 1024 * 1024
MAX_HEADER_BLOCK = 64 * 1024

# The dictionary's words (separated by |), each stored with a 4-byte length before it, then a tail stored as it is.
_DICTIONARY_WORDS = (
    "options|head|post|put|delete|trace|accept|accept-charset|accept-encoding|accept-language|"
    "accept-ranges|age|allow|authorization|cache-control|connection|content-base|content-encoding|"
    "content-language|content-length|content-location|content-md5|content-range|content-type|date|"
    "etag|expect|expires|from|host|if-match|if-modified-since|if-none-match|if-range|"
    "if-unmodified-since|last-modified|location|max-forwards|pragma|proxy-authenticate|"
    "proxy-authorization|range|referer|retry-after|server|te|trailer|transfer-encoding|upgrade|"
    "user-agent|vary|via|warning|www-authenticate|method|get|status|200 OK|version|HTTP/1.1|url|"
    "public|set-cookie|keep-alive|origin"
)
_DICTIONARY_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Una"
    "uthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service"
    " UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, "
    "Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,application/xml,applicat"
    "ion/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf"
    "-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = (
    b"".join(struct.pack(">I", len(word)) + word.encode() for word in _DICTIONARY_WORDS.split("|"))
    + _DICTIONARY_TAIL.encode()
)
assert zlib.adler32(DICTIONARY) == 0xE3C6A7C2, "SPDY/3 header dictionary does not match the specification"


class SpdyError(Exception):
    """The peer broke the protocol; the connection should end with GOAWAY(PROTOCOL_ERROR)."""


@dataclass
class DataFrame:
    stream_id: int
    fin: bool
    data: bytes


@dataclass
class ControlFrame:
    kind: int
    flags: int
    stream_id: int = 0
    headers: dict[str, list[str]] = field(default_factory=dict)
    # RST_STREAM and GOAWAY status, PING id, WINDOW_UPDATE delta.
    value: int = 0

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


Frame = DataFrame | ControlFrame


class FrameReader:
    """Turns received bytes into frames; keeps the partial frame and the header decompression context."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        while len(self._buffer) >= 8:
            first, flags_length = struct.unpack_from(">II", self._buffer)
            flags, length = flags_length >> 24, flags_length & 0xFFFFFF
            control = bool(first & 0x80000000)
            if length > (MAX_CONTROL_FRAME if control else MAX_DATA_FRAME):
                raise SpdyError(f"frame of {length} bytes is larger than this server accepts")
            if len(self._buffer) < 8 + length:
                break
            payload = bytes(self._buffer[8 : 8 + length])
            del self._buffer[: 8 + length]
            if control:
                frame = self._control((first >> 16) & 0x7FFF, first & 0xFFFF, flags, payload)
                if frame is not None:
                    frames.append(frame)
            else:
                frames.append(DataFrame(first & 0x7FFFFFFF, bool(flags & FLAG_FIN), payload))
        return frames

    def _control(self, version: int, kind: int, flags: int, payload: bytes) -> ControlFrame | None:
        if version != VERSION:
            raise SpdyError(f"unsupported SPDY version {version}")
        try:
            if kind == SYN_STREAM:
                stream_id = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
                return ControlFrame(kind, flags, stream_id, self._headers(payload[10:]))
            if kind in (SYN_REPLY, HEADERS):
                stream_id = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
                return ControlFrame(kind, flags, stream_id, self._headers(payload[4:]))
            if kind in (RST_STREAM, WINDOW_UPDATE):
                stream_id, value = struct.unpack_from(">II", payload)
                return ControlFrame(kind, flags, stream_id & 0x7FFFFFFF, value=value & 0x7FFFFFFF)
            if kind == GOAWAY:
                stream_id, value = struct.unpack_from(">II", payload)
                return ControlFrame(kind, flags, stream_id & 0x7FFFFFFF, value=value)
            if kind == PING:
                return ControlFrame(kind, flags, value=struct.unpack_from(">I", payload)[0])
        except struct.error as exc:
            raise SpdyError(f"control frame of type {kind} is too short") from exc
        if kind == SETTINGS:
            return ControlFrame(kind, flags)
        # Unknown control frames are ignored, as the specification asks.
        return None

    def _headers(self, block: bytes) -> dict[str, list[str]]:
        try:
            raw = self._inflate.decompress(block, MAX_HEADER_BLOCK)
        except zlib.error as exc:
            raise SpdyError(f"header block does not decompress: {exc}") from exc
        if self._inflate.unconsumed_tail:
            raise SpdyError("header block is larger than this server accepts")
        headers: dict[str, list[str]] = {}
        try:
            (count,) = struct.unpack_from(">I", raw)
            offset = 4
            for _ in range(count):
                (size,) = struct.unpack_from(">I", raw, offset)
                name = raw[offset + 4 : offset + 4 + size].decode()
                offset += 4 + size
                (size,) = struct.unpack_from(">I", raw, offset)
                value = raw[offset + 4 : offset + 4 + size].decode()
                offset += 4 + size
                if offset > len(raw):
                    raise SpdyError("header block is truncated")
                headers.setdefault(name.lower(), []).extend(value.split("\x00"))
        except (struct.error, UnicodeDecodeError) as exc:
            raise SpdyError(f"header block is malformed: {exc}") from exc
        return headers


class FrameWriter:
    """Serialises frames; keeps the header compression context."""

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(zdict=DICTIONARY)

    def _control(self, kind: int, flags: int, payload: bytes) -> bytes:
        return struct.pack(">HHI", 0x8000 | VERSION, kind, (flags << 24) | len(payload)) + payload

    def _header_block(self, headers: dict[str, str]) -> bytes:
        raw = [struct.pack(">I", len(headers))]
        for name, value in headers.items():
            for part in (name.lower().encode(), value.encode()):
                raw += [struct.pack(">I", len(part)), part]
        return self._deflate.compress(b"".join(raw)) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    def syn_stream(self, stream_id: int, headers: dict[str, str], fin: bool = False) -> bytes:
        """Opens a stream (what a client sends; the server side here only answers streams)."""
        payload = struct.pack(">IIH", stream_id, 0, 0) + self._header_block(headers)
        return self._control(SYN_STREAM, FLAG_FIN if fin else 0, payload)

    def syn_reply(self, stream_id: int, headers: dict[str, str] | None = None, fin: bool = False) -> bytes:
        block = self._header_block(headers or {})
        return self._control(SYN_REPLY, FLAG_FIN if fin else 0, struct.pack(">I", stream_id) + block)

    def rst_stream(self, stream_id: int, status: int) -> bytes:
        return self._control(RST_STREAM, 0, struct.pack(">II", stream_id, status))

    def ping(self, ping_id: int) -> bytes:
        return self._control(PING, 0, struct.pack(">I", ping_id))

    def goaway(self, last_stream_id: int, status: int) -> bytes:
        return self._control(GOAWAY, 0, struct.pack(">II", last_stream_id, status))

    def data(self, stream_id: int, data: bytes, fin: bool = False) -> bytes:
        flags = FLAG_FIN if fin else 0
        return struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(data)) + data

"""Port forwarding to pods (`kubectl port-forward`) over Kubernetes' SPDY/3.1 streaming protocol.

A client POSTs to `/api/v1/namespaces/NS/pods/NAME/portforward` with `Upgrade: SPDY/3.1` and
`X-Stream-Protocol-Version: portforward.k8s.io`; after `101 Switching Protocols` the connection carries SPDY
frames. For every forwarded connection the client opens two streams with the same `requestid` header: an
`error` stream and a `data` stream, both naming the pod's `port`. The server connects to that port, copies
bytes both ways on the data stream, writes a message to the error stream if the connection fails, and ends
both streams when the pod's side closes. Pods of the local cluster share the machine's loopback, so the
port is reached on 127.0.0.1.

The WebSocket variant of the protocol is not offered: its upgrade is refused with an ordinary error, and
clients (kubectl 1.31 and later) fall back to SPDY.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from . import errors, spdy
from .apiserver import ApiServer
from .errors import ApiError

log = logging.getLogger("styrmin_localcluster.portforward")

PROTOCOL = "portforward.k8s.io"
_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/portforward$")
# Limits of one port-forward connection.
MAX_STREAMS = 200
# Bytes received from the client and not yet written to the pod, over all its streams; reading from the
# client pauses above this.
MAX_BUFFERED = 4 * 1024 * 1024
CHUNK = 32 * 1024
CONNECT_TIMEOUT = 10.0
# How long the second stream of a pair may keep the client waiting (the kubelet allows as much).
PAIR_TIMEOUT = 30.0


@dataclass
class _Pair:
    """The error and data streams of one forwarded connection."""

    request_id: str
    port: int
    error_id: int = 0
    data_id: int = 0
    # Bytes from the client for the pod, and whether the client has finished sending.
    inbound: bytearray = field(default_factory=bytearray)
    inbound_done: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    timer: asyncio.TimerHandle | None = None
    reset: bool = False


class PortForwardSession(asyncio.Protocol):
    """One upgraded connection: answers the client's streams and forwards them to 127.0.0.1."""

    def __init__(self, pod: str, uid: str, on_close: Callable[[PortForwardSession], None]) -> None:
        self.pod = pod
        self.uid = uid
        self._on_close = on_close
        self._transport: asyncio.Transport | None = None
        self._reader = spdy.FrameReader()
        self._writer = spdy.FrameWriter()
        self._pairs: dict[str, _Pair] = {}
        self._streams: dict[int, _Pair] = {}
        self._last_stream = 0
        self._buffered = 0
        self._reading_paused = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._going_away = False

    # --- asyncio.Protocol ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without deriving from it.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._reader.feed(data)
            for frame in frames:
                self._handle(frame)
        except spdy.SpdyError as exc:
            log.warning("port-forward to %s: %s; closing the connection", self.pod, exc)
            self._send(self._writer.goaway(self._last_stream, spdy.GOAWAY_PROTOCOL_ERROR))
            self.close()

    def eof_received(self) -> bool | None:
        return None

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._writable.set()
        for pair in list(self._pairs.values()):
            self._drop(pair)
        self._transport = None
        self._on_close(self)

    def close(self) -> None:
        """End the connection and every forwarded stream."""
        if self._transport is not None:
            self._transport.close()

    # --- frames from the client --------------------------------------------------------------------

    def _handle(self, frame: spdy.Frame) -> None:
        if isinstance(frame, spdy.DataFrame):
            self._data(frame)
        elif frame.kind == spdy.SYN_STREAM:
            self._syn_stream(frame)
        elif frame.kind == spdy.RST_STREAM:
            pair = self._streams.get(frame.stream_id)
            if pair is not None:
                self._drop(pair)
        elif frame.kind == spdy.PING:
            if frame.value % 2 == 1:  # the client's pings are odd; a server answers them
                self._send(self._writer.ping(frame.value))
        elif frame.kind == spdy.GOAWAY:
            self._going_away = True
            if not self._pairs:
                self.close()
        # SETTINGS, WINDOW_UPDATE, HEADERS and SYN_REPLY need no answer here.

    def _syn_stream(self, frame: spdy.ControlFrame) -> None:
        stream_id = frame.stream_id
        if stream_id <= self._last_stream or stream_id % 2 == 0:
            raise spdy.SpdyError(f"stream id {stream_id} is not a new client stream")
        self._last_stream = stream_id
        if self._going_away or len(self._streams) >= MAX_STREAMS:
            self._send(self._writer.rst_stream(stream_id, spdy.REFUSED_STREAM))
            return
        headers = {name: values[0] for name, values in frame.headers.items() if values}
        kind = headers.get("streamtype", "")
        try:
            port = int(headers.get("port", ""))
        except ValueError:
            port = 0
        if kind not in ("error", "data") or not 0 < port < 65536:
            log.info("port-forward to %s: stream %d has no valid streamtype/port", self.pod, stream_id)
            self._send(self._writer.rst_stream(stream_id, spdy.PROTOCOL_ERROR))
            return
        # Clients without a request id pair an error stream with the data stream opened right after it.
        request_id = headers.get("requestid") or str(stream_id if kind == "error" else stream_id - 2)
        pair = self._pairs.get(request_id)
        if pair is None:
            pair = _Pair(request_id, port)
            self._pairs[request_id] = pair
            pair.timer = asyncio.get_running_loop().call_later(PAIR_TIMEOUT, self._pair_timeout, pair)
        if (pair.error_id if kind == "error" else pair.data_id) or pair.port != port:
            self._send(self._writer.rst_stream(stream_id, spdy.PROTOCOL_ERROR))
            return
        if kind == "error":
            pair.error_id = stream_id
        else:
            pair.data_id = stream_id
        self._streams[stream_id] = pair
        self._send(self._writer.syn_reply(stream_id))
        if pair.error_id and pair.data_id:
            if pair.timer is not None:
                pair.timer.cancel()
            pair.task = asyncio.create_task(self._forward(pair))

    def _data(self, frame: spdy.DataFrame) -> None:
        pair = self._streams.get(frame.stream_id)
        if pair is None or frame.stream_id != pair.data_id:
            return  # the error stream carries nothing from the client; streams already ended are ignored
        if frame.data and not pair.inbound_done:
            pair.inbound += frame.data
            self._buffered += len(frame.data)
            if self._buffered > MAX_BUFFERED and self._transport is not None and not self._reading_paused:
                self._transport.pause_reading()
                self._reading_paused = True
        if frame.fin:
            pair.inbound_done = True
        pair.wake.set()

    def _pair_timeout(self, pair: _Pair) -> None:
        if pair.task is None:
            log.info("port-forward to %s: request %s never got its second stream", self.pod, pair.request_id)
            for stream_id in (pair.error_id, pair.data_id):
                if stream_id:
                    self._send(self._writer.rst_stream(stream_id, spdy.CANCEL))
            self._drop(pair)

    # --- forwarding ----------------------------------------------------------------------------------

    async def _forward(self, pair: _Pair) -> None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", pair.port), CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            reason = "connect: connection refused" if isinstance(exc, ConnectionRefusedError) else str(exc)
            message = (
                f"error forwarding port {pair.port} to pod {self.pod}, uid {self.uid}: "
                f"dial tcp 127.0.0.1:{pair.port}: {reason or type(exc).__name__}"
            )
            log.info("%s", message)
            self._send(self._writer.data(pair.error_id, message.encode(), fin=True))
            self._send(self._writer.data(pair.data_id, b"", fin=True))
            self._forget(pair)
            return
        upstream = asyncio.create_task(self._to_pod(pair, writer))
        try:
            while True:
                chunk = await reader.read(CHUNK)
                if not chunk:
                    break
                await self._writable.wait()
                if self._transport is None or pair.reset:
                    return
                self._send(self._writer.data(pair.data_id, chunk))
            self._send(self._writer.data(pair.data_id, b"", fin=True))
            self._send(self._writer.data(pair.error_id, b"", fin=True))
        except (OSError, asyncio.IncompleteReadError):
            self._send(self._writer.rst_stream(pair.data_id, spdy.CANCEL))
            self._send(self._writer.data(pair.error_id, b"", fin=True))
        finally:
            upstream.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await upstream
            writer.close()
            self._forget(pair)

    async def _to_pod(self, pair: _Pair, writer: asyncio.StreamWriter) -> None:
        while True:
            await pair.wake.wait()
            pair.wake.clear()
            if pair.inbound:
                data = bytes(pair.inbound)
                pair.inbound.clear()
                writer.write(data)
                try:
                    await writer.drain()
                finally:
                    self._release(len(data))
            if pair.inbound_done and not pair.inbound:
                if writer.can_write_eof():
                    writer.write_eof()
                return

    def _release(self, size: int) -> None:
        self._buffered -= size
        if self._reading_paused and self._buffered <= MAX_BUFFERED // 2 and self._transport is not None:
            self._transport.resume_reading()
            self._reading_paused = False

    def _drop(self, pair: _Pair) -> None:
        """End a pair at once (reset by the client, timed out, or the connection ended)."""
        pair.reset = True
        if pair.task is not None and not pair.task.done():
            pair.task.cancel()
        self._forget(pair)

    def _forget(self, pair: _Pair) -> None:
        if pair.timer is not None:
            pair.timer.cancel()
        if self._pairs.get(pair.request_id) is pair:
            del self._pairs[pair.request_id]
        for stream_id in (pair.error_id, pair.data_id):
            if self._streams.get(stream_id) is pair:
                del self._streams[stream_id]
        if pair.inbound:
            self._release(len(pair.inbound))
            pair.inbound.clear()
        if self._going_away and not self._pairs:
            self.close()

    def _send(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)


class _Discard(asyncio.Protocol):
    """Stands in for a connection whose upgrade was refused and which is closing."""


@dataclass
class UpgradeRequest:
    method: str
    path: str
    headers: dict[str, str]


class PortForwarder:
    """Decides on port-forward upgrades and keeps the open sessions, to close them on shutdown."""

    def __init__(self, api: ApiServer, token: str | None) -> None:
        self.api = api
        self.token = token
        self.sessions: set[PortForwardSession] = set()

    def upgrade(self, request: UpgradeRequest, transport: asyncio.Transport) -> asyncio.Protocol:
        """Answer an `Upgrade: SPDY/3.1` request on `transport`; returns the connection's new protocol."""
        try:
            pod, uid = self._check(request)
        except ApiError as exc:
            body = orjson.dumps(exc.status())
            reason = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}.get(exc.code, "Error")
            transport.write(
                f"HTTP/1.1 {exc.code} {reason}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            transport.close()
            return _Discard()
        transport.write(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            b"X-Stream-Protocol-Version: " + PROTOCOL.encode() + b"\r\n\r\n"
        )
        session = PortForwardSession(pod, uid, self.sessions.discard)
        self.sessions.add(session)
        session.connection_made(transport)
        return session

    def _check(self, request: UpgradeRequest) -> tuple[str, str]:
        if self.token is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
                raise errors.unauthorized()
        match = _PATH.match(request.path)
        if match is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({request.path})"
            )
        offered = [p.strip() for p in request.headers.get("x-stream-protocol-version", "").split(",")]
        if PROTOCOL not in offered:
            raise ApiError(400, "BadRequest", f"port forwarding needs stream protocol {PROTOCOL}")
        namespace, name = match.groups()
        pod: Any = self.api.store.get(("", "pods"), namespace, name)
        if pod is None:
            raise errors.not_found("pods", name)
        phase = pod.get("status", {}).get("phase", "Pending")
        if phase != "Running":
            raise ApiError(
                400,
                "BadRequest",
                f"unable to forward port because pod is not running. Current status={phase}",
            )
        return f"{namespace}/{name}", pod["metadata"].get("uid", "")

    def close_all(self) -> None:
        for session in list(self.sessions):
            session.close()


def http_protocol(forwarder: PortForwarder) -> type[HttpToolsProtocol]:
    """uvicorn's HTTP/1.1 protocol, handing `Upgrade: SPDY/3.1` requests to `forwarder`."""

    class Protocol(HttpToolsProtocol):
        def _should_upgrade(self) -> bool:
            return self._get_upgrade() == b"spdy/3.1" or super()._should_upgrade()

        def _unsupported_upgrade_warning(self) -> None:
            # A WebSocket upgrade is answered by the application with an error, after which clients fall
            # back to SPDY; that is expected and not worth a warning.
            pass

        def handle_websocket_upgrade(self) -> None:
            if self._get_upgrade() != b"spdy/3.1":
                super().handle_websocket_upgrade()
                return
            self.connections.discard(self)
            self._unset_keepalive_if_required()
            request = UpgradeRequest(
                self.scope["method"],
                self.url.split(b"?", 1)[0].decode("latin-1"),
                {name.decode("latin-1"): value.decode("latin-1") for name, value in self.scope["headers"]},
            )
            protocol = forwarder.upgrade(request, self.transport)
            self.transport.set_protocol(protocol)

    return Protocol

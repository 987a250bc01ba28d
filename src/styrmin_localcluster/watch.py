"""Watch streams: replay from a resourceVersion, initial events with their end bookmark, bookmarks, timeouts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from .apiserver import ApiServer
from .errors import gone
from .resources import ResourceType
from .selectors import parse_field_selector, parse_label_selector
from .store import Event

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# How often an idle watch that allows bookmarks gets one.
BOOKMARK_INTERVAL = 15.0


@dataclass
class WatchRequest:
    rtype: ResourceType
    namespace: str | None
    label_selector: str | None = None
    field_selector: str | None = None
    resource_version: str | None = None
    timeout_seconds: float | None = None
    allow_bookmarks: bool = False
    send_initial_events: bool = False


def _line(event_type: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": event_type, "object": obj}) + b"\n"


async def watch_events(
    api: ApiServer,
    request: WatchRequest,
    render: Callable[[dict[str, Any]], dict[str, Any]] = lambda obj: obj,
) -> AsyncIterator[bytes]:
    """Yield watch event lines (JSON, one per line) until the timeout or the client goes away."""
    rtype = request.rtype
    key = rtype.storage_key
    labels_match = parse_label_selector(request.label_selector)
    fields_match = parse_field_selector(request.field_selector)
    namespace = request.namespace if rtype.namespaced else None

    def matches(obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if namespace is not None and meta.get("namespace") != namespace:
            return False
        return labels_match(meta.get("labels") or {}) and fields_match(obj)

    def as_version(obj: dict[str, Any]) -> dict[str, Any]:
        if obj.get("apiVersion") == rtype.api_version:
            return obj
        return dict(obj, apiVersion=rtype.api_version)

    def translate(event: Event) -> tuple[str, dict[str, Any]] | None:
        now_matches = matches(event.obj)
        before = matches(event.old) if event.old is not None else False
        if event.type == "DELETED":
            return ("DELETED", event.obj) if before or now_matches else None
        if now_matches and not before:
            return ("ADDED", event.obj)
        if now_matches:
            return ("MODIFIED", event.obj)
        if before:
            return ("DELETED", event.obj)
        return None

    def bookmark(resource_version: int, initial_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(resource_version)}
        if initial_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        return _line("BOOKMARK", {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": meta})

    queue = api.store.subscribe(key)
    try:
        last_sent = api.store.resource_version
        rv = request.resource_version
        if request.send_initial_events or rv in (None, "", "0"):
            for obj in api.store.list(key, namespace):
                if matches(obj):
                    yield _line("ADDED", render(as_version(obj)))
            if request.send_initial_events and request.allow_bookmarks:
                yield bookmark(last_sent, initial_end=True)
        else:
            try:
                since = int(rv)
            except ValueError:
                since = -1
            replay = api.store.events_since(key, since) if since >= 0 else None
            if replay is None:
                error = gone(f"too old resource version: {rv} ({api.store.oldest_resumable(key) + 1})")
                yield _line("ERROR", error.status())
                return
            for event in replay:
                translated = translate(event)
                if translated is not None:
                    yield _line(translated[0], render(as_version(translated[1])))
        deadline = time.monotonic() + request.timeout_seconds if request.timeout_seconds else None
        while True:
            wait = BOOKMARK_INTERVAL if request.allow_bookmarks else None
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                wait = remaining if wait is None else min(wait, remaining)
            try:
                event = await asyncio.wait_for(queue.get(), wait) if wait is not None else await queue.get()
            except TimeoutError:
                if request.allow_bookmarks and (deadline is None or time.monotonic() < deadline):
                    yield bookmark(api.store.resource_version)
                continue
            if event.resource_version <= last_sent:
                continue
            translated = translate(event)
            if translated is not None:
                yield _line(translated[0], render(as_version(translated[1])))
    finally:
        api.store.unsubscribe(key, queue)

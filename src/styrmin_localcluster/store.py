"""The object store: every object by kind, namespace and name, one resourceVersion counter, and events.

Stored objects are never changed in place: a write puts a new dict in place of the old one, so readers
and watch streams can hold on to what they got without copying.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

_List = list  # the builtin, for annotations inside classes that define a `list` method
StorageKey = tuple[str, str]  # (group, plural)
ObjectKey = tuple[str, str]  # (namespace or "", name)

# How many recent events of each kind a watch can resume from; older ones answer 410 Expired.
HISTORY_PER_KIND = 20000


def clone(obj: Any) -> Any:
    """A deep copy of a JSON-like value (much faster than copy.deepcopy for these)."""
    return orjson.loads(orjson.dumps(obj))


@dataclass(frozen=True)
class Event:
    resource_version: int
    type: str  # ADDED, MODIFIED, DELETED
    key: StorageKey
    obj: dict[str, Any]
    old: dict[str, Any] | None


class Store:
    """All objects of the cluster, with a change history for watches and listeners for controllers."""

    def __init__(self) -> None:
        self.resource_version = 0
        self._objects: dict[StorageKey, dict[ObjectKey, dict[str, Any]]] = {}
        self._history: dict[StorageKey, deque[Event]] = {}
        # Events with a resourceVersion at or below this are no longer all kept for a kind.
        self._compacted: dict[StorageKey, int] = {}
        # Events at or below this are not kept for any kind (the resourceVersion a state file was saved at).
        self._floor = 0
        self._queues: dict[StorageKey, set[asyncio.Queue[Event]]] = {}
        self._listeners: list[Callable[[Event], None]] = []
        self._change_hooks: list[Callable[[], None]] = []

    # --- reading ---------------------------------------------------------------------------------

    def get(self, key: StorageKey, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get(key, {}).get((namespace, name))

    def list(self, key: StorageKey, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of a kind in (namespace, name) order; `namespace=None` means all namespaces."""
        objects = self._objects.get(key, {})
        if namespace is None:
            return [objects[k] for k in sorted(objects)]
        return [obj for k, obj in sorted(objects.items()) if k[0] == namespace]

    def kinds(self) -> _List[StorageKey]:
        return list(self._objects)

    def count(self, key: StorageKey) -> int:
        return len(self._objects.get(key, {}))

    def iter_all(self) -> Iterator[tuple[StorageKey, dict[str, Any]]]:
        for key, objects in self._objects.items():
            for obj in list(objects.values()):
                yield key, obj

    # --- writing ---------------------------------------------------------------------------------

    def next_resource_version(self) -> int:
        self.resource_version += 1
        return self.resource_version

    def put(self, key: StorageKey, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` (already carrying its new resourceVersion) and announce ADDED or MODIFIED."""
        meta = obj["metadata"]
        object_key = (meta.get("namespace") or "", meta["name"])
        objects = self._objects.setdefault(key, {})
        old = objects.get(object_key)
        objects[object_key] = obj
        self._announce(Event(int(meta["resourceVersion"]), "MODIFIED" if old else "ADDED", key, obj, old))
        return obj

    def remove(self, key: StorageKey, namespace: str, name: str) -> dict[str, Any] | None:
        """Remove an object and announce DELETED with a new resourceVersion."""
        objects = self._objects.get(key, {})
        old = objects.pop((namespace, name), None)
        if old is None:
            return None
        gone = dict(old)
        gone["metadata"] = dict(old["metadata"], resourceVersion=str(self.next_resource_version()))
        self._announce(Event(self.resource_version, "DELETED", key, gone, old))
        return gone

    def drop_kind(self, key: StorageKey) -> None:
        self._objects.pop(key, None)

    # --- events ----------------------------------------------------------------------------------

    def _announce(self, event: Event) -> None:
        history = self._history.setdefault(event.key, deque())
        history.append(event)
        if len(history) > HISTORY_PER_KIND:
            dropped = history.popleft()
            self._compacted[event.key] = dropped.resource_version
        for queue in self._queues.get(event.key, ()):
            queue.put_nowait(event)
        for listener in self._listeners:
            listener(event)
        for hook in self._change_hooks:
            hook()

    def events_since(self, key: StorageKey, resource_version: int) -> _List[Event] | None:
        """Events of a kind after `resource_version`, or None when some of them are no longer kept."""
        if resource_version < self.oldest_resumable(key):
            return None
        return [e for e in self._history.get(key, ()) if e.resource_version > resource_version]

    def oldest_resumable(self, key: StorageKey) -> int:
        return max(self._floor, self._compacted.get(key, 0))

    def subscribe(self, key: StorageKey) -> asyncio.Queue[Event]:
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self._queues.setdefault(key, set()).add(queue)
        return queue

    def unsubscribe(self, key: StorageKey, queue: asyncio.Queue[Event]) -> None:
        self._queues.get(key, set()).discard(queue)

    def add_listener(self, listener: Callable[[Event], None]) -> None:
        """Call `listener` synchronously with every event (controllers queue work from it)."""
        self._listeners.append(listener)

    def add_change_hook(self, hook: Callable[[], None]) -> None:
        self._change_hooks.append(hook)

    # --- persistence -----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {
            "resourceVersion": self.resource_version,
            "objects": [
                {"group": key[0], "plural": key[1], "object": obj}
                for key, objects in self._objects.items()
                for obj in objects.values()
            ],
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Load a snapshot into an empty store; watches can resume only from its resourceVersion on."""
        self.resource_version = int(snapshot.get("resourceVersion", 0))
        for entry in snapshot.get("objects", []):
            key = (entry["group"], entry["plural"])
            obj = entry["object"]
            meta = obj["metadata"]
            self._objects.setdefault(key, {})[(meta.get("namespace") or "", meta["name"])] = obj
        self._floor = self.resource_version

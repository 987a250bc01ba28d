"""The controllers' common loop: events mark objects to reconcile; one task reconciles them in order."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from .apiserver import ApiServer
from .store import Event, StorageKey

log = logging.getLogger("styrmin_localcluster.controllers")

ObjectRef = tuple[str, str]  # (namespace, name)


class Controller:
    """Reconciles objects of one kind; subclasses say which events concern which objects."""

    # The kind this controller reconciles.
    kind: StorageKey = ("", "")

    def __init__(self, api: ApiServer) -> None:
        self.api = api
        self._dirty: dict[ObjectRef, None] = {}
        self._wakeup: asyncio.Event | None = None
        self._timers: dict[ObjectRef, asyncio.TimerHandle] = {}
        api.store.add_listener(self._on_event)

    def refs_for(self, event: Event) -> Iterable[ObjectRef]:
        """The objects of `kind` that an event may change the desired state of."""
        if event.key == self.kind:
            meta = event.obj["metadata"]
            yield (meta.get("namespace") or "", meta["name"])
        for ref in event.obj["metadata"].get("ownerReferences") or []:
            if ref.get("controller"):
                owner = self.api.get_by_uid(str(ref.get("uid")))
                if owner is not None and owner[0] == self.kind:
                    meta = owner[1]["metadata"]
                    yield (meta.get("namespace") or "", meta["name"])

    def reconcile(self, namespace: str, name: str) -> float | None:
        """Bring one object closer to its desired state; returns seconds after which to look again."""
        raise NotImplementedError

    def before_batch(self) -> None:
        """Work that is not about one object of `kind` (subclasses override)."""

    def _on_event(self, event: Event) -> None:
        for ref in self.refs_for(event):
            self.enqueue(ref)

    def enqueue(self, ref: ObjectRef) -> None:
        self._dirty[ref] = None
        if self._wakeup is not None:
            self._wakeup.set()

    def enqueue_after(self, ref: ObjectRef, seconds: float) -> None:
        if ref in self._timers:
            self._timers[ref].cancel()
        loop = asyncio.get_running_loop()
        self._timers[ref] = loop.call_later(seconds, self.enqueue, ref)

    def enqueue_all(self) -> None:
        for obj in self.api.store.list(self.kind):
            meta = obj["metadata"]
            self.enqueue((meta.get("namespace") or "", meta["name"]))

    async def run(self) -> None:
        self._wakeup = asyncio.Event()
        self.enqueue_all()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            self.before_batch()
            batch = list(self._dirty)
            self._dirty.clear()
            for ref in batch:
                try:
                    again = self.reconcile(*ref)
                except Exception:
                    log.exception("%s: reconciling %s/%s failed", type(self).__name__, *ref)
                    again = 5.0
                if again is not None:
                    self.enqueue_after(ref, again)
            # Let the HTTP server and the kubelet run between rounds.
            await asyncio.sleep(0)

"""Garbage collection by owner references, foreground deletion, and namespaces' content and deletion."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from .apiserver import NAMESPACES, ApiServer
from .errors import ApiError
from .store import Event, StorageKey

log = logging.getLogger("styrmin_localcluster.gc")

FOREGROUND = "foregroundDeletion"


class GarbageCollector:
    """Deletes dependents whose owners are gone, and ends foreground and namespace deletions."""

    def __init__(self, api: ApiServer, root_ca: str = "") -> None:
        self.api = api
        # The CA that namespaces' kube-root-ca.crt ConfigMap publishes, as on a real cluster.
        self.root_ca = root_ca
        self._work: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        api.store.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        meta = event.obj["metadata"]
        if event.type == "DELETED":
            self._work.put_nowait(("owner-gone", meta.get("uid")))
            for ref in meta.get("ownerReferences") or []:
                self._work.put_nowait(("check-foreground", ref.get("uid")))
            if meta.get("namespace"):
                self._work.put_nowait(("check-namespace", meta["namespace"]))
            return
        if event.key == NAMESPACES:
            if event.type == "ADDED":
                self._work.put_nowait(("populate-namespace", meta["name"]))
            if meta.get("deletionTimestamp"):
                self._work.put_nowait(("empty-namespace", meta["name"]))
            return
        if meta.get("deletionTimestamp") and FOREGROUND in (meta.get("finalizers") or []):
            self._work.put_nowait(("foreground", meta.get("uid")))
        if event.type == "ADDED" and meta.get("ownerReferences"):
            self._work.put_nowait(("dangling", (event.key, meta.get("namespace") or "", meta["name"])))

    async def run(self) -> None:
        for key, obj in list(self.api.store.iter_all()):
            meta = obj["metadata"]
            if key == NAMESPACES and meta.get("deletionTimestamp"):
                self._work.put_nowait(("empty-namespace", meta["name"]))
            elif meta.get("ownerReferences"):
                self._work.put_nowait(("dangling", (key, meta.get("namespace") or "", meta["name"])))
        while True:
            action, subject = await self._work.get()
            try:
                if action == "owner-gone":
                    self._collect_dependents(subject)
                elif action in ("foreground", "check-foreground"):
                    self._continue_foreground(subject)
                elif action == "empty-namespace":
                    self._empty_namespace(subject)
                elif action == "check-namespace":
                    ns = self.api.store.get(NAMESPACES, "", subject)
                    if ns is not None and ns["metadata"].get("deletionTimestamp"):
                        self._empty_namespace(subject)
                elif action == "populate-namespace":
                    self._populate_namespace(subject)
                elif action == "dangling":
                    await asyncio.sleep(0)
                    self._delete_if_dangling(*subject)
            except Exception:
                # One failed collection must not stop the collector.
                log.exception("garbage collection step %s failed", action)

    def _delete(self, key: StorageKey, obj: dict[str, Any], policy: str = "Background") -> None:
        meta = obj["metadata"]
        try:
            self.api.delete(
                self.api.type_for(key), meta.get("namespace"), meta["name"], {"propagationPolicy": policy}
            )
        except ApiError as exc:
            if exc.code != 404:
                raise

    def _owners_alive(self, obj: dict[str, Any]) -> bool:
        return any(
            self.api.uid_exists(str(ref.get("uid"))) for ref in obj["metadata"].get("ownerReferences") or []
        )

    def _collect_dependents(self, uid: str | None) -> None:
        if not uid:
            return
        for key, dependent in self.api.dependents_of(uid):
            if not self._owners_alive(dependent) and not dependent["metadata"].get("deletionTimestamp"):
                self._delete(key, dependent)

    def _continue_foreground(self, uid: str | None) -> None:
        if not uid:
            return
        found = self.api.get_by_uid(uid)
        if found is None:
            return
        key, owner = found
        meta = owner["metadata"]
        if not meta.get("deletionTimestamp") or FOREGROUND not in (meta.get("finalizers") or []):
            return
        remaining = self.api.dependents_of(uid)
        for dep_key, dependent in remaining:
            if not dependent["metadata"].get("deletionTimestamp"):
                self._delete(dep_key, dependent, "Foreground")
        if not self.api.dependents_of(uid):
            self.api.remove_finalizer(key, owner, FOREGROUND)

    def _empty_namespace(self, name: str) -> None:
        ns = self.api.store.get(NAMESPACES, "", name)
        if ns is None:
            return
        for key in self.api.store.kinds():
            if key == NAMESPACES:
                continue
            for obj in self.api.store.list(key, name):
                if not obj["metadata"].get("deletionTimestamp"):
                    self._delete(key, obj)
        remaining = sum(
            len(self.api.store.list(key, name)) for key in self.api.store.kinds() if key != NAMESPACES
        )
        if remaining == 0:
            self.api.remove_now(NAMESPACES, ns)

    def _populate_namespace(self, name: str) -> None:
        """Every namespace gets its `default` ServiceAccount and the kube-root-ca.crt ConfigMap."""
        ns = self.api.store.get(NAMESPACES, "", name)
        if ns is None or ns["metadata"].get("deletionTimestamp"):
            return
        defaults: list[tuple[StorageKey, dict[str, Any]]] = [
            (
                ("", "serviceaccounts"),
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
            ),
            (
                ("", "configmaps"),
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": "kube-root-ca.crt",
                        "annotations": {
                            "kubernetes.io/description": "Contains a CA bundle that can be used to verify the "
                            "kube-apiserver when using internal endpoints such as the "
                            "internal service IP or kubernetes.default.svc."
                        },
                    },
                    "data": {"ca.crt": self.root_ca},
                },
            ),
        ]
        for key, body in defaults:
            if self.api.store.get(key, name, body["metadata"]["name"]) is None:
                with contextlib.suppress(ApiError):
                    self.api.create(self.api.type_for(key), name, body)

    def _delete_if_dangling(self, key: StorageKey, namespace: str, name: str) -> None:
        obj = self.api.store.get(key, namespace, name)
        if (
            obj is None
            or obj["metadata"].get("deletionTimestamp")
            or not obj["metadata"].get("ownerReferences")
        ):
            return
        if not self._owners_alive(obj):
            self._delete(key, obj)

"""The API server's verbs on objects, with Kubernetes semantics, independent of HTTP.

The HTTP layer and the controllers both go through `ApiServer`, so defaulting, validation,
resourceVersion checks, finalizers and garbage collection behave the same whoever writes.
"""

from __future__ import annotations

import base64
import ipaddress
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml

from . import apply as ssa
from . import errors
from .defaults import apply_defaults
from .errors import ApiError
from .meta import new_uid, now, random_suffix
from .patching import json_patch, merge_patch, strategic_merge_patch
from .resources import Registry, ResourceType
from .selectors import parse_field_selector, parse_label_selector, selector_to_string
from .store import Event, StorageKey, Store, _List, clone
from .validation import validate, validate_name, validate_update

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

NAMESPACES: StorageKey = ("", "namespaces")
PODS: StorageKey = ("", "pods")
CRDS: StorageKey = ("apiextensions.k8s.io", "customresourcedefinitions")
_SERVICE_NETWORK = ipaddress.ip_network("10.96.0.0/16")


@dataclass
class ListResult:
    items: list[dict[str, Any]]
    resource_version: int
    continue_token: str | None = None
    remaining: int | None = None


@dataclass
class DeleteResult:
    obj: dict[str, Any]
    # True when the object is gone; False when it waits for finalizers or graceful termination.
    removed: bool
    warnings: list[str] = field(default_factory=list)


def _owner_uids(obj: dict[str, Any]) -> list[str]:
    return [
        str(ref.get("uid")) for ref in obj.get("metadata", {}).get("ownerReferences") or [] if ref.get("uid")
    ]


def _location(key: StorageKey, obj: dict[str, Any]) -> tuple[StorageKey, str, str]:
    meta = obj["metadata"]
    return key, meta.get("namespace") or "", meta["name"]


class ApiServer:
    """Kubernetes verbs on the store. Methods are synchronous: the event loop runs one at a time.

    Objects returned are the stored ones, shared with watchers: clone one before changing it.
    """

    def __init__(self, store: Store | None = None, registry: Registry | None = None) -> None:
        self.store = store or Store()
        self.registry = registry or Registry()
        # Dependents of each owner uid, and where each uid lives, for garbage collection.
        self._dependents: dict[str, set[tuple[StorageKey, str, str]]] = {}
        self._by_uid: dict[str, tuple[StorageKey, str, str]] = {}
        self._cluster_ips: set[str] = set()
        self._node_ports: set[int] = set()
        # Called after a CRD is written or removed, to serve or stop serving its resources.
        self.on_crd_change: Callable[[dict[str, Any], bool], None] | None = None
        # Decides whether a pod being deleted still runs processes that must be stopped first.
        self.pod_is_running: Callable[[dict[str, Any]], bool] = lambda pod: False
        self.store.add_listener(self._index)

    # --- indexes ---------------------------------------------------------------------------------

    def _index(self, event: Event) -> None:
        location = _location(event.key, event.obj)
        uid = event.obj["metadata"].get("uid")
        old_owners = _owner_uids(event.old) if event.old else []
        for owner in old_owners:
            self._dependents.get(owner, set()).discard(location)
        if event.type == "DELETED":
            if uid:
                self._by_uid.pop(uid, None)
            if event.key == ("", "services"):
                self._cluster_ips.discard((event.obj.get("spec") or {}).get("clusterIP", ""))
            return
        if uid:
            self._by_uid[uid] = location
        for owner in _owner_uids(event.obj):
            self._dependents.setdefault(owner, set()).add(location)

    def rebuild_indexes(self) -> None:
        for key, obj in self.store.iter_all():
            self._index(Event(0, "ADDED", key, obj, None))
            if key == ("", "services"):
                self._cluster_ips.add((obj.get("spec") or {}).get("clusterIP", ""))

    def dependents_of(self, uid: str) -> list[tuple[StorageKey, dict[str, Any]]]:
        found = []
        for key, namespace, name in list(self._dependents.get(uid, ())):
            obj = self.store.get(key, namespace, name)
            if obj is not None:
                found.append((key, obj))
        return found

    def uid_exists(self, uid: str) -> bool:
        return uid in self._by_uid

    def get_by_uid(self, uid: str) -> tuple[StorageKey, dict[str, Any]] | None:
        location = self._by_uid.get(uid)
        if location is None:
            return None
        obj = self.store.get(*location)
        return (location[0], obj) if obj is not None else None

    # --- helpers ---------------------------------------------------------------------------------

    def type_for(self, key: StorageKey) -> ResourceType:
        versions = self.registry.versions_of(*key)
        if not versions:
            raise errors.path_not_found(f"{key}")
        storage = [t for t in versions if t.crd_version and t.crd_version.get("storage")]
        return storage[0] if storage else versions[0]

    def _at_version(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        if obj.get("apiVersion") == rtype.api_version:
            return obj
        return dict(obj, apiVersion=rtype.api_version)

    def _not_found(self, rtype: ResourceType, name: str) -> ApiError:
        return errors.not_found(rtype.plural, name, rtype.group)

    def _check_namespace(self, rtype: ResourceType, namespace: str | None, creating: bool) -> str:
        if not rtype.namespaced:
            return ""
        if not namespace:
            raise errors.bad_request("the namespace of the object is not set and no namespace was given")
        if creating:
            ns = self.store.get(NAMESPACES, "", namespace)
            if ns is None:
                raise errors.not_found("namespaces", namespace)
            if ns["metadata"].get("deletionTimestamp"):
                raise ApiError(
                    403,
                    "Forbidden",
                    f'{rtype.plural} "{namespace}" is forbidden: unable to create new content in namespace '
                    f"{namespace} because it is being terminated",
                )
        return namespace

    def _check_identity(self, rtype: ResourceType, body: Any, namespace: str) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != rtype.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({rtype.api_version})"
            )
        if kind and kind != rtype.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rtype.kind})"
            )
        checked: dict[str, Any] = {**body, "apiVersion": rtype.api_version, "kind": rtype.kind}
        meta = checked.get("metadata")
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        meta = dict(meta)
        if rtype.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        checked["metadata"] = meta
        return checked

    def _validate(self, rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        key = rtype.storage_key
        causes = validate_name(key, obj["metadata"]["name"]) if old is None else []
        causes += validate(key, obj)
        if old is not None:
            causes += validate_update(key, old, obj)
        if rtype.crd_version is not None:
            from .crds import validate_custom_resource

            causes += validate_custom_resource(rtype, obj)
        if causes:
            raise errors.invalid(rtype.kind, obj["metadata"]["name"], causes, rtype.group)

    def _allocate_cluster_ip(self) -> str:
        for _ in range(1000):
            candidate = str(_SERVICE_NETWORK[random.randrange(10, _SERVICE_NETWORK.num_addresses - 1)])  # noqa: S311
            if candidate not in self._cluster_ips:
                self._cluster_ips.add(candidate)
                return candidate
        raise ApiError(500, "InternalError", "no cluster IP is left to allocate")

    def _prepare_service(self, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        spec = obj.setdefault("spec", {})
        old_spec = (old or {}).get("spec") or {}
        if spec.get("type") == "ExternalName":
            return
        if old_spec.get("clusterIP") and not spec.get("clusterIP"):
            spec["clusterIP"] = old_spec["clusterIP"]
        if not spec.get("clusterIP"):
            spec["clusterIP"] = self._allocate_cluster_ip()
        spec["clusterIPs"] = [spec["clusterIP"]]
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            old_ports = {p.get("port"): p.get("nodePort") for p in old_spec.get("ports") or []}
            for port in spec.get("ports") or []:
                if not port.get("nodePort"):
                    port["nodePort"] = old_ports.get(port.get("port")) or self._allocate_node_port()
        if spec.get("type") == "LoadBalancer":
            obj.setdefault("status", {})["loadBalancer"] = {"ingress": [{"ip": "127.0.0.1", "ipMode": "VIP"}]}

    def _allocate_node_port(self) -> int:
        for _ in range(3000):
            port = random.randrange(30000, 32768)  # noqa: S311
            if port not in self._node_ports:
                self._node_ports.add(port)
                return port
        raise ApiError(500, "InternalError", "no node port is left to allocate")

    def _prepare_job(self, obj: dict[str, Any]) -> None:
        spec = obj.setdefault("spec", {})
        uid = obj["metadata"]["uid"]
        if spec.get("manualSelector"):
            return
        generated = {"batch.kubernetes.io/controller-uid": uid}
        if not spec.get("selector"):
            spec["selector"] = {"matchLabels": generated}
        labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
        name = obj["metadata"]["name"]
        labels.setdefault("batch.kubernetes.io/controller-uid", uid)
        labels.setdefault("batch.kubernetes.io/job-name", name)
        labels.setdefault("controller-uid", uid)
        labels.setdefault("job-name", name)

    # --- reading ---------------------------------------------------------------------------------

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.store.get(rtype.storage_key, namespace or "" if rtype.namespaced else "", name)
        if obj is None:
            raise self._not_found(rtype, name)
        return self._at_version(rtype, obj)

    def list(
        self,
        rtype: ResourceType,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListResult:
        labels_match = parse_label_selector(label_selector)
        fields_match = parse_field_selector(field_selector)
        start_after: tuple[str, str] | None = None
        resource_version = self.store.resource_version
        if continue_token:
            try:
                decoded = orjson.loads(base64.b64decode(continue_token))
                start_after = (decoded["start"][0], decoded["start"][1])
                resource_version = int(decoded["rv"])
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                raise errors.bad_request(f"continue key is not valid: {exc}") from exc
        objects = self.store.list(rtype.storage_key, namespace if rtype.namespaced else None)
        matched = []
        for obj in objects:
            meta = obj["metadata"]
            if start_after is not None and (meta.get("namespace") or "", meta["name"]) <= start_after:
                continue
            if label_selector and not labels_match(meta.get("labels") or {}):
                continue
            if field_selector and not fields_match(obj):
                continue
            matched.append(obj)
        items = [self._at_version(rtype, obj) for obj in matched]
        if limit and limit > 0 and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = base64.b64encode(
                orjson.dumps({"rv": resource_version, "start": [last.get("namespace") or "", last["name"]]})
            ).decode()
            return ListResult(items[:limit], resource_version, token, len(items) - limit)
        return ListResult(items, resource_version)

    # --- writing ---------------------------------------------------------------------------------

    def create(
        self,
        rtype: ResourceType,
        namespace: str | None,
        body: Any,
        dry_run: bool = False,
        field_manager: str | None = None,
        strict: bool = False,
    ) -> dict[str, Any]:
        """Create an object; `strict` refuses fields a custom resource's schema does not declare."""
        if not namespace and isinstance(body, dict):
            namespace = (body.get("metadata") or {}).get("namespace")
        namespace = self._check_namespace(rtype, namespace, creating=True)
        obj: dict[str, Any] = clone(self._check_identity(rtype, body, namespace))
        meta = obj["metadata"]
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + random_suffix()
            else:
                raise errors.invalid(
                    rtype.kind,
                    "",
                    [("metadata.name", "Required value: name or generateName is required")],
                    rtype.group,
                )
        if self.store.get(rtype.storage_key, namespace, meta["name"]) is not None:
            raise errors.already_exists(rtype.plural, meta["name"], rtype.group)
        for field_name in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(field_name, None)
        meta["uid"] = new_uid()
        meta["creationTimestamp"] = now()
        meta["generation"] = 1
        if "status" in rtype.subresources and rtype.storage_key not in (
            NAMESPACES,
            ("", "services"),
            ("", "persistentvolumeclaims"),
        ):
            obj.pop("status", None)
        apply_defaults(rtype.storage_key, obj)
        if rtype.storage_key == ("batch", "jobs"):
            self._prepare_job(obj)
        if rtype.crd_version is not None:
            from .crds import default_custom_resource

            obj = default_custom_resource(rtype, obj, strict)
        self._validate(rtype, obj)
        if rtype.storage_key == ("", "services"):
            self._prepare_service(obj, None)
        if rtype.storage_key == CRDS:
            from .crds import initial_crd_status

            initial_crd_status(obj)
        if field_manager and "managedFields" not in obj["metadata"]:
            managed = ssa.record_update(None, obj, field_manager, rtype.kind)
            if managed:
                obj["metadata"]["managedFields"] = managed
        meta = obj["metadata"]
        if dry_run:
            meta["resourceVersion"] = str(self.store.resource_version)
            return obj
        meta["resourceVersion"] = str(self.store.next_resource_version())
        self.store.put(rtype.storage_key, obj)
        if rtype.storage_key == CRDS and self.on_crd_change:
            self.on_crd_change(obj, False)
        return self._at_version(rtype, obj)

    def update(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        require_resource_version: bool | None = None,
        strict: bool = False,
    ) -> dict[str, Any]:
        namespace = self._check_namespace(rtype, namespace, creating=False)
        old = self.store.get(rtype.storage_key, namespace, name)
        if old is None:
            raise self._not_found(rtype, name)
        if subresource == "scale":
            return self._update_scale(rtype, old, body, dry_run, field_manager)
        body = self._check_identity(rtype, body, namespace)
        meta = body["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        wanted_rv = meta.get("resourceVersion")
        if require_resource_version is None:
            require_resource_version = rtype.crd_version is not None
        if wanted_rv:
            if str(wanted_rv) != old["metadata"]["resourceVersion"]:
                raise errors.conflict(rtype.plural, name, rtype.group)
        elif require_resource_version and subresource is None:
            raise errors.invalid(
                rtype.kind,
                name,
                [("metadata.resourceVersion", "Invalid value: 0: must be specified for an update")],
                rtype.group,
            )
        if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
            raise errors.conflict(rtype.plural, name, rtype.group)
        return self._write_update(rtype, old, clone(body), subresource, dry_run, field_manager, strict=strict)

    def _write_update(
        self,
        rtype: ResourceType,
        old: dict[str, Any],
        new: dict[str, Any],
        subresource: str | None,
        dry_run: bool,
        field_manager: str | None,
        operation: str = "Update",
        strict: bool = False,
        managed_subresource: str | None = None,
    ) -> dict[str, Any]:
        old_meta = old["metadata"]
        key = rtype.storage_key
        if subresource == "status":
            status = new.get("status")
            new = clone(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        else:
            meta = new.setdefault("metadata", {})
            for fixed in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "namespace",
                "name",
                "selfLink",
            ):
                if fixed in old_meta:
                    meta[fixed] = old_meta[fixed]
                else:
                    meta.pop(fixed, None)
            if "managedFields" not in meta and "managedFields" in old_meta:
                meta["managedFields"] = old_meta["managedFields"]
            elif meta.get("managedFields") == []:
                meta.pop("managedFields")
            if "status" in rtype.subresources and key not in (NAMESPACES,):
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            apply_defaults(key, new)
            if key == ("batch", "jobs"):
                self._prepare_job_update(old, new)
            if rtype.crd_version is not None:
                from .crds import default_custom_resource

                new = default_custom_resource(rtype, new, strict)
            if key == CRDS:
                from .crds import initial_crd_status

                new["status"] = clone(old.get("status") or {})
                initial_crd_status(new)
            if key == NAMESPACES:
                new["spec"] = old.get("spec", new.get("spec"))
                new["status"] = old.get("status", new.get("status"))
            self._validate(rtype, new, old)
            if key == ("", "services"):
                self._prepare_service(new, old)
            if _spec_changed(old, new):
                new["metadata"]["generation"] = int(old_meta.get("generation", 1)) + 1
        if field_manager and operation == "Update":
            managed = ssa.record_update(
                old, new, field_manager, rtype.kind, managed_subresource or subresource
            )
            if managed:
                new["metadata"]["managedFields"] = managed
            else:
                new["metadata"].pop("managedFields", None)
        new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if _same(old, new):
            return self._at_version(rtype, old)
        if dry_run:
            return self._at_version(rtype, new)
        new_meta = new["metadata"]
        if (
            new_meta.get("deletionTimestamp")
            and not new_meta.get("finalizers")
            and not self._waits_for_kubelet(key, new)
        ):
            self._remove(key, new)
            return self._at_version(rtype, new)
        new_meta["resourceVersion"] = str(self.store.next_resource_version())
        self.store.put(key, new)
        if key == CRDS and self.on_crd_change:
            self.on_crd_change(new, False)
        return self._at_version(rtype, new)

    def _waits_for_kubelet(self, key: StorageKey, obj: dict[str, Any]) -> bool:
        return key == PODS and self.pod_is_running(obj)

    def _prepare_job_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        spec = new.setdefault("spec", {})
        old_spec = old.get("spec") or {}
        if not spec.get("selector") and old_spec.get("selector"):
            spec["selector"] = old_spec["selector"]
        old_labels = ((old_spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
        for label in (
            "batch.kubernetes.io/controller-uid",
            "batch.kubernetes.io/job-name",
            "controller-uid",
            "job-name",
        ):
            if label in old_labels:
                labels.setdefault(label, old_labels[label])

    def scale_of(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        from .crds import scale_paths

        meta = obj["metadata"]
        spec_path, status_path, selector_path = scale_paths(rtype)
        replicas = _path_get(obj, spec_path)
        selector: str | None
        if rtype.crd_version is None:
            selector = selector_to_string((obj.get("spec") or {}).get("selector"))
        else:
            selector = _path_get(obj, selector_path) if selector_path else None
        status: dict[str, Any] = {"replicas": _path_get(obj, status_path) or 0}
        if selector:
            status["selector"] = selector
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": meta["name"],
                "namespace": meta.get("namespace"),
                "uid": meta["uid"],
                "resourceVersion": meta["resourceVersion"],
                "creationTimestamp": meta["creationTimestamp"],
            },
            "spec": {"replicas": replicas if replicas is not None else 0},
            "status": status,
        }

    def _update_scale(
        self,
        rtype: ResourceType,
        old: dict[str, Any],
        scale: Any,
        dry_run: bool,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        from .crds import scale_paths

        if not isinstance(scale, dict):
            raise errors.bad_request("the body of a scale update must be a Scale object")
        wanted_rv = (scale.get("metadata") or {}).get("resourceVersion")
        if wanted_rv and str(wanted_rv) != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype.plural, old["metadata"]["name"], rtype.group)
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise errors.invalid(
                "Scale",
                old["metadata"]["name"],
                [("spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0")],
                "autoscaling",
            )
        new = clone(old)
        _path_set(new, scale_paths(rtype)[0], replicas)
        updated = self._write_update(
            rtype, old, new, None, dry_run, field_manager, managed_subresource="scale"
        )
        return self.scale_of(rtype, updated)

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        raw_patch: bytes,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        force: bool = False,
        strict: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """Patch an object; returns it and whether it was created (server-side apply only)."""
        namespace = self._check_namespace(rtype, namespace, creating=False)
        patch_type = content_type.split(";")[0].strip().lower()
        if patch_type == APPLY_PATCH:
            return self._apply(
                rtype, namespace, name, raw_patch, subresource, dry_run, field_manager, strict, force
            )
        try:
            patch = orjson.loads(raw_patch) if raw_patch else {}
        except orjson.JSONDecodeError:
            try:
                patch = yaml.safe_load(raw_patch)
            except yaml.YAMLError as exc:
                raise errors.bad_request(f"error decoding patch: {exc}") from exc
        old = self.store.get(rtype.storage_key, namespace, name)
        if old is None:
            raise self._not_found(rtype, name)
        current = self.scale_of(rtype, old) if subresource == "scale" else self._at_version(rtype, old)
        if patch_type == JSON_PATCH:
            patched = json_patch(current, patch)
        elif patch_type == MERGE_PATCH:
            if not isinstance(patch, dict):
                raise errors.bad_request("a merge patch must be a JSON object")
            patched = merge_patch(current, patch)
        elif patch_type == STRATEGIC_PATCH:
            if rtype.crd_version is not None:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - "
                    "accepted media types include: application/json-patch+json, application/merge-patch+json, "
                    "application/apply-patch+yaml",
                )
            patched = strategic_merge_patch(current, patch, "Scale" if subresource == "scale" else rtype.kind)
        else:
            raise errors.unsupported_media_type(content_type)
        if subresource == "scale":
            return self._update_scale(rtype, old, patched, dry_run, field_manager), False
        if not isinstance(patched, dict):
            raise errors.bad_request("the patched object is not a JSON object")
        meta = patched.get("metadata") or {}
        wanted_rv = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None
        if wanted_rv and str(wanted_rv) != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype.plural, name, rtype.group)
        if meta.get("name") != name:
            raise errors.bad_request("the patch may not change the name of the object")
        patched = self._check_identity(rtype, patched, namespace)
        patched["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return self._write_update(
            rtype, old, patched, subresource, dry_run, field_manager, strict=strict
        ), False

    def _apply(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        raw_patch: bytes,
        subresource: str | None,
        dry_run: bool,
        field_manager: str | None,
        strict: bool = False,
        force: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        if not field_manager:
            raise errors.bad_request(
                "PATCH requests of type application/apply-patch+yaml must specify a fieldManager"
            )
        try:
            applied = yaml.safe_load(raw_patch) if raw_patch else None
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error decoding YAML: {exc}") from exc
        if not isinstance(applied, dict):
            raise errors.bad_request("the applied configuration must be an object")
        if not applied.get("apiVersion") or not applied.get("kind"):
            raise errors.bad_request(
                "invalid object type: apiVersion and kind must be set in an applied configuration"
            )
        meta = applied.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        applied = self._check_identity(rtype, applied, namespace)
        applied["metadata"]["name"] = name
        old = self.store.get(rtype.storage_key, namespace, name)
        if old is None:
            if subresource:
                raise self._not_found(rtype, name)
            created = ssa.apply(None, applied, field_manager, rtype.kind)
            return self.create(rtype, namespace, created, dry_run=dry_run, strict=strict), True
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv and str(wanted_rv) != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype.plural, name, rtype.group)
        if subresource == "scale":
            replicas = (applied.get("spec") or {}).get("replicas")
            return self._update_scale(
                rtype, old, {"spec": {"replicas": replicas}}, dry_run, field_manager
            ), False
        merged = ssa.apply(self._at_version(rtype, old), applied, field_manager, rtype.kind, force)
        merged["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return self._write_update(
            rtype, old, merged, subresource, dry_run, field_manager, operation="Apply", strict=strict
        ), False

    # --- deleting --------------------------------------------------------------------------------

    def delete(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        options: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> DeleteResult:
        options = options or {}
        namespace = self._check_namespace(rtype, namespace, creating=False)
        key = rtype.storage_key
        obj = self.store.get(key, namespace, name)
        if obj is None:
            raise self._not_found(rtype, name)
        preconditions = options.get("preconditions") or {}
        if preconditions.get("uid") and preconditions["uid"] != obj["metadata"]["uid"]:
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {preconditions['uid']}, UID in object meta: {obj['metadata']['uid']}",
            )
        if (
            preconditions.get("resourceVersion")
            and preconditions["resourceVersion"] != obj["metadata"]["resourceVersion"]
        ):
            raise errors.conflict(rtype.plural, name, rtype.group)
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        warnings = []
        if policy is None:
            if key == ("batch", "jobs"):
                policy = "Orphan"
                warnings.append(
                    "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background "
                    "to remove them or set propagationPolicy=Orphan to suppress this warning"
                )
            else:
                policy = "Background"
        if policy not in ("Orphan", "Background", "Foreground"):
            raise errors.invalid(
                "DeleteOptions",
                "",
                [
                    (
                        "propagationPolicy",
                        f'Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan"',
                    )
                ],
            )
        if dry_run:
            return DeleteResult(self._at_version(rtype, obj), True, warnings)
        meta = obj["metadata"]
        if policy == "Orphan":
            self._orphan_dependents(meta["uid"])
        finalizers = list(meta.get("finalizers") or [])
        if (
            policy == "Foreground"
            and self.dependents_of(meta["uid"])
            and "foregroundDeletion" not in finalizers
        ):
            finalizers.append("foregroundDeletion")
        grace = options.get("gracePeriodSeconds")
        if key == PODS:
            return (
                DeleteResult(self._delete_pod(obj, grace, finalizers), False, warnings)
                if self._pod_needs_grace(obj, grace) or finalizers
                else DeleteResult(self._remove(key, obj), True, warnings)
            )
        if key == NAMESPACES:
            return DeleteResult(self._start_namespace_deletion(obj), False, warnings)
        if finalizers:
            if meta.get("deletionTimestamp") and finalizers == meta.get("finalizers"):
                return DeleteResult(self._at_version(rtype, obj), False, warnings)
            marked = clone(obj)
            marked["metadata"]["finalizers"] = finalizers
            marked["metadata"].setdefault("deletionTimestamp", now())
            marked["metadata"].setdefault("deletionGracePeriodSeconds", 0)
            marked["metadata"]["resourceVersion"] = str(self.store.next_resource_version())
            self.store.put(key, marked)
            return DeleteResult(self._at_version(rtype, marked), False, warnings)
        return DeleteResult(self._at_version(rtype, self._remove(key, obj)), True, warnings)

    def _remove(self, key: StorageKey, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        gone = self.store.remove(key, meta.get("namespace") or "", meta["name"])
        if key == CRDS and self.on_crd_change:
            self.on_crd_change(obj, True)
        return gone or obj

    def remove_now(self, key: StorageKey, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Remove an object whatever its finalizers (the kubelet and the GC end deletions this way)."""
        meta = obj["metadata"]
        if self.store.get(key, meta.get("namespace") or "", meta["name"]) is None:
            return None
        return self._remove(key, obj)

    def _pod_needs_grace(self, pod: dict[str, Any], grace: int | None) -> bool:
        if grace == 0:
            return False
        return self.pod_is_running(pod)

    def _delete_pod(self, pod: dict[str, Any], grace: int | None, finalizers: _List[str]) -> dict[str, Any]:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") and meta.get("finalizers") == finalizers:
            return pod
        marked = clone(pod)
        if grace is None:
            grace = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        marked["metadata"]["deletionTimestamp"] = meta.get("deletionTimestamp") or now()
        marked["metadata"]["deletionGracePeriodSeconds"] = grace
        if finalizers:
            marked["metadata"]["finalizers"] = finalizers
        marked["metadata"]["resourceVersion"] = str(self.store.next_resource_version())
        return self.store.put(PODS, marked)

    def _orphan_dependents(self, uid: str) -> None:
        for key, dependent in self.dependents_of(uid):
            updated = clone(dependent)
            refs = [r for r in updated["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                updated["metadata"]["ownerReferences"] = refs
            else:
                updated["metadata"].pop("ownerReferences", None)
            updated["metadata"]["resourceVersion"] = str(self.store.next_resource_version())
            self.store.put(key, updated)

    def _start_namespace_deletion(self, ns: dict[str, Any]) -> dict[str, Any]:
        if ns["metadata"].get("deletionTimestamp"):
            return ns
        marked = clone(ns)
        marked["metadata"]["deletionTimestamp"] = now()
        marked["metadata"]["deletionGracePeriodSeconds"] = 0
        marked["status"] = {"phase": "Terminating"}
        marked["metadata"]["resourceVersion"] = str(self.store.next_resource_version())
        return self.store.put(NAMESPACES, marked)

    def delete_collection(
        self,
        rtype: ResourceType,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        options: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> _List[dict[str, Any]]:
        result = self.list(rtype, namespace, label_selector, field_selector)
        deleted = []
        for obj in result.items:
            meta = obj["metadata"]
            try:
                deleted.append(self.delete(rtype, meta.get("namespace"), meta["name"], options, dry_run).obj)
            except ApiError as exc:
                if exc.code != 404:
                    raise
        return deleted

    # --- used by controllers ---------------------------------------------------------------------

    def write_status(self, key: StorageKey, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Replace an object's status as its controller does; no write when nothing changed."""
        current = self.store.get(key, obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
        if current is None or current["metadata"]["uid"] != obj["metadata"]["uid"]:
            return obj
        if current.get("status") == status:
            return current
        updated = dict(current)
        updated["status"] = status
        updated["metadata"] = dict(
            current["metadata"], resourceVersion=str(self.store.next_resource_version())
        )
        return self.store.put(key, updated)

    def remove_finalizer(self, key: StorageKey, obj: dict[str, Any], finalizer: str) -> None:
        """Drop a finalizer; an object being deleted goes once its last finalizer is gone."""
        meta = obj["metadata"]
        current = self.store.get(key, meta.get("namespace") or "", meta["name"])
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return
        finalizers = [f for f in current["metadata"].get("finalizers") or [] if f != finalizer]
        if finalizers == list(current["metadata"].get("finalizers") or []):
            return
        updated = clone(current)
        if finalizers:
            updated["metadata"]["finalizers"] = finalizers
        else:
            updated["metadata"].pop("finalizers", None)
            if updated["metadata"].get("deletionTimestamp") and not self._waits_for_kubelet(key, updated):
                self._remove(key, current)
                return
        self.write(key, updated)

    def write(self, key: StorageKey, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a controller's change to an object as is (no defaulting or validation)."""
        meta = obj["metadata"]
        current = self.store.get(key, meta.get("namespace") or "", meta["name"])
        if current is not None and _same(current, obj):
            return current
        obj = dict(obj)
        obj["metadata"] = dict(meta, resourceVersion=str(self.store.next_resource_version()))
        return self.store.put(key, obj)


def _spec_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    ignored = ("metadata", "status")
    return {k: v for k, v in old.items() if k not in ignored} != {
        k: v for k, v in new.items() if k not in ignored
    }


def _same(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a write changes nothing but managedFields timestamps (then it is not stored)."""
    if old == new:
        return True
    return _strip_times(old) == _strip_times(new)


def _strip_times(obj: dict[str, Any]) -> dict[str, Any]:
    meta = dict(obj.get("metadata", {}))
    managed = meta.get("managedFields")
    if managed:
        meta["managedFields"] = [{k: v for k, v in m.items() if k != "time"} for m in managed]
    meta.pop("resourceVersion", None)
    return dict(obj, metadata=meta)


def _path_get(obj: dict[str, Any], path: str | None) -> Any:
    if not path:
        return None
    value: Any = obj
    for part in path.strip(".").split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _path_set(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    node = obj
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value

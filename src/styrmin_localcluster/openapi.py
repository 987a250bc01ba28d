"""OpenAPI v3 documents: enough for kubectl and Helm to see that the server validates fields itself.

kubectl (and Helm, which uses its libraries) asks the OpenAPI v3 document of a group version whether
the PATCH operation of a kind takes the `fieldValidation` parameter; when it does, the client leaves
validation to the server and does no schema validation of its own. The documents therefore list every
served path with its operations and parameters, and no schemas. /openapi/v2 is not served (kubectl then
falls back to its built-in types for client-side apply), see docs/localcluster.md.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from .discovery import KUBERNETES_VERSION
from .resources import Registry, ResourceType

_WRITE_PARAMETERS = ["dryRun", "fieldManager", "fieldValidation", "pretty"]


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _query(name: str, kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": {"type": kind, "uniqueItems": True}}


def _operation(
    rtype: ResourceType,
    action: str,
    kind: str | None = None,
    group: str | None = None,
    version: str | None = None,
    extra: list[str] | None = None,
) -> dict[str, Any]:
    parameters = [_query(p) for p in (extra or [])]
    return {
        "operationId": f"{action}{rtype.kind}",
        "parameters": parameters,
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": rtype.group if group is None else group,
            "version": rtype.version if version is None else version,
            "kind": kind or rtype.kind,
        },
    }


def group_version_document(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = [t for t in registry.all() if t.group == group and t.version == version]
    if not types:
        return None
    base = "/" + _gv_path(group, version)
    paths: dict[str, Any] = {}
    for rtype in types:
        prefix = (
            f"{base}/namespaces/{{namespace}}/{rtype.plural}"
            if rtype.namespaced
            else f"{base}/{rtype.plural}"
        )
        paths[prefix] = {
            "get": _operation(
                rtype,
                "list",
                extra=[
                    "labelSelector",
                    "fieldSelector",
                    "limit",
                    "continue",
                    "resourceVersion",
                    "watch",
                    "timeoutSeconds",
                    "allowWatchBookmarks",
                    "sendInitialEvents",
                ],
            ),
            "post": _operation(rtype, "post", extra=_WRITE_PARAMETERS),
            "delete": _operation(
                rtype, "deletecollection", extra=["labelSelector", "fieldSelector", "dryRun"]
            ),
        }
        item = f"{prefix}/{{name}}"
        paths[item] = {
            "get": _operation(rtype, "get"),
            "put": _operation(rtype, "put", extra=_WRITE_PARAMETERS),
            "patch": _operation(rtype, "patch", extra=[*_WRITE_PARAMETERS, "force"]),
            "delete": _operation(
                rtype, "delete", extra=["dryRun", "gracePeriodSeconds", "propagationPolicy"]
            ),
        }
        for sub in rtype.subresources:
            if sub == "log":
                paths[f"{item}/log"] = {
                    "get": _operation(
                        rtype, "get", extra=["container", "follow", "limitBytes", "previous", "tailLines"]
                    )
                }
                continue
            kind, sub_group, sub_version = (rtype.kind, None, None)
            if sub == "scale":
                kind, sub_group, sub_version = ("Scale", "autoscaling", "v1")
            paths[f"{item}/{sub}"] = {
                "get": _operation(rtype, "get", kind, sub_group, sub_version),
                "put": _operation(rtype, "put", kind, sub_group, sub_version, _WRITE_PARAMETERS),
                "patch": _operation(
                    rtype, "patch", kind, sub_group, sub_version, [*_WRITE_PARAMETERS, "force"]
                ),
            }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": paths,
        "components": {"schemas": {}},
    }


def index_document(registry: Registry) -> dict[str, Any]:
    paths = {}
    for group, versions in registry.group_versions().items():
        for version in versions:
            document = group_version_document(registry, group, version)
            digest = hashlib.sha512(orjson.dumps(document)).hexdigest()[:64].upper()
            path = _gv_path(group, version)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}

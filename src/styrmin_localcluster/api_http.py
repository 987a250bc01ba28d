"""The HTTP face of the API server: Kubernetes' URL layout, content types, status codes and streaming."""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import orjson
import yaml
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from . import discovery, errors, openapi, protobuf
from .apiserver import ApiServer
from .errors import ApiError
from .logs import stream_log
from .resources import ResourceType
from .tables import to_table
from .watch import WatchRequest, watch_events

if TYPE_CHECKING:
    from .kubelet import Kubelet

log = logging.getLogger("styrmin_localcluster.http")

JSON = "application/json"
# Logs up to this size are answered in one piece (with a Content-Length); larger ones are streamed.
_SMALL_LOG = 1024 * 1024
PROTOBUF = "application/vnd.kubernetes.protobuf"
_UNSUPPORTED_SUBRESOURCES = {
    "exec": "run commands in containers (exec)",
    "attach": "attach to containers",
    "proxy": "proxy requests to pods or services",
    "eviction": "evict pods",
    "ephemeralcontainers": "add ephemeral containers",
    "binding": "bind pods",
    "resize": "resize pods",
}


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=JSON, headers=headers)


def parse_bool(value: str | None, default: bool = False) -> bool:
    """Kubernetes' boolean query values, accepted in any letter case."""
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in ("1", "t", "true", "yes", "y", "on"):
        return True
    if lowered in ("0", "f", "false", "no", "n", "off", ""):
        return False
    raise errors.bad_request(f'invalid boolean value "{value}"')


def _int_param(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise errors.bad_request(f'{name}: invalid value "{value}": must be an integer') from exc


class _Target:
    """What a resource URL names: a kind, maybe a namespace, maybe an object and a subresource."""

    def __init__(
        self, rtype: ResourceType, namespace: str | None, name: str | None, sub: str | None, watch_path: bool
    ) -> None:
        self.rtype = rtype
        self.namespace = namespace
        self.name = name
        self.sub = sub
        self.watch_path = watch_path


class HttpApi:
    """An ASGI application serving the Kubernetes REST API from an `ApiServer`."""

    def __init__(
        self,
        api: ApiServer,
        kubelet: Kubelet | None = None,
        token: str | None = None,
        server_address: Callable[[], str] = lambda: "127.0.0.1:0",
    ) -> None:
        self.api = api
        self.kubelet = kubelet
        self.token = token
        self.server_address = server_address

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s %s?%s content-type=%s accept=%s",
                request.method,
                request.url.path,
                request.url.query,
                request.headers.get("content-type", ""),
                request.headers.get("accept", ""),
            )
        try:
            response = await self._dispatch(request)
        except ApiError as exc:
            response = json_response(exc.status(), exc.code)
        except Exception:
            log.exception("internal error serving %s %s", request.method, request.url.path)
            response = json_response(
                ApiError(
                    500, "InternalError", "an internal error occurred in the local cluster; see its log"
                ).status(),
                500,
            )
        await response(scope, receive, send)

    # --- routing ---------------------------------------------------------------------------------

    async def _dispatch(self, request: Request) -> Response:
        if self.token is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
                raise errors.unauthorized()
        path = request.url.path
        parts = [p for p in path.split("/") if p]
        method = request.method
        if not parts:
            return json_response(
                {
                    "paths": [
                        "/api",
                        "/api/v1",
                        "/apis",
                        "/healthz",
                        "/livez",
                        "/openapi/v3",
                        "/readyz",
                        "/version",
                    ]
                }
            )
        head = parts[0]
        if head in ("healthz", "livez", "readyz"):
            return PlainTextResponse("ok")
        if head == "version":
            return json_response(discovery.version_info())
        if head == "openapi":
            return self._openapi(parts, request)
        if head == "api":
            if len(parts) == 1:
                return json_response(discovery.api_versions(self.server_address()))
            if parts[1] != "v1":
                raise errors.path_not_found(path)
            return await self._resource(request, "", "v1", parts[2:], method)
        if head == "apis":
            if len(parts) == 1:
                return json_response(discovery.api_group_list(self.api.registry))
            if len(parts) == 2:
                group = discovery.api_group(self.api.registry, parts[1])
                if group is None:
                    raise errors.path_not_found(path)
                return json_response(group)
            return await self._resource(request, parts[1], parts[2], parts[3:], method)
        raise errors.path_not_found(path)

    def _openapi(self, parts: list[str], request: Request) -> Response:
        if parts[1:2] == ["v3"]:
            if len(parts) == 2:
                return json_response(openapi.index_document(self.api.registry))
            rest = parts[2:]
            if rest[0] == "api" and len(rest) == 2:
                document = openapi.group_version_document(self.api.registry, "", rest[1])
            elif rest[0] == "apis" and len(rest) == 3:
                document = openapi.group_version_document(self.api.registry, rest[1], rest[2])
            else:
                document = None
            if document is None:
                raise errors.path_not_found(request.url.path)
            return json_response(document)
        raise errors.path_not_found(request.url.path)

    def _target(self, group: str, version: str, rest: list[str]) -> _Target:
        registry = self.api.registry
        watch_path = False
        if rest and rest[0] == "watch":
            watch_path = True
            rest = rest[1:]
        if len(rest) >= 3 and rest[0] == "namespaces":
            rtype = registry.get(group, version, rest[2])
            if rtype is not None and rtype.namespaced:
                return _Target(
                    rtype, rest[1], rest[3] if len(rest) > 3 else None, "/".join(rest[4:]) or None, watch_path
                )
        rtype = registry.get(group, version, rest[0])
        if rtype is None:
            gv = f"{group}/{version}" if group else version
            raise errors.path_not_found(f"/{gv}/{'/'.join(rest)}")
        return _Target(
            rtype, None, rest[1] if len(rest) > 1 else None, "/".join(rest[2:]) or None, watch_path
        )

    async def _resource(
        self, request: Request, group: str, version: str, rest: list[str], method: str
    ) -> Response:
        if not rest:
            listing = discovery.resource_list(self.api.registry, group, version)
            if listing is None:
                raise errors.path_not_found(request.url.path)
            return json_response(listing)
        target = self._target(group, version, rest)
        rtype, sub = target.rtype, target.sub
        if sub is not None:
            if sub in _UNSUPPORTED_SUBRESOURCES and (rtype.plural in ("pods", "services", "nodes")):
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    f"the local cluster cannot {_UNSUPPORTED_SUBRESOURCES[sub]}: its containers are local "
                    "processes, not containers (see docs/localcluster.md, 'What it does not do')",
                )
            if sub == "portforward" and rtype.plural == "pods":
                # Reached only by requests without `Upgrade: SPDY/3.1` (those are taken over by the HTTP
                # protocol, see portforward.py), such as a WebSocket upgrade: refusing it makes kubectl
                # fall back to SPDY.
                raise errors.bad_request(
                    "port forwarding needs an upgrade to SPDY/3.1 with stream protocol portforward.k8s.io"
                )
            if sub not in rtype.subresources:
                raise errors.path_not_found(request.url.path)
        query = request.query_params
        if target.name is None:
            return await self._collection(request, target, method)
        if sub == "log":
            if method != "GET":
                raise errors.method_not_allowed()
            return await self._log(request, target)
        dry_run = bool(query.get("dryRun"))
        field_manager = _field_manager(request)
        strict = _strict(request)
        if method == "GET":
            if target.watch_path:
                return self._watch(request, target, name=target.name)
            obj = self.api.get(rtype, target.namespace, target.name)
            if sub == "scale":
                obj = self.api.scale_of(rtype, obj)
            return self._object_response(request, rtype, obj)
        if method == "PUT":
            body = await self._body(request)
            obj = self.api.update(
                rtype, target.namespace, target.name, body, sub, dry_run, field_manager, strict=strict
            )
            return json_response(obj)
        if method == "PATCH":
            content_type = request.headers.get("content-type", "")
            raw = await request.body()
            obj, created = self.api.patch(
                rtype,
                target.namespace,
                target.name,
                content_type,
                raw,
                sub,
                dry_run,
                field_manager,
                parse_bool(query.get("force")),
                strict,
            )
            return json_response(obj, 201 if created else 200)
        if method == "DELETE":
            if sub is not None:
                raise errors.method_not_allowed()
            options = await self._delete_options(request)
            result = self.api.delete(
                rtype, target.namespace, target.name, options, dry_run or bool(options.get("dryRun"))
            )
            headers = (
                {"Warning": ", ".join(f'299 - "{w}"' for w in result.warnings)} if result.warnings else None
            )
            pending = not result.removed and not result.obj["metadata"].get("deletionGracePeriodSeconds")
            return json_response(result.obj, 202 if pending else 200, headers)
        raise errors.method_not_allowed()

    async def _collection(self, request: Request, target: _Target, method: str) -> Response:
        rtype = target.rtype
        query = request.query_params
        if method == "GET":
            if target.watch_path or parse_bool(query.get("watch")):
                return self._watch(request, target)
            result = self.api.list(
                rtype,
                target.namespace,
                query.get("labelSelector"),
                query.get("fieldSelector"),
                _int_param(query.get("limit"), "limit"),
                query.get("continue"),
            )
            meta: dict[str, Any] = {"resourceVersion": str(result.resource_version)}
            if result.continue_token:
                meta["continue"] = result.continue_token
                meta["remainingItemCount"] = result.remaining
            if _wants_table(request):
                return json_response(
                    to_table(rtype, result.items, query.get("includeObject", "Metadata"), meta)
                )
            kind = f"{rtype.kind}List"
            return json_response(
                {"kind": kind, "apiVersion": rtype.api_version, "metadata": meta, "items": result.items}
            )
        if method == "POST":
            body = await self._body(request)
            obj = self.api.create(
                rtype,
                target.namespace,
                body,
                bool(query.get("dryRun")),
                query.get("fieldManager"),
                _strict(request),
            )
            return json_response(obj, 201)
        if method == "DELETE":
            options = await self._delete_options(request)
            deleted = self.api.delete_collection(
                rtype,
                target.namespace,
                query.get("labelSelector"),
                query.get("fieldSelector"),
                options,
                bool(query.get("dryRun")),
            )
            return json_response(
                {
                    "kind": f"{rtype.kind}List",
                    "apiVersion": rtype.api_version,
                    "metadata": {"resourceVersion": str(self.api.store.resource_version)},
                    "items": deleted,
                }
            )
        raise errors.method_not_allowed()

    # --- bodies and responses --------------------------------------------------------------------

    async def _body(self, request: Request) -> Any:
        raw = await request.body()
        content_type = request.headers.get("content-type", JSON).split(";")[0].strip().lower()
        if content_type == PROTOBUF:
            return protobuf.decode(raw)
        if content_type in (JSON, "", "*/*"):
            try:
                return orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError as exc:
                raise errors.bad_request(
                    f"the body of the request could not be decoded as JSON: {exc}"
                ) from exc
        if content_type in ("application/yaml", "application/x-yaml", "text/yaml"):
            try:
                return yaml.safe_load(raw)
            except yaml.YAMLError as exc:
                raise errors.bad_request(
                    f"the body of the request could not be decoded as YAML: {exc}"
                ) from exc
        raise errors.unsupported_media_type(content_type)

    async def _delete_options(self, request: Request) -> dict[str, Any]:
        query = request.query_params
        raw = await request.body()
        options: dict[str, Any] = {}
        if raw:
            content_type = request.headers.get("content-type", JSON).split(";")[0].strip().lower()
            if content_type == PROTOBUF:
                options = protobuf.decode(raw)
            else:
                try:
                    options = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise errors.bad_request(f"the delete options could not be decoded: {exc}") from exc
            if not isinstance(options, dict):
                raise errors.bad_request("the delete options must be an object")
        if query.get("propagationPolicy"):
            options["propagationPolicy"] = query["propagationPolicy"]
        if query.get("gracePeriodSeconds"):
            options["gracePeriodSeconds"] = _int_param(query["gracePeriodSeconds"], "gracePeriodSeconds")
        if query.get("orphanDependents"):
            options["orphanDependents"] = parse_bool(query["orphanDependents"])
        return options

    def _object_response(self, request: Request, rtype: ResourceType, obj: dict[str, Any]) -> Response:
        if _wants_table(request) and obj.get("kind") != "Scale":
            return json_response(
                to_table(
                    rtype,
                    [obj],
                    request.query_params.get("includeObject", "Metadata"),
                    {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                )
            )
        return json_response(obj)

    def _watch(self, request: Request, target: _Target, name: str | None = None) -> Response:
        query = request.query_params
        field_selector = query.get("fieldSelector")
        if name:
            field_selector = f"metadata.name={name}" + (f",{field_selector}" if field_selector else "")
        timeout = query.get("timeoutSeconds")
        watch = WatchRequest(
            rtype=target.rtype,
            namespace=target.namespace,
            label_selector=query.get("labelSelector"),
            field_selector=field_selector,
            resource_version=query.get("resourceVersion"),
            timeout_seconds=float(timeout) if timeout else None,
            allow_bookmarks=parse_bool(query.get("allowWatchBookmarks")),
            send_initial_events=parse_bool(query.get("sendInitialEvents")),
        )
        render: Callable[[dict[str, Any]], dict[str, Any]] = lambda obj: obj  # noqa: E731
        if _wants_table(request):
            include = query.get("includeObject", "Metadata")

            def render(obj: dict[str, Any]) -> dict[str, Any]:
                if (
                    obj.get("kind") != target.rtype.kind
                    or "metadata" not in obj
                    or "name" not in obj["metadata"]
                ):
                    return obj
                return to_table(
                    target.rtype,
                    [obj],
                    include,
                    {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                )

        return StreamingResponse(_guarded(watch_events(self.api, watch, render)), media_type=JSON)

    async def _log(self, request: Request, target: _Target) -> Response:
        if self.kubelet is None:
            raise errors.bad_request("this server runs no kubelet, so pods have no logs")
        query = request.query_params
        pod = self.api.get(target.rtype, target.namespace, target.name or "")
        path, running = self.kubelet.log_source(
            pod, query.get("container"), parse_bool(query.get("previous"))
        )
        follow = parse_bool(query.get("follow"))
        tail_lines = _int_param(query.get("tailLines"), "tailLines")
        limit_bytes = _int_param(query.get("limitBytes"), "limitBytes")
        stream = stream_log(path, tail_lines, limit_bytes, follow, running)
        size = path.stat().st_size if path.exists() else 0
        if not follow and (size <= _SMALL_LOG or (limit_bytes is not None and 0 < limit_bytes <= _SMALL_LOG)):
            return Response(b"".join([chunk async for chunk in stream]), media_type="text/plain")
        # Large logs and followed ones are streamed from the file, never held in memory.
        return StreamingResponse(_guarded(stream), media_type="text/plain")


def _field_manager(request: Request) -> str | None:
    """The fieldManager, or like Kubernetes the client's User-Agent up to its first '/'.

    A server-side apply must name its manager, so it gets no default.
    """
    given = request.query_params.get("fieldManager")
    if given or request.headers.get("content-type", "").startswith("application/apply-patch"):
        return given or None
    agent = request.headers.get("user-agent", "").split("/", 1)[0].strip()
    return agent[:128] or None


def _strict(request: Request) -> bool:
    """Whether the client asked the server to refuse unknown fields (kubectl's and Helm's default)."""
    return (request.query_params.get("fieldValidation") or "").lower() == "strict"


def _wants_table(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "as=Table" in accept


async def _guarded(stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """End a stream quietly when the server shuts down or the client goes away."""
    try:
        async for chunk in stream:
            yield chunk
    except (OSError, RuntimeError):
        return

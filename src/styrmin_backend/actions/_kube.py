"""How the primitives reach the deployment's cluster: lightkube, with the agent's kubeconfig."""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2 as httpx
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.resources.apps_v1 import Deployment, StatefulSet

from styrmin_backend.actions.context import GlobalContext
from styrmin_backend.actions.errors import ActionError
from styrmin_backend.cluster.connection import SERVICE_ACCOUNT_ENV
from styrmin_backend.drivers import Component

FIELD_MANAGER = "styrmin-actions"
_WORKLOADS: dict[str, Any] = {"Deployment": Deployment, "StatefulSet": StatefulSet}


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AsyncClient]] = (
    weakref.WeakKeyDictionary()
)
"""One client per event loop and kubeconfig, shared by the primitives an action calls in a row."""


@asynccontextmanager
async def kube_client() -> AsyncIterator[AsyncClient]:
    """A client of the cluster: KUBECONFIG or STYRMIN_SERVICE_ACCOUNT_DIR (the agent sets one for its
    actions), else the usual in-cluster config."""
    path = os.environ.get("KUBECONFIG", "")
    service_account = os.environ.get(SERVICE_ACCOUNT_ENV, "")
    key = path or f"service-account:{service_account}"
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    if key not in per_loop:
        try:
            if path:
                config = KubeConfig.from_file(path.split(os.pathsep)[0])
            elif service_account:
                config = KubeConfig.from_service_account(service_account)
            else:
                config = KubeConfig.from_env()
        except Exception as error:
            raise ActionError(
                f"The action cannot reach the cluster: no usable kubeconfig ({error}). Styrmin's agent "
                "passes its kubeconfig in KUBECONFIG; outside the agent, set KUBECONFIG."
            ) from None
        per_loop[key] = AsyncClient(config, field_manager=FIELD_MANAGER)
    try:
        yield per_loop[key]
    except ApiError as error:
        raise ActionError(f"The cluster refused a request of the action: {error.status.message}") from None
    except httpx.TransportError as error:
        raise ActionError(f"The action cannot reach the cluster: {error}") from None


async def component_pod_template(
    kube: AsyncClient, context: GlobalContext, component: Component
) -> dict[str, Any]:
    """The pod template of ``component``'s workload as it is in the cluster now, as a plain dict."""
    kind = component.workload.kind
    name = component.workload.resolved_name(context.deployment_name)
    try:
        workload = await kube.get(_WORKLOADS[kind], name, namespace=context.namespace)
    except ApiError as error:
        if error.status.code == 404:
            raise ActionError(
                f'Component "{component.name}" of deployment "{context.deployment_name}" has no workload: '
                f'{kind} {name} is not in namespace "{context.namespace}". Its pod template is read from '
                "the cluster, so read it once the chart is installed (in the setup post-hook, or during "
                "an upgrade)."
            ) from None
        raise ActionError(f"Reading {kind} {name} in namespace {context.namespace} failed: {error}") from None
    template: dict[str, Any] = (workload.to_dict().get("spec") or {}).get("template") or {}
    return template

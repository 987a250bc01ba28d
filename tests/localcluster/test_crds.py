"""CustomResourceDefinitions created at run time, and their custom resources (StyrminDeployment first)."""

from __future__ import annotations

import json

import httpx
import pytest
from lightkube import ApiError, Client
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.types import PatchType

from tests.support.waiting import wait_for

STYRMIN_DEPLOYMENT_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "styrmindeployments.styrmin.io"},
    "spec": {
        "group": "styrmin.io",
        "scope": "Namespaced",
        "names": {
            "plural": "styrmindeployments",
            "singular": "styrmindeployment",
            "kind": "StyrminDeployment",
            "shortNames": ["sdep"],
        },
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Driver", "type": "string", "jsonPath": ".spec.driver"},
                    {"name": "Revision", "type": "integer", "jsonPath": ".spec.revision"},
                    {
                        "name": "Ready",
                        "type": "string",
                        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                    },
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["driver", "revision"],
                                "properties": {
                                    "driver": {"type": "string", "minLength": 1},
                                    "revision": {"type": "integer", "minimum": 1},
                                    "mode": {
                                        "type": "string",
                                        "enum": ["running", "stopped"],
                                        "default": "running",
                                    },
                                    "values": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "conditions": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {
                                                "type": {"type": "string"},
                                                "status": {"type": "string"},
                                            },
                                        },
                                    }
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}

StyrminDeployment = create_namespaced_resource(
    "styrmin.io", "v1alpha1", "StyrminDeployment", "styrmindeployments"
)


@pytest.fixture(scope="module")
def styrmin_crd(client: Client) -> None:
    try:
        client.create(CustomResourceDefinition.from_dict(STYRMIN_DEPLOYMENT_CRD))
    except ApiError as exc:
        if exc.status.code != 409:
            raise
    wait_for(
        lambda: any(
            c.type == "Established" and c.status == "True"
            for c in client.get(CustomResourceDefinition, "styrmindeployments.styrmin.io").status.conditions
        ),
        message="the CRD to be established",
    )


def _sdep(name: str, revision: int = 1, **spec: object) -> StyrminDeployment:
    return StyrminDeployment.from_dict(
        {
            "apiVersion": "styrmin.io/v1alpha1",
            "kind": "StyrminDeployment",
            "metadata": {"name": name},
            "spec": {"driver": "shop@1.0.0", "revision": revision, **spec},
        }
    )


def test_a_new_crd_is_established_and_served(styrmin_crd: None, http: httpx.Client) -> None:
    groups = {g["name"]: g for g in http.get("/apis").json()["groups"]}
    assert groups["styrmin.io"]["preferredVersion"]["version"] == "v1alpha1"
    resources = {r["name"]: r for r in http.get("/apis/styrmin.io/v1alpha1").json()["resources"]}
    assert resources["styrmindeployments"]["kind"] == "StyrminDeployment"
    assert resources["styrmindeployments"]["shortNames"] == ["sdep"]
    assert "styrmindeployments/status" in resources


def test_custom_resources_support_every_verb(styrmin_crd: None, client: Client, namespace: str) -> None:
    created = client.create(
        _sdep("shop", values={"replicas": 2, "nested": {"any": ["thing"]}}), namespace=namespace
    )
    assert created.metadata.uid and created.metadata.generation == 1
    assert created.spec["mode"] == "running"  # the schema's default
    assert created.spec["values"] == {"replicas": 2, "nested": {"any": ["thing"]}}
    assert [o.metadata.name for o in client.list(StyrminDeployment, namespace=namespace)] == ["shop"]
    patched = client.patch(
        StyrminDeployment, "shop", {"spec": {"revision": 2}}, namespace=namespace, patch_type=PatchType.MERGE
    )
    assert patched.spec["revision"] == 2 and patched.metadata.generation == 2
    current = client.get(StyrminDeployment, "shop", namespace=namespace)
    current.spec["revision"] = 3
    replaced = client.replace(current)
    assert replaced.spec["revision"] == 3
    with pytest.raises(ApiError) as raised:
        client.apply(_sdep("shop", revision=4), namespace=namespace, field_manager="styrmin-agent")
    assert raised.value.status.code == 409
    assert raised.value.status.message == (
        'Apply failed with 1 conflict: conflict with "tests" using styrmin.io/v1alpha1: .spec.revision'
    )
    applied = client.apply(
        _sdep("shop", revision=4), namespace=namespace, field_manager="styrmin-agent", force=True
    )
    assert applied.spec["revision"] == 4
    client.delete(StyrminDeployment, "shop", namespace=namespace)
    with pytest.raises(ApiError) as raised:
        client.get(StyrminDeployment, "shop", namespace=namespace)
    assert raised.value.status.code == 404


def test_custom_resource_status_is_written_through_its_subresource(
    styrmin_crd: None, client: Client, namespace: str
) -> None:
    client.create(_sdep("stat"), namespace=namespace)
    ignored = client.patch(
        StyrminDeployment,
        "stat",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    assert not (ignored.status or {}).get("conditions")
    written = client.patch(
        StyrminDeployment.Status,
        "stat",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    assert written.status["conditions"] == [{"type": "Ready", "status": "True"}]
    assert written.metadata.generation == 1


def test_custom_resources_are_validated_and_pruned_by_the_schema(
    styrmin_crd: None, client: Client, namespace: str
) -> None:
    with pytest.raises(ApiError) as raised:
        client.create(_sdep("bad", revision=0, mode="paused"), namespace=namespace)
    assert raised.value.status.code == 422
    message = raised.value.status.message
    assert "spec.revision" in message and "greater than or equal to 1" in message
    assert 'Unsupported value: "paused"' in message
    pruned = client.create(_sdep("pruned", unknown="dropped"), namespace=namespace)
    assert "unknown" not in pruned.spec


def test_strict_field_validation_refuses_undeclared_fields(
    styrmin_crd: None, http: httpx.Client, namespace: str
) -> None:
    body = {
        "apiVersion": "styrmin.io/v1alpha1",
        "kind": "StyrminDeployment",
        "metadata": {"name": "typo"},
        "spec": {"driver": "shop@1", "revision": 1, "revison": 2},
    }
    path = f"/apis/styrmin.io/v1alpha1/namespaces/{namespace}/styrmindeployments"
    response = http.post(path, json=body, params={"fieldValidation": "Strict"})
    assert response.status_code == 400
    assert response.json()["message"] == (
        'StyrminDeployment in version "v1alpha1" cannot be handled as a '
        'StyrminDeployment: strict decoding error: unknown field "spec.revison"'
    )
    response = http.patch(
        f"{path}/typo",
        content=json.dumps(body),
        params={"fieldValidation": "Strict", "fieldManager": "helm"},
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert response.status_code == 400


def test_custom_resources_watch_and_table(
    styrmin_crd: None, http: httpx.Client, client: Client, namespace: str
) -> None:
    created = client.create(_sdep("watched"), namespace=namespace)
    client.patch(
        StyrminDeployment,
        "watched",
        {"spec": {"revision": 5}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    path = f"/apis/styrmin.io/v1alpha1/namespaces/{namespace}/styrmindeployments"
    with http.stream(
        "GET",
        path,
        params={"watch": "true", "resourceVersion": created.metadata.resourceVersion, "timeoutSeconds": "1"},
    ) as response:
        events = [json.loads(line) for line in response.iter_lines() if line]
    assert [(e["type"], e["object"]["spec"]["revision"]) for e in events] == [("MODIFIED", 5)]
    table = http.get(path, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}).json()
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Driver", "Revision", "Ready"]
    assert table["rows"][0]["cells"][:3] == ["watched", "shop@1.0.0", 5]


def test_strategic_merge_patch_is_refused_for_custom_resources(
    styrmin_crd: None, client: Client, namespace: str
) -> None:
    client.create(_sdep("smp"), namespace=namespace)
    with pytest.raises(ApiError) as raised:
        client.patch(
            StyrminDeployment,
            "smp",
            {"spec": {"revision": 2}},
            namespace=namespace,
            patch_type=PatchType.STRATEGIC,
        )
    assert raised.value.status.code == 415


def test_deleting_a_crd_removes_its_resources_and_stops_serving_them(
    client: Client, http: httpx.Client, namespace: str
) -> None:
    crd = json.loads(json.dumps(STYRMIN_DEPLOYMENT_CRD))
    crd["metadata"]["name"] = "widgets.example.com"
    crd["spec"].update(group="example.com", names={"plural": "widgets", "kind": "Widget"})
    client.create(CustomResourceDefinition.from_dict(crd))
    widgets = f"/apis/example.com/v1alpha1/namespaces/{namespace}/widgets"
    body = {
        "apiVersion": "example.com/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"driver": "d", "revision": 1},
    }
    assert http.post(widgets, json=body).status_code == 201
    client.delete(CustomResourceDefinition, "widgets.example.com")
    wait_for(lambda: http.get(widgets).status_code == 404, message="the resource to stop being served")
    client.create(CustomResourceDefinition.from_dict(crd))
    assert http.get(widgets).json()["items"] == []
    client.delete(CustomResourceDefinition, "widgets.example.com")

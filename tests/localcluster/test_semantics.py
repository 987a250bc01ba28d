"""Kubernetes semantics checked directly on the API server's verbs (no HTTP): patches, apply, selectors."""

from __future__ import annotations

import orjson
import pytest

from styrmin_localcluster.apiserver import APPLY_PATCH, STRATEGIC_PATCH, ApiServer
from styrmin_localcluster.errors import ApiError
from styrmin_localcluster.patching import strategic_merge_patch
from styrmin_localcluster.protobuf import decode
from styrmin_localcluster.selectors import parse_field_selector, parse_label_selector
from styrmin_localcluster.store import clone

from .protobuf_encoding import encode_object


@pytest.fixture
def api() -> ApiServer:
    server = ApiServer()
    server.create(server.type_for(("", "namespaces")), None, {"metadata": {"name": "default"}})
    return server


def _pod_spec(containers: list[dict]) -> dict:
    return {"metadata": {"name": "p"}, "spec": {"containers": containers}}


def test_strategic_merge_patch_directives() -> None:
    pod = {
        "kind": "Pod",
        "spec": {
            "containers": [
                {"name": "a", "image": "1", "ports": [{"containerPort": 80}]},
                {"name": "b", "image": "1"},
            ],
            "volumes": [{"name": "v1"}, {"name": "v2"}],
        },
        "metadata": {"finalizers": ["x"]},
    }
    patch = {
        "metadata": {"finalizers": ["y"]},
        "spec": {
            "containers": [{"name": "a", "ports": [{"containerPort": 81}]}, {"name": "c", "image": "2"}],
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
            "volumes": [{"name": "v1", "$patch": "delete"}],
        },
    }
    result = strategic_merge_patch(pod, patch, "Pod")
    assert [c["name"] for c in result["spec"]["containers"]] == ["c", "a", "b"]
    assert result["spec"]["containers"][1]["ports"] == [{"containerPort": 80}, {"containerPort": 81}]
    assert result["spec"]["volumes"] == [{"name": "v2"}]
    assert result["metadata"]["finalizers"] == ["x", "y"]
    replaced = strategic_merge_patch(
        pod, {"spec": {"volumes": [{"name": "v9"}, {"$patch": "replace"}]}}, "Pod"
    )
    assert replaced["spec"]["volumes"] == [{"name": "v9"}]
    retained = strategic_merge_patch(
        {
            "kind": "Deployment",
            "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}},
        },
        {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}},
        "Deployment",
    )
    assert retained["spec"]["strategy"] == {"type": "Recreate"}


def test_unchanged_update_keeps_the_resource_version(api: ApiServer) -> None:
    rtype = api.type_for(("", "configmaps"))
    created = api.create(rtype, "default", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    same = api.update(rtype, "default", "c", created)
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_apply_by_two_managers_keeps_each_managers_fields(api: ApiServer) -> None:
    rtype = api.type_for(("apps", "deployments"))
    base = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "web", "image": "x:1"}]},
            },
        },
    }
    api.patch(rtype, "default", "d", APPLY_PATCH, orjson.dumps(base), field_manager="helm")
    sidecar = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "labels": {"team": "t"}},
        "spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "p:1"}]}}},
    }
    api.patch(rtype, "default", "d", APPLY_PATCH, orjson.dumps(sidecar), field_manager="mesh")
    base["spec"]["template"]["spec"]["containers"][0]["image"] = "x:2"
    result, created = api.patch(rtype, "default", "d", APPLY_PATCH, orjson.dumps(base), field_manager="helm")
    assert not created
    assert [(c["name"], c["image"]) for c in result["spec"]["template"]["spec"]["containers"]] == [
        ("web", "x:2"),
        ("proxy", "p:1"),
    ]
    assert result["metadata"]["labels"] == {"team": "t"}
    assert {m["manager"] for m in result["metadata"]["managedFields"]} == {"helm", "mesh"}


def test_apply_needs_a_field_manager(api: ApiServer) -> None:
    with pytest.raises(ApiError) as raised:
        api.patch(api.type_for(("", "configmaps")), "default", "x", APPLY_PATCH, b"{}")
    assert raised.value.code == 400


def test_strategic_patch_on_an_unknown_object_is_404(api: ApiServer) -> None:
    with pytest.raises(ApiError) as raised:
        api.patch(api.type_for(("", "configmaps")), "default", "none", STRATEGIC_PATCH, b"{}")
    assert raised.value.code == 404


def test_job_templates_are_immutable_like_kubernetes(api: ApiServer) -> None:
    rtype = api.type_for(("batch", "jobs"))
    job = api.create(
        rtype,
        "default",
        {
            "metadata": {"name": "j"},
            "spec": {
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "i"}]}}
            },
        },
    )
    assert job["spec"]["selector"] == {
        "matchLabels": {"batch.kubernetes.io/controller-uid": job["metadata"]["uid"]}
    }
    assert job["spec"]["template"]["metadata"]["labels"]["job-name"] == "j"
    changed = clone(job)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "other"
    with pytest.raises(ApiError) as raised:
        api.update(rtype, "default", "j", changed)
    assert (
        raised.value.code == 422
        and "spec.template" in raised.value.message
        and "field is immutable" in raised.value.message
    )


def test_job_restart_policy_must_be_never_or_on_failure(api: ApiServer) -> None:
    with pytest.raises(ApiError) as raised:
        api.create(
            api.type_for(("batch", "jobs")),
            "default",
            {
                "metadata": {"name": "j"},
                "spec": {"template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}},
            },
        )
    assert (
        'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"'
        in raised.value.message
    )


def test_secrets_turn_string_data_into_data_and_limit_their_size(api: ApiServer) -> None:
    rtype = api.type_for(("", "secrets"))
    secret = api.create(rtype, "default", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    assert secret["data"] == {"k": "dg=="} and "stringData" not in secret and secret["type"] == "Opaque"
    import base64

    with pytest.raises(ApiError) as raised:
        api.create(
            rtype,
            "default",
            {"metadata": {"name": "big"}, "data": {"k": base64.b64encode(b"x" * (1024 * 1024 + 1)).decode()}},
        )
    assert "Too long: must have at most 1048576 bytes" in raised.value.message


def test_services_get_a_cluster_ip_and_default_ports(api: ApiServer) -> None:
    service = api.create(
        api.type_for(("", "services")),
        "default",
        {"metadata": {"name": "web"}, "spec": {"selector": {"a": "b"}, "ports": [{"port": 80}]}},
    )
    assert service["spec"]["clusterIP"].startswith("10.96.")
    assert service["spec"]["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]


def test_label_and_field_selectors() -> None:
    selects = parse_label_selector("app=web,tier in (a, b),!legacy,env!=prod")
    assert selects({"app": "web", "tier": "a"})
    assert not selects({"app": "web", "tier": "c"})
    assert not selects({"app": "web", "tier": "a", "legacy": "1"})
    assert not selects({"app": "web", "tier": "b", "env": "prod"})
    fields = parse_field_selector("status.phase!=Running,metadata.name=p")
    assert fields({"metadata": {"name": "p"}, "status": {"phase": "Pending"}})
    assert not fields({"metadata": {"name": "p"}, "status": {"phase": "Running"}})
    with pytest.raises(ApiError):
        parse_label_selector("a in b")


def test_protobuf_secrets_decode_to_the_json_form() -> None:
    body = encode_object(
        "Secret",
        {
            "metadata": {"name": "s", "namespace": "ns", "labels": {"owner": "helm"}},
            "data": {"release": "SDRzSQ=="},
            "type": "helm.sh/release.v1",
        },
    )
    assert decode(body) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "ns", "labels": {"owner": "helm"}},
        "data": {"release": "SDRzSQ=="},
        "type": "helm.sh/release.v1",
    }
    with pytest.raises(ApiError) as raised:
        decode(b"k8s\x00" + b"\x0a\x08\x0a\x02v1\x12\x02\x50\x6f")
    assert raised.value.code in (400, 415)


def _deployment_body(replicas: int, image: str = "x:1") -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "web", "image": image}]},
                },
            },
        }
    )


def test_applying_a_field_another_manager_changed_is_a_conflict_like_helm_after_kubectl_scale(
    api: ApiServer,
) -> None:
    rtype = api.type_for(("apps", "deployments"))
    api.patch(rtype, "default", "d", APPLY_PATCH, _deployment_body(2), field_manager="helm")
    api.update(rtype, "default", "d", {"spec": {"replicas": 0}}, subresource="scale", field_manager="kubectl")
    # The same value is shared ownership, not a conflict.
    api.patch(rtype, "default", "d", APPLY_PATCH, _deployment_body(0, "x:2"), field_manager="helm")
    api.update(rtype, "default", "d", {"spec": {"replicas": 1}}, subresource="scale", field_manager="kubectl")
    with pytest.raises(ApiError) as raised:
        api.patch(rtype, "default", "d", APPLY_PATCH, _deployment_body(3, "x:3"), field_manager="helm")
    assert (raised.value.code, raised.value.reason) == (409, "Conflict")
    assert raised.value.message == (
        'Apply failed with 1 conflict: conflict with "kubectl" with subresource "scale" '
        "using apps/v1: .spec.replicas"
    )
    assert raised.value.details["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "field": ".spec.replicas",
            "message": 'conflict with "kubectl" with subresource "scale" using apps/v1',
        }
    ]
    result, _ = api.patch(
        rtype, "default", "d", APPLY_PATCH, _deployment_body(3, "x:3"), field_manager="helm", force=True
    )
    assert result["spec"]["replicas"] == 3
    owners = {
        (m["manager"], m.get("subresource")): m["fieldsV1"] for m in result["metadata"]["managedFields"]
    }
    assert ("kubectl", "scale") not in owners
    assert owners[("helm", None)]["f:spec"]["f:replicas"] == {}


def test_an_update_takes_fields_over_without_conflict(api: ApiServer) -> None:
    rtype = api.type_for(("apps", "deployments"))
    api.patch(rtype, "default", "d", APPLY_PATCH, _deployment_body(1), field_manager="helm")
    patch = b'{"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "x:edited"}]}}}}'
    result, _ = api.patch(rtype, "default", "d", STRATEGIC_PATCH, patch, field_manager="kubectl-edit")
    edited = next(m for m in result["metadata"]["managedFields"] if m["manager"] == "kubectl-edit")
    containers = edited["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
    assert containers == {'k:{"name":"web"}': {".": {}, "f:image": {}}}
    with pytest.raises(ApiError) as raised:
        api.patch(rtype, "default", "d", APPLY_PATCH, _deployment_body(1, "x:2"), field_manager="helm")
    assert raised.value.message.endswith(
        'conflict with "kubectl-edit" using apps/v1: .spec.template.spec.containers[name="web"].image'
    )

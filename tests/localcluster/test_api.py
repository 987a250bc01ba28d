"""The REST API through lightkube and plain HTTP: discovery, verbs, errors, patches, subresources."""

from __future__ import annotations

import base64

import httpx
import pytest
from lightkube import ApiError, Client
from lightkube.models.autoscaling_v1 import ScaleSpec
from lightkube.models.core_v1 import Container
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta, OwnerReference
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Pod, Secret
from lightkube.types import CascadeType, PatchType

from styrmin_localcluster.protobuf import MAGIC
from tests.support.waiting import wait_for

from .protobuf_encoding import encode_object
from .test_workloads import _deployment as _workloads_deployment


def _configmap(
    name: str, data: dict[str, str] | None = None, labels: dict[str, str] | None = None
) -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, labels=labels), data=data or {"a": "1"})


def _deployment(name: str, replicas: int = 1, image: str = "nginx:1.27") -> Deployment:
    return _workloads_deployment(name, replicas, container=Container(name="web", image=image))


# --- discovery and version ------------------------------------------------------------------------


def test_discovery_lists_core_and_group_resources_with_subresources(http: httpx.Client) -> None:
    assert http.get("/api").json()["versions"] == ["v1"]
    groups = {g["name"] for g in http.get("/apis").json()["groups"]}
    assert {"apps", "batch", "apiextensions.k8s.io"} <= groups
    core = {r["name"]: r for r in http.get("/api/v1").json()["resources"]}
    assert {
        "namespaces",
        "pods",
        "pods/log",
        "services",
        "configmaps",
        "secrets",
        "serviceaccounts",
        "events",
    } <= set(core)
    apps = {r["name"]: r for r in http.get("/apis/apps/v1").json()["resources"]}
    assert apps["deployments/scale"]["kind"] == "Scale"
    assert apps["deployments/scale"]["group"] == "autoscaling"
    assert "watch" in apps["deployments"]["verbs"]
    assert "jobs" in {r["name"] for r in http.get("/apis/batch/v1").json()["resources"]}


def test_version_and_openapi_v3_answer(http: httpx.Client) -> None:
    version = http.get("/version").json()
    assert version["major"] == "1" and version["gitVersion"].startswith("v1.")
    index = http.get("/openapi/v3").json()["paths"]
    document = http.get(index["apis/apps/v1"]["serverRelativeURL"]).json()
    patch = document["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert {
        "name": "fieldValidation",
        "in": "query",
        "schema": {"type": "string", "uniqueItems": True},
    } in patch["parameters"]


def test_responses_are_exactly_application_json(http: httpx.Client) -> None:
    for path in ("/api", "/apis", "/api/v1/namespaces", "/version", "/api/v1/namespaces/nope"):
        assert http.get(path).headers["content-type"] == "application/json"


def test_trailing_slash_and_boolean_case_are_accepted(http: httpx.Client, namespace: str) -> None:
    assert http.get(f"/api/v1/namespaces/{namespace}/configmaps/").status_code == 200
    with http.stream(
        "GET", f"/api/v1/namespaces/{namespace}/configmaps", params={"watch": "True", "timeoutSeconds": "1"}
    ) as response:
        assert response.status_code == 200
    with http.stream(
        "GET", f"/api/v1/namespaces/{namespace}/configmaps", params={"watch": "TRUE", "timeoutSeconds": "1"}
    ) as response:
        assert response.status_code == 200


# --- errors ---------------------------------------------------------------------------------------


def test_missing_object_is_a_404_status(client: Client, http: httpx.Client, namespace: str) -> None:
    with pytest.raises(ApiError) as raised:
        client.get(ConfigMap, "absent", namespace=namespace)
    assert raised.value.status.code == 404
    assert raised.value.status.reason == "NotFound"
    body = http.get(f"/api/v1/namespaces/{namespace}/configmaps/absent").json()
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'configmaps "absent" not found',
        "reason": "NotFound",
        "details": {"name": "absent", "kind": "configmaps"},
        "code": 404,
    }


def test_creating_an_existing_object_is_a_409_already_exists(client: Client, namespace: str) -> None:
    client.create(_configmap("twice"), namespace=namespace)
    with pytest.raises(ApiError) as raised:
        client.create(_configmap("twice"), namespace=namespace)
    assert (raised.value.status.code, raised.value.status.reason) == (409, "AlreadyExists")


def test_update_with_a_stale_resource_version_is_a_409_conflict(client: Client, namespace: str) -> None:
    created = client.create(_configmap("stale"), namespace=namespace)
    fresh = client.get(ConfigMap, "stale", namespace=namespace)
    fresh.data = {"a": "2"}
    client.replace(fresh)
    created.data = {"a": "3"}
    with pytest.raises(ApiError) as raised:
        client.replace(created)
    assert (raised.value.status.code, raised.value.status.reason) == (409, "Conflict")
    assert client.get(ConfigMap, "stale", namespace=namespace).data == {"a": "2"}


def test_invalid_objects_are_a_422_with_the_field(client: Client, namespace: str) -> None:
    with pytest.raises(ApiError) as raised:
        client.create(_configmap("Not_A_Name"), namespace=namespace)
    assert (raised.value.status.code, raised.value.status.reason) == (422, "Invalid")
    assert "metadata.name" in raised.value.status.message
    bad = _deployment("mismatch")
    bad.spec.selector = LabelSelector(matchLabels={"app": "other"})
    with pytest.raises(ApiError) as raised:
        client.create(bad, namespace=namespace)
    assert "`selector` does not match template `labels`" in raised.value.status.message


def test_objects_in_a_missing_namespace_are_refused(client: Client) -> None:
    with pytest.raises(ApiError) as raised:
        client.create(_configmap("x"), namespace="does-not-exist")
    assert raised.value.status.code == 404
    assert 'namespaces "does-not-exist" not found' in raised.value.status.message


# --- create, get, list ----------------------------------------------------------------------------


def test_created_objects_carry_system_metadata(client: Client, namespace: str) -> None:
    created = client.create(_configmap("meta"), namespace=namespace)
    meta = created.metadata
    assert meta.uid and meta.resourceVersion and meta.creationTimestamp
    assert meta.generation == 1
    assert client.get(ConfigMap, "meta", namespace=namespace).metadata.uid == meta.uid


def test_generate_name_gives_a_unique_name(client: Client, namespace: str) -> None:
    first = client.create(ConfigMap(metadata=ObjectMeta(generateName="gen-"), data={}), namespace=namespace)
    second = client.create(ConfigMap(metadata=ObjectMeta(generateName="gen-"), data={}), namespace=namespace)
    assert first.metadata.name.startswith("gen-") and first.metadata.name != second.metadata.name


def test_list_filters_by_label_and_field_selectors(client: Client, namespace: str) -> None:
    client.create(_configmap("red-1", labels={"color": "red", "size": "s"}), namespace=namespace)
    client.create(_configmap("red-2", labels={"color": "red", "size": "l"}), namespace=namespace)
    client.create(_configmap("blue-1", labels={"color": "blue"}), namespace=namespace)

    def names(**kwargs: object) -> list[str]:
        return sorted(c.metadata.name for c in client.list(ConfigMap, namespace=namespace, **kwargs))

    assert names(labels={"color": "red"}) == ["red-1", "red-2"]
    assert names(labels={"color": "red", "size": "l"}) == ["red-2"]
    assert names(fields={"metadata.name": "blue-1"}) == ["blue-1"]
    assert "blue-1" not in names(labels={"color": "red"})


def test_set_based_label_selectors(http: httpx.Client, client: Client, namespace: str) -> None:
    for name, tier in (("a", "web"), ("b", "db"), ("c", None)):
        client.create(
            _configmap(name, labels={"tier": tier} if tier else {"other": "x"}), namespace=namespace
        )

    def names(selector: str) -> list[str]:
        items = http.get(
            f"/api/v1/namespaces/{namespace}/configmaps", params={"labelSelector": selector}
        ).json()["items"]
        return sorted(i["metadata"]["name"] for i in items if i["metadata"]["name"] in ("a", "b", "c"))

    assert names("tier in (web,db)") == ["a", "b"]
    assert names("tier notin (web)") == ["b", "c"]
    assert names("tier") == ["a", "b"]
    assert names("!tier") == ["c"]


def test_list_pages_with_limit_and_continue(http: httpx.Client, client: Client, namespace: str) -> None:
    for index in range(7):
        client.create(_configmap(f"page-{index}", labels={"paged": "yes"}), namespace=namespace)
    seen: list[str] = []
    params = {"limit": "3", "labelSelector": "paged=yes"}
    while True:
        body = http.get(f"/api/v1/namespaces/{namespace}/configmaps", params=params).json()
        seen += [item["metadata"]["name"] for item in body["items"]]
        token = body["metadata"].get("continue")
        if not token:
            break
        assert body["metadata"]["remainingItemCount"] > 0
        params["continue"] = token
    assert seen == [f"page-{i}" for i in range(7)]
    assert len(list(client.list(ConfigMap, namespace=namespace, labels={"paged": "yes"}, chunk_size=2))) == 7


# --- patches and apply ----------------------------------------------------------------------------


def test_merge_patch_sets_and_removes_fields(client: Client, namespace: str) -> None:
    client.create(_configmap("merge", {"keep": "1", "drop": "2"}), namespace=namespace)
    patched = client.patch(
        ConfigMap,
        "merge",
        {"data": {"drop": None, "new": "3"}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    assert patched.data == {"keep": "1", "new": "3"}


def test_strategic_merge_patch_merges_containers_and_env_by_name(client: Client, namespace: str) -> None:
    deployment = _deployment("smp")
    deployment.spec.template.spec.containers = [
        Container(
            name="web", image="nginx:1", env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
        ),
        Container(name="side", image="nginx:1"),
    ]
    client.create(deployment, namespace=namespace)
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": "nginx:2",
                            "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}],
                        },
                    ]
                }
            }
        }
    }
    patched = client.patch(Deployment, "smp", patch, namespace=namespace, patch_type=PatchType.STRATEGIC)
    containers = {c.name: c for c in patched.spec.template.spec.containers}
    assert set(containers) == {"web", "side"}
    assert containers["web"].image == "nginx:2"
    assert {e.name: e.value for e in containers["web"].env} == {"A": "1", "B": "20", "C": "3"}
    removal = {"spec": {"template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}}}
    patched = client.patch(Deployment, "smp", removal, namespace=namespace, patch_type=PatchType.STRATEGIC)
    assert [c.name for c in patched.spec.template.spec.containers] == ["web"]
    assert patched.metadata.generation == 3


def test_json_patch_applies_operations_in_order(client: Client, namespace: str) -> None:
    client.create(_configmap("jsonpatch", {"a": "1"}), namespace=namespace)
    operations = [
        {"op": "add", "path": "/data/b", "value": "2"},
        {"op": "replace", "path": "/data/a", "value": "10"},
        {"op": "test", "path": "/data/b", "value": "2"},
        {"op": "remove", "path": "/data/b"},
    ]
    patched = client.patch(ConfigMap, "jsonpatch", operations, namespace=namespace, patch_type=PatchType.JSON)
    assert patched.data == {"a": "10"}
    with pytest.raises(ApiError) as raised:
        client.patch(
            ConfigMap,
            "jsonpatch",
            [{"op": "test", "path": "/data/a", "value": "nope"}],
            namespace=namespace,
            patch_type=PatchType.JSON,
        )
    assert raised.value.status.code == 422


def test_server_side_apply_creates_then_drops_fields_no_longer_applied(
    client: Client, namespace: str
) -> None:
    applied = ConfigMap(
        metadata=ObjectMeta(name="applied", labels={"a": "1", "b": "2"}), data={"x": "1", "y": "2"}
    )
    created = client.apply(applied, namespace=namespace, field_manager="styrmin")
    assert created.data == {"x": "1", "y": "2"}
    client.patch(
        ConfigMap, "applied", {"data": {"other": "kept"}}, namespace=namespace, patch_type=PatchType.MERGE
    )
    smaller = ConfigMap(metadata=ObjectMeta(name="applied", labels={"a": "1"}), data={"x": "10"})
    result = client.apply(smaller, namespace=namespace, field_manager="styrmin")
    assert result.data == {"x": "10", "other": "kept"}
    assert result.metadata.labels == {"a": "1"}
    assert any(m.manager == "styrmin" and m.operation == "Apply" for m in result.metadata.managedFields)


def test_server_side_apply_merges_containers_by_name(client: Client, namespace: str) -> None:
    first = _deployment("ssa")
    first.spec.template.spec.containers = [
        Container(name="web", image="nginx:1"),
        Container(name="log", image="nginx:1"),
    ]
    client.apply(first, namespace=namespace, field_manager="helm")
    second = _deployment("ssa")
    second.spec.template.spec.containers = [Container(name="web", image="nginx:2")]
    result = client.apply(second, namespace=namespace, field_manager="helm")
    assert [(c.name, c.image) for c in result.spec.template.spec.containers] == [("web", "nginx:2")]


# --- delete and garbage collection ----------------------------------------------------------------


def test_delete_removes_dependents_through_owner_references(client: Client, namespace: str) -> None:
    owner = client.create(_configmap("owner"), namespace=namespace)
    reference = OwnerReference(apiVersion="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid)
    client.create(
        ConfigMap(metadata=ObjectMeta(name="dependent", ownerReferences=[reference]), data={}),
        namespace=namespace,
    )
    client.delete(ConfigMap, "owner", namespace=namespace)
    wait_for(
        lambda: (
            not [c for c in client.list(ConfigMap, namespace=namespace) if c.metadata.name == "dependent"]
        ),
        message="the dependent to be collected",
    )


def test_orphan_propagation_keeps_dependents_without_the_reference(client: Client, namespace: str) -> None:
    owner = client.create(_configmap("owner2"), namespace=namespace)
    reference = OwnerReference(apiVersion="v1", kind="ConfigMap", name="owner2", uid=owner.metadata.uid)
    client.create(
        ConfigMap(metadata=ObjectMeta(name="kept", ownerReferences=[reference]), data={}), namespace=namespace
    )
    client.delete(ConfigMap, "owner2", namespace=namespace, cascade=CascadeType.ORPHAN)
    kept = client.get(ConfigMap, "kept", namespace=namespace)
    assert not kept.metadata.ownerReferences


def test_foreground_deletion_waits_for_dependents(client: Client, namespace: str) -> None:
    client.create(_deployment("fg", replicas=2), namespace=namespace)
    wait_for(lambda: len(list(client.list(Pod, namespace=namespace))) == 2, message="2 pods")
    client.delete(Deployment, "fg", namespace=namespace, cascade=CascadeType.FOREGROUND)
    wait_for(lambda: not list(client.list(Pod, namespace=namespace)), message="the pods to go")
    wait_for(lambda: not list(client.list(Deployment, namespace=namespace)), message="the deployment to go")


def test_finalizers_hold_deletion_until_removed(client: Client, namespace: str) -> None:
    client.create(
        ConfigMap(metadata=ObjectMeta(name="held", finalizers=["example.com/hold"]), data={}),
        namespace=namespace,
    )
    client.delete(ConfigMap, "held", namespace=namespace)
    held = client.get(ConfigMap, "held", namespace=namespace)
    assert held.metadata.deletionTimestamp is not None
    client.patch(
        ConfigMap, "held", {"metadata": {"finalizers": None}}, namespace=namespace, patch_type=PatchType.MERGE
    )
    with pytest.raises(ApiError):
        client.get(ConfigMap, "held", namespace=namespace)


def test_deletecollection_by_label_and_all(http: httpx.Client, client: Client, namespace: str) -> None:
    for index in range(3):
        client.create(_configmap(f"gone-{index}", labels={"batch": "x"}), namespace=namespace)
    client.create(_configmap("stays"), namespace=namespace)
    response = http.delete(f"/api/v1/namespaces/{namespace}/configmaps", params={"labelSelector": "batch=x"})
    assert response.status_code == 200
    names = {c.metadata.name for c in client.list(ConfigMap, namespace=namespace)}
    assert "stays" in names and not any(n.startswith("gone-") for n in names)
    client.deletecollection(ConfigMap, namespace=namespace)
    assert not list(client.list(ConfigMap, namespace=namespace))


# --- subresources and content types ---------------------------------------------------------------


def test_scale_subresource_reads_and_changes_replicas(client: Client, namespace: str) -> None:
    client.create(_deployment("scaled", replicas=1), namespace=namespace)
    scale = client.get(Deployment.Scale, "scaled", namespace=namespace)
    assert scale.spec.replicas == 1 and scale.kind == "Scale"
    client.replace(
        Deployment.Scale(metadata=ObjectMeta(name="scaled", namespace=namespace), spec=ScaleSpec(replicas=3))
    )
    assert client.get(Deployment, "scaled", namespace=namespace).spec.replicas == 3
    wait_for(
        lambda: client.get(Deployment.Scale, "scaled", namespace=namespace).status.replicas == 3,
        message="3 replicas in the scale status",
    )
    assert "app=scaled" in client.get(Deployment.Scale, "scaled", namespace=namespace).status.selector


def test_status_subresource_is_separate_from_the_spec(client: Client, namespace: str) -> None:
    client.create(_deployment("statusy"), namespace=namespace)
    current = client.get(Deployment, "statusy", namespace=namespace)
    patched = client.patch(
        Deployment, "statusy", {"status": {"replicas": 42}}, namespace=namespace, patch_type=PatchType.MERGE
    )
    assert patched.status is None or patched.status.replicas != 42
    patched = client.patch(
        Deployment.Status,
        "statusy",
        {"status": {"observedGeneration": 99}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    assert patched.status.observedGeneration == 99
    assert patched.metadata.generation == current.metadata.generation


def test_secret_sent_as_protobuf_is_stored(http: httpx.Client, client: Client, namespace: str) -> None:
    body = encode_object(
        "Secret",
        {
            "metadata": {"name": "proto", "labels": {"owner": "helm"}},
            "data": {"release": base64.b64encode(b"\x00\x01binary").decode()},
            "type": "helm.sh/release.v1",
        },
    )
    assert body.startswith(MAGIC)
    response = http.post(
        f"/api/v1/namespaces/{namespace}/secrets",
        content=body,
        headers={
            "Content-Type": "application/vnd.kubernetes.protobuf",
            "Accept": "application/vnd.kubernetes.protobuf,application/json",
        },
    )
    assert response.status_code == 201, response.text
    assert response.headers["content-type"] == "application/json"
    secret = client.get(Secret, "proto", namespace=namespace)
    assert base64.b64decode(secret.data["release"]) == b"\x00\x01binary"
    assert secret.type == "helm.sh/release.v1" and secret.metadata.labels == {"owner": "helm"}
    body = encode_object("ConfigMap", {"metadata": {"name": "proto-cm"}, "data": {"k": "v"}})
    response = http.post(
        f"/api/v1/namespaces/{namespace}/configmaps",
        content=body,
        headers={"Content-Type": "application/vnd.kubernetes.protobuf"},
    )
    assert response.status_code == 201
    assert client.get(ConfigMap, "proto-cm", namespace=namespace).data == {"k": "v"}


def test_get_as_table_has_kubectl_columns(http: httpx.Client, client: Client, namespace: str) -> None:
    client.create(_configmap("tabled", {"a": "1", "b": "2"}), namespace=namespace)
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    table = http.get(f"/api/v1/namespaces/{namespace}/configmaps", headers={"Accept": accept}).json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    row = next(r for r in table["rows"] if r["cells"][0] == "tabled")
    assert row["cells"][1] == 2
    assert row["object"]["kind"] == "PartialObjectMetadata"


def test_unsupported_subresources_answer_clearly(http: httpx.Client, client: Client, namespace: str) -> None:
    client.create(_deployment("noexec"), namespace=namespace)
    pod = wait_for(lambda: next(iter(client.list(Pod, namespace=namespace)), None), message="a pod")
    response = http.post(
        f"/api/v1/namespaces/{namespace}/pods/{pod.metadata.name}/exec", params={"command": "ls"}
    )
    assert response.status_code == 405
    assert "cannot run commands in containers (exec)" in response.json()["message"]

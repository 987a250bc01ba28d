"""The rules of a stop or start that sets replicas in place: the release digest and the dry run's verdict."""

from __future__ import annotations

from typing import Any

from styrmin_backend.domain.scale_in_place import (
    as_helm_applies,
    helm_manager,
    only_replicas_differ,
    release_digest,
)

HELM_FIELDS = {
    "f:metadata": {
        "f:annotations": {"f:meta.helm.sh/release-name": {}, "f:meta.helm.sh/release-namespace": {}}
    },
    "f:spec": {"f:replicas": {}, "f:template": {}},
}


def _live(replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "shop-task-worker",
            "namespace": "shop",
            "resourceVersion": "41",
            "generation": 3,
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": "shop", "meta.helm.sh/release-namespace": "shop"},
            "managedFields": [
                {"manager": "python", "operation": "Apply", "fieldsV1": HELM_FIELDS, "time": "t1"},
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "subresource": "status",
                    "fieldsV1": {"f:status": {}},
                    "time": "t1",
                },
            ],
        },
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "w", "image": "w:1"}]}}},
        "status": {"replicas": replicas},
    }


def test_helms_manager_is_the_apply_that_owns_the_release_annotation() -> None:
    assert helm_manager(_live()) == "python"
    client_side = _live()
    client_side["metadata"]["managedFields"][0]["operation"] = "Update"  # Helm 3's three-way merge
    assert helm_manager(client_side) is None
    assert helm_manager({"metadata": {}}) is None


def test_a_dry_run_that_changes_only_the_replicas_passes() -> None:
    live = _live(1)
    dry_run = _live(0)
    dry_run["metadata"].update(resourceVersion="42", generation=4)
    dry_run["metadata"]["managedFields"][0]["time"] = "t2"
    assert only_replicas_differ(live, dry_run)


def test_a_dry_run_that_changes_anything_else_does_not() -> None:
    live = _live(1)
    image = _live(0)
    image["spec"]["template"]["spec"]["containers"][0]["image"] = "w:2"
    dropped = _live(0)
    del dropped["metadata"]["annotations"]["meta.helm.sh/release-namespace"]
    owners = _live(0)
    owners["metadata"]["managedFields"][0]["fieldsV1"] = {"f:spec": {"f:replicas": {}}}
    for dry_run in (image, dropped, owners):
        assert not only_replicas_differ(live, dry_run)


def test_a_manifest_is_applied_with_helms_ownership_metadata() -> None:
    manifest = {
        "kind": "Deployment",
        "metadata": {"name": "w", "labels": {"a": "b"}},
        "spec": {"replicas": 0},
    }
    applied = as_helm_applies(manifest, "shop", "team-a")
    assert applied["metadata"] == {
        "name": "w",
        "namespace": "team-a",
        "labels": {"a": "b", "app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": "shop", "meta.helm.sh/release-namespace": "team-a"},
    }
    assert manifest == {
        "kind": "Deployment",
        "metadata": {"name": "w", "labels": {"a": "b"}},
        "spec": {"replicas": 0},
    }


def test_the_release_digest_is_keyed_so_a_reader_of_workloads_cannot_test_guesses_of_secrets() -> None:
    secret = {
        "kind": "Secret",
        "metadata": {"name": "shop-styrmin-env"},
        "data": {"server.TOKEN": "aHVudGVyMg=="},
    }
    worker = {"kind": "Deployment", "metadata": {"name": "w"}, "spec": {"replicas": 1}}
    stopped = {"kind": "Deployment", "metadata": {"name": "w"}, "spec": {"replicas": 0}}
    workloads = {("Deployment", "w")}
    digest = release_digest([secret, worker], workloads, {"name": "shop"}, b"k" * 32)
    assert release_digest([secret, stopped], workloads, {"name": "shop"}, b"k" * 32) == digest
    assert release_digest([secret, worker], workloads, {"name": "shop"}, b"j" * 32) != digest
    guessed = {**secret, "data": {"server.TOKEN": "Z3Vlc3M="}}
    assert release_digest([guessed, worker], workloads, {"name": "shop"}, b"k" * 32) != digest

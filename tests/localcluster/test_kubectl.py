"""The real kubectl of this machine against the local cluster: get, apply, scale, logs, delete, rollout, wait."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from styrmin_localcluster import LocalCluster
from tests.support.kubectl import KUBECTL, run_kubectl

if KUBECTL is None:
    print("SKIPPED kubectl tests: no kubectl on PATH (install Debian's kubectl or kubernetes-client package)")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH on this machine"),
]

Kubectl = Callable[..., subprocess.CompletedProcess[str]]

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
        - name: server
          image: registry.local:5000/shop/server:1.0
          env:
            - name: MESSAGE
              value: "{message}"
"""

JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: main
          image: example.com/tools/python:3.11
          command: ["python", "-c", "{script}"]
"""


@pytest.fixture
def kubectl(cluster: LocalCluster, namespace: str, tmp_path: Path) -> Kubectl:
    def run(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_kubectl(cluster.kubeconfig_path, tmp_path, namespace, *args, stdin=stdin, check=check)

    return run


def test_kubectl_get_prints_server_side_tables(kubectl: Kubectl) -> None:
    namespaces = kubectl("get", "namespaces").stdout
    assert namespaces.splitlines()[0].split() == ["NAME", "STATUS", "AGE"]
    assert "default" in namespaces
    nodes = kubectl("get", "nodes").stdout
    assert "localcluster" in nodes and "Ready" in nodes


def test_kubectl_apply_rollout_status_scale_and_delete(kubectl: Kubectl) -> None:
    assert (
        "deployment.apps/web created"
        in kubectl("apply", "-f", "-", stdin=DEPLOYMENT.format(replicas=2, message="one")).stdout
    )
    assert (
        'deployment "web" successfully rolled out'
        in kubectl("rollout", "status", "deployment/web", "--timeout=30s").stdout
    )
    assert (
        "configured" in kubectl("apply", "-f", "-", stdin=DEPLOYMENT.format(replicas=2, message="two")).stdout
    )
    kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    deployment = json.loads(kubectl("get", "deployment", "web", "-o", "json").stdout)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "MESSAGE", "value": "two"}
    ]
    assert "kubectl.kubernetes.io/last-applied-configuration" in deployment["metadata"]["annotations"]
    kubectl("scale", "deployment/web", "--replicas=3")
    kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    pods = kubectl("get", "pods", "-l", "app=web", "-o", "name").stdout.split()
    assert len(pods) == 3
    table = kubectl("get", "deployment", "web").stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert table[1].split()[:4] == ["web", "3/3", "3", "3"]
    kubectl("scale", "deployment/web", "--replicas=0")
    kubectl("wait", "--for=delete", "pod", "-l", "app=web", "--timeout=30s")
    assert 'deployment.apps "web" deleted' in kubectl("delete", "deployment", "web").stdout
    assert "No resources found" in kubectl("get", "pods").stderr


def test_kubectl_server_side_apply(kubectl: Kubectl) -> None:
    out = kubectl(
        "apply", "--server-side", "-f", "-", stdin=DEPLOYMENT.format(replicas=1, message="ssa")
    ).stdout
    assert "deployment.apps/web serverside-applied" in out
    kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        "-",
        stdin=DEPLOYMENT.format(replicas=2, message="ssa2"),
    )
    kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    managed = json.loads(kubectl("get", "deployment", "web", "-o", "json", "--show-managed-fields").stdout)
    assert any(
        m["manager"] == "kubectl" and m["operation"] == "Apply" for m in managed["metadata"]["managedFields"]
    )
    assert managed["spec"]["replicas"] == 2


def test_kubectl_logs_of_a_job_and_wait_for_completion(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=JOB.format(name="hello", script="print('hello from the job')"))
    assert "condition met" in kubectl("wait", "--for=condition=complete", "job/hello", "--timeout=30s").stdout
    assert kubectl("logs", "job/hello").stdout == "hello from the job\n"
    jobs = kubectl("get", "jobs").stdout.splitlines()
    assert jobs[1].split()[:3] == ["hello", "Complete", "1/1"]
    kubectl("delete", "job", "hello")
    kubectl("wait", "--for=delete", "pod", "-l", "job-name=hello", "--timeout=30s")


def test_kubectl_shows_a_failing_job(kubectl: Kubectl) -> None:
    script = "import sys; print('about to fail'); sys.exit(4)"
    kubectl("apply", "-f", "-", stdin=JOB.format(name="broken", script=script))
    kubectl("wait", "--for=condition=failed", "job/broken", "--timeout=30s")
    assert kubectl("logs", "job/broken").stdout == "about to fail\n"
    pods = kubectl("get", "pods", "-l", "job-name=broken").stdout.splitlines()
    assert pods[1].split()[1:3] == ["0/1", "Error"]
    description = kubectl("describe", "job", "broken").stdout
    assert "BackoffLimitExceeded" in description


def test_kubectl_works_with_custom_resources(kubectl: Kubectl) -> None:
    crd = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.org
spec:
  group: example.org
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, shortNames: [gd]}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"""
    kubectl("apply", "-f", "-", stdin=crd)
    kubectl("wait", "--for=condition=established", "crd/gadgets.example.org", "--timeout=30s")
    gadget = "apiVersion: example.org/v1\nkind: Gadget\nmetadata:\n  name: g1\nspec:\n  size: {size}\n"
    kubectl("apply", "-f", "-", stdin=gadget.format(size=1))
    kubectl("apply", "-f", "-", stdin=gadget.format(size=2))
    assert json.loads(kubectl("get", "gd", "g1", "-o", "json").stdout)["spec"] == {"size": 2}
    assert kubectl("get", "gadgets").stdout.splitlines()[0].split() == ["NAME", "AGE"]
    kubectl("delete", "crd", "gadgets.example.org")


def test_kubectl_moves_from_client_side_to_server_side_apply(kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=DEPLOYMENT.format(replicas=1, message="csa"))
    out = kubectl(
        "apply", "--server-side", "-f", "-", stdin=DEPLOYMENT.format(replicas=1, message="ssa")
    ).stdout
    assert "serverside-applied" in out
    deployment = json.loads(kubectl("get", "deployment", "web", "-o", "json", "--show-managed-fields").stdout)
    managers = {(m["manager"], m["operation"]) for m in deployment["metadata"]["managedFields"]}
    assert ("kubectl", "Apply") in managers and ("kubectl-client-side-apply", "Update") not in managers
    assert deployment["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "MESSAGE", "value": "ssa"}
    ]


def test_server_side_apply_reports_conflicts_with_other_managers(kubectl: Kubectl) -> None:
    manifest = DEPLOYMENT.format(replicas=1, message="a")
    kubectl("apply", "--server-side", "--field-manager=helm", "-f", "-", stdin=manifest)
    kubectl("scale", "deployment/web", "--replicas=2")
    conflict = kubectl(
        "apply", "--server-side", "--field-manager=helm", "-f", "-", stdin=manifest, check=False
    )
    assert conflict.returncode != 0
    assert (
        'Apply failed with 1 conflict: conflict with "kubectl" with subresource "scale" using apps/v1: .spec.replicas'
    ) in conflict.stderr

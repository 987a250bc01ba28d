"""Styrmin's own chart (deploy/chart/), rendered by real Helm for each documented mode: the objects,
their probes, the agent's RBAC, Secrets referenced by name, and no secret in plain sight."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

CHART = Path(__file__).parents[2] / "deploy" / "chart"
AGENT_ONLY = {
    "mode": "agent",
    "agent": {
        "cluster": "edge",
        "serverUrl": "https://styrmin.example.com",
        "prefectApiUrl": "https://prefect.example.com/api",
    },
}


def render(values: dict[str, Any]) -> tuple[dict[tuple[str, str], dict[str, Any]], str]:
    """The rendered objects by (kind, name) (namespaced Roles by "namespace/name"), and the NOTES."""
    rendered = helm.Chart.load(CHART).render(values, name="styrmin", namespace="styrmin", is_install=True)
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    notes = ""
    for template, text in rendered.items():
        if template.endswith("NOTES.txt"):
            notes = text
            continue
        for document in yaml.safe_load_all(text):
            if document:
                meta = document["metadata"]
                name = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
                objects[(document["kind"], name)] = document
    return objects, notes


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in container["env"]}


def test_the_full_install_has_server_prefect_agent_and_migrations() -> None:
    objects, _notes = render({})
    assert set(objects) >= {
        ("Deployment", "styrmin-server"),
        ("Service", "styrmin-server"),
        ("PodDisruptionBudget", "styrmin-server"),
        ("Job", "styrmin-migrate-1"),
        ("Deployment", "prefect-server"),
        ("Service", "prefect-server"),
        ("Deployment", "styrmin-agent"),
        ("ServiceAccount", "styrmin-agent"),
    }
    assert ("Ingress", "styrmin-server") not in objects  # optional, off by default
    # The seed's line works as written: kubectl port-forward svc/prefect-server 4200:4200 -n styrmin
    assert objects[("Service", "prefect-server")]["spec"]["ports"][0]["port"] == 4200


def test_the_server_probes_its_real_endpoints_and_runs_several_replicas() -> None:
    objects, _notes = render({"server": {"replicas": 3}})
    server = objects[("Deployment", "styrmin-server")]
    assert server["spec"]["replicas"] == 3
    container = _container(server)
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert objects[("PodDisruptionBudget", "styrmin-server")]["spec"]["minAvailable"] == 1
    job = objects[("Job", "styrmin-migrate-1")]
    assert _container(job)["args"] == ["db", "upgrade"]
    assert "pre-upgrade" in job["metadata"]["annotations"]["helm.sh/hook"]


def test_secrets_are_referenced_by_name_and_never_written_in_plain() -> None:
    objects, _notes = render({"ingress": {"enabled": True, "host": "styrmin.example.com"}})
    server_env = _env(_container(objects[("Deployment", "styrmin-server")]))
    assert server_env["STYRMIN_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "styrmin-database",
        "key": "url",
    }
    assert server_env["STYRMIN_ADMIN_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "styrmin-admin"
    migrate_env = _env(_container(objects[("Job", "styrmin-migrate-1")]))
    for env in (server_env, migrate_env):
        assert env["STYRMIN_SECRET_KEY"]["valueFrom"]["secretKeyRef"] == {
            "name": "styrmin-secret-key",
            "key": "key",
        }
    prefect_env = _env(_container(objects[("Deployment", "prefect-server")]))
    assert (
        prefect_env["PREFECT_SERVER_DATABASE_CONNECTION_URL"]["valueFrom"]["secretKeyRef"]["name"]
        == "styrmin-database"
    )
    agent_env = _env(_container(objects[("Deployment", "styrmin-agent")]))
    assert agent_env["STYRMIN_AGENT_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "styrmin-agent",
        "key": "key",
    }
    assert not [key for key in objects if key[0] in ("Secret", "ConfigMap")]
    for workload in objects.values():
        for container in workload.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            for entry in container.get("env", []):
                if any(
                    word in entry["name"] for word in ("PASSWORD", "KEY", "DATABASE_URL", "CONNECTION_URL")
                ):
                    assert "value" not in entry, entry


def test_the_agent_gets_a_cluster_role_by_default_and_roles_per_namespace_when_asked() -> None:
    objects, _notes = render({})
    rules = objects[("ClusterRole", "styrmin-agent")]["rules"]
    assert {"apiGroups": ["styrmin.io"], "resources": ["styrmindeployments"]}.items() <= rules[0].items()
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in rules)
    binding = objects[("ClusterRoleBinding", "styrmin-agent")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "styrmin-agent", "namespace": "styrmin"}
    ]

    scoped, _notes = render({"agent": {"rbac": {"scope": "namespaces", "namespaces": ["shop", "blog"]}}})
    assert ("ClusterRole", "styrmin-agent") not in scoped
    assert {("Role", "shop/styrmin-agent"), ("Role", "blog/styrmin-agent")} <= set(scoped)
    assert scoped[("RoleBinding", "blog/styrmin-agent")]["subjects"][0]["namespace"] == "styrmin"
    # The CRD and namespaces are cluster-scoped: that small ClusterRole stays in both modes.
    cluster_rules = scoped[("ClusterRole", "styrmin-agent-cluster")]["rules"]
    assert {rule["resources"][0] for rule in cluster_rules} == {"customresourcedefinitions", "namespaces"}


def test_agent_only_mode_installs_just_an_agent() -> None:
    objects, notes = render(AGENT_ONLY)
    # What helm install makes: the test Pod is made by `helm test` only.
    kinds = {
        kind
        for (kind, _name), document in objects.items()
        if (document["metadata"].get("annotations") or {}).get("helm.sh/hook") != "test"
    }
    assert kinds == {"ServiceAccount", "Deployment", "ClusterRole", "ClusterRoleBinding"}
    assert list(key for key in objects if key[0] == "Deployment") == [("Deployment", "styrmin-agent")]
    env = _env(_container(objects[("Deployment", "styrmin-agent")]))
    assert env["STYRMIN_AGENT_SERVER_URL"]["value"] == "https://styrmin.example.com"
    assert "https://styrmin.example.com" in notes


def test_agent_only_mode_without_a_server_url_says_what_to_set() -> None:
    with pytest.raises(helm.HelmError, match=r"agent\.serverUrl"):
        render({"mode": "agent"})


def test_values_outside_the_schema_are_refused_naming_the_field() -> None:
    with pytest.raises(helm.HelmError, match="mode"):
        render({"mode": "everything"})


def test_the_notes_say_how_to_log_in() -> None:
    _objects, notes = render({})
    assert "kubectl get secret styrmin-admin -n styrmin" in notes
    assert "styrminctl login http://127.0.0.1:8080 --username admin" in notes
    assert "kubectl port-forward svc/prefect-server 4200:4200 -n styrmin" in notes


def _existing_secrets(values: Any) -> set[str]:
    """Every `existingSecret` the values name: the Secrets the operator creates."""
    if isinstance(values, dict):
        found = {values["existingSecret"]} if isinstance(values.get("existingSecret"), str) else set()
        for value in values.values():
            found |= _existing_secrets(value)
        return found
    if isinstance(values, list):
        return set().union(*(_existing_secrets(v) for v in values)) if values else set()
    return set()


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        merged[key] = (
            _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
        )
    return merged


DOCUMENTED_MODES = {
    "full": {},
    "full with an Ingress": {
        "ingress": {"enabled": True, "host": "styrmin.example.com", "tlsSecretName": "tls"}
    },
    "agent RBAC per namespace": {"agent": {"rbac": {"scope": "namespaces", "namespaces": ["shop"]}}},
    "migrations at the servers' start": {"migrations": {"job": False}},
    "agent only": AGENT_ONLY,
}


@pytest.mark.parametrize("values", DOCUMENTED_MODES.values(), ids=list(DOCUMENTED_MODES))
def test_every_documented_mode_names_probes_and_references_its_secrets(values: dict[str, Any]) -> None:
    objects, _notes = render(values)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    allowed = _existing_secrets(_merge(defaults, values))
    assert not [key for key in objects if key[0] in ("Secret", "ConfigMap")]
    for (kind, name), document in objects.items():
        assert name.rsplit("/", 1)[-1].startswith(("styrmin-", "prefect-server")), (kind, name)
        assert document["metadata"]["labels"]["app.kubernetes.io/instance"] == "styrmin"
        if kind in ("ClusterRole", "Role"):
            assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in document["rules"])
        if kind not in ("Deployment", "Job"):
            continue
        pod = document["spec"]["template"]["spec"]
        for container in pod["containers"]:
            if kind == "Deployment":
                assert container["livenessProbe"]["httpGet"]["path"], name
            for entry in container.get("env", []):
                reference = entry.get("valueFrom", {}).get("secretKeyRef")
                if reference:
                    assert reference["name"] in allowed, (name, entry)
        if kind == "Deployment" and name != "styrmin-agent":
            (container,) = pod["containers"]
            assert container["readinessProbe"]["httpGet"]["path"] in ("/readyz", "/api/health"), name
    if values.get("mode") == "agent":
        assert {kind for kind, _name in objects} == {
            "ServiceAccount",
            "Deployment",
            "ClusterRole",
            "ClusterRoleBinding",
            "Pod",  # the `helm test` Pod
        }
    else:
        assert (("Job", "styrmin-migrate-1") in objects) == values.get("migrations", {}).get("job", True)


def test_the_prefect_server_listens_where_asked_behind_service_port_4200() -> None:
    objects, _notes = render({"prefect": {"containerPort": 4300}})
    container = _container(objects[("Deployment", "prefect-server")])
    assert container["args"][-2:] == ["--port", "4300"]
    assert container["ports"] == [{"name": "http", "containerPort": 4300}]
    (port,) = objects[("Service", "prefect-server")]["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (4200, "http")


def test_in_full_mode_the_agent_reaches_the_services_unless_told_other_urls() -> None:
    objects, _notes = render({})
    env = _env(_container(objects[("Deployment", "styrmin-agent")]))
    assert env["STYRMIN_AGENT_SERVER_URL"]["value"] == "http://styrmin-server.styrmin.svc:8080"
    assert env["STYRMIN_AGENT_PREFECT_API_URL"]["value"] == "http://prefect-server.styrmin.svc:4200/api"
    objects, _notes = render(
        {"agent": {"serverUrl": "http://127.0.0.1:8081", "prefectApiUrl": "http://127.0.0.1:4201/api"}}
    )
    env = _env(_container(objects[("Deployment", "styrmin-agent")]))
    assert env["STYRMIN_AGENT_SERVER_URL"]["value"] == "http://127.0.0.1:8081"
    assert env["STYRMIN_AGENT_PREFECT_API_URL"]["value"] == "http://127.0.0.1:4201/api"


def _pods(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The pod template (or Pod) spec and metadata of each workload, by its name."""
    pods = {}
    for (kind, name), document in objects.items():
        if kind in ("Deployment", "Job"):
            pods[name] = document["spec"]["template"]
        elif kind == "Pod":
            pods[name] = document
    return pods


def test_scheduling_knobs_reach_every_pod_and_a_components_own_replace_them() -> None:
    everywhere = {"disktype": "ssd"}
    toleration = {"key": "dedicated", "operator": "Equal", "value": "styrmin", "effect": "NoSchedule"}
    affinity = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    objects, _notes = render(
        {
            "nodeSelector": everywhere,
            "tolerations": [toleration],
            "affinity": affinity,
            "podAnnotations": {"team": "platform"},
            "agent": {"nodeSelector": {"pool": "agents"}, "podAnnotations": {"team": "deployers"}},
        }
    )
    pods = _pods(objects)
    assert set(pods) == {
        "styrmin-server",
        "prefect-server",
        "styrmin-agent",
        "styrmin-migrate-1",
        "styrmin-test",
    }
    for name, pod in pods.items():
        spec = pod["spec"]
        assert spec["tolerations"] == [toleration], name
        assert spec["affinity"] == affinity, name
        expected = {"pool": "agents"} if name == "styrmin-agent" else everywhere
        assert spec["nodeSelector"] == expected, name
    assert pods["styrmin-server"]["metadata"]["annotations"]["team"] == "platform"
    assert pods["styrmin-agent"]["metadata"]["annotations"]["team"] == "deployers"
    defaults, _ = render({})
    assert all("nodeSelector" not in pod["spec"] for pod in _pods(defaults).values())


def test_scrape_annotations_are_on_by_default_and_a_value_turns_them_off() -> None:
    pods = _pods(render({})[0])
    server = pods["styrmin-server"]["metadata"]["annotations"]
    assert server == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8080",
        "prometheus.io/path": "/metrics",
    }
    assert pods["styrmin-agent"]["metadata"]["annotations"]["prometheus.io/port"] == "9090"
    assert "annotations" not in pods["prefect-server"]["metadata"]
    quiet = _pods(render({"metrics": {"scrapeAnnotations": False}})[0])
    assert all("annotations" not in pod["metadata"] for name, pod in quiet.items() if name != "styrmin-test")


def test_service_monitors_for_the_server_and_the_agent_behind_a_value() -> None:
    objects, _notes = render({})
    assert not any(kind == "ServiceMonitor" for kind, _ in objects)
    objects, _notes = render(
        {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}}
    )
    server = objects[("ServiceMonitor", "styrmin-server")]
    assert server["metadata"]["labels"]["release"] == "prom"
    assert server["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]
    agent = objects[("ServiceMonitor", "styrmin-agent")]
    assert agent["spec"]["endpoints"][0]["port"] == "metrics"
    service = objects[("Service", "styrmin-agent-metrics")]
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics"}]
    agent_only, _ = render(_merge(AGENT_ONLY, {"metrics": {"serviceMonitor": {"enabled": True}}}))
    assert ("ServiceMonitor", "styrmin-server") not in agent_only
    assert ("ServiceMonitor", "styrmin-agent") in agent_only
    with pytest.raises(helm.HelmError, match="interval"):
        render({"metrics": {"serviceMonitor": {"enabled": True, "interval": "soon"}}})


def test_the_agents_service_account_takes_annotations_for_workload_identity() -> None:
    role = {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/styrmin-backups"}
    objects, _notes = render({"agent": {"serviceAccount": {"annotations": role}}})
    assert objects[("ServiceAccount", "styrmin-agent")]["metadata"]["annotations"] == role
    assert "annotations" not in render({})[0][("ServiceAccount", "styrmin-agent")]["metadata"]


def test_helm_test_runs_a_pod_that_calls_what_the_install_serves() -> None:
    objects, notes = render({})
    pod = objects[("Pod", "styrmin-test")]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["python", "-c"]
    assert container["args"][1:] == [
        "http://styrmin-server.styrmin.svc:8080/readyz",
        "http://styrmin-server.styrmin.svc:8080/api/openapi.json",
        "http://prefect-server.styrmin.svc:4200/api/health",
    ]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "helm test styrmin -n styrmin" in notes
    agent_only, _ = render(AGENT_ONLY)
    (agent_check,) = agent_only[("Pod", "styrmin-test")]["spec"]["containers"]
    assert agent_check["args"][1:] == ["https://styrmin.example.com/healthz"]


class _Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_the_test_pods_script_passes_and_fails_as_helm_test_reports() -> None:
    """The script of the test Pod, run here against a server that answers and a port that does not."""
    objects, _notes = render({})
    (container,) = objects[("Pod", "styrmin-test")]["spec"]["containers"]
    script = container["args"][0]
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthy) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        ok_url = f"http://127.0.0.1:{server.server_address[1]}/readyz"
        passed = subprocess.run(
            [sys.executable, "-c", script, ok_url], capture_output=True, text=True, timeout=120
        )
        assert passed.returncode == 0, passed.stdout + passed.stderr
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            nobody = f"http://127.0.0.1:{closed.getsockname()[1]}/readyz"
        failed = subprocess.run(
            [sys.executable, "-c", script, ok_url, nobody], capture_output=True, text=True, timeout=120
        )
        server.shutdown()
    assert failed.returncode == 1 and "unreachable" in failed.stdout

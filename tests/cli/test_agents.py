"""`styrminctl agents register`: a working key, and the exact commands that install the agent with it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import helm_python as helm
import httpx
import yaml

from tests.cli.test_process import env, styrminctl  # noqa: F401  (env is a fixture)
from tests.sdk.server import LiveServer, unique

CHART = Path(__file__).parents[2] / "deploy" / "chart"


def test_register_prints_a_key_that_works_and_the_helm_install_line(
    live_server: LiveServer,
    env: dict[str, str],  # noqa: F811
) -> None:
    name = unique("edge")
    result = styrminctl(
        "agents", "register", name, "--cluster", "edge",
        "--prefect-api-url", "https://prefect.example.com/api",
        "--server-url", "https://styrmin.example.com",
        "--chart", str(CHART),
        env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    namespace, secret, install = result.stdout.splitlines()[-3:]
    assert namespace == "kubectl create namespace styrmin"
    secret_argv = shlex.split(secret)
    key = secret_argv[-1].removeprefix("--from-literal=key=")
    assert key.startswith("sta_")
    assert secret_argv[:6] == ["kubectl", "create", "secret", "generic", "styrmin-agent", "-n"]
    # The key printed is the agent's: the server accepts it for a claim.
    claim = httpx.post(
        f"{live_server.url}/api/v1/agent/claim",
        json={"lease_seconds": 30},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert claim.status_code == 204, claim.text

    argv = shlex.split(install)
    assert argv[:6] == ["helm", "install", "styrmin-agent", str(CHART), "-n", "styrmin"]
    assert key not in install  # the key stays in the Secret, out of Helm's stored values
    values: dict[str, object] = {}
    for setting in argv[7::2]:
        path, value = setting.split("=", 1)
        *parents, leaf = path.split(".")
        target = values
        for part in parents:
            target = target.setdefault(part, {})  # type: ignore[assignment]
        target[leaf] = value  # type: ignore[index]
    rendered = helm.Chart.load(CHART).render(
        values, name="styrmin-agent", namespace="styrmin", is_install=True
    )
    documents = [
        d
        for t, text in rendered.items()
        if not t.endswith("NOTES.txt")
        for d in yaml.safe_load_all(text)
        if d
    ]
    (agent,) = [d for d in documents if d["kind"] == "Deployment"]
    env_vars = {e["name"]: e for e in agent["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env_vars["STYRMIN_AGENT_SERVER_URL"]["value"] == "https://styrmin.example.com"
    assert env_vars["STYRMIN_AGENT_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "styrmin-agent"


def test_register_as_json_and_list(live_server: LiveServer, env: dict[str, str]) -> None:  # noqa: F811
    name = unique("edge")
    made = styrminctl(
        "agents", "register", name, "-c", "edge", "--prefect-api-url", "http://p:4200/api", "-o", "json", env=env
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    body = json.loads(made.stdout)
    assert body["agent"]["name"] == name and body["key"].startswith("sta_") and len(body["install"]) == 3
    listed = styrminctl("agents", "list", env=env).stdout.splitlines()
    assert listed[0].split() == ["NAME", "CLUSTER", "STATE", "LAST", "SEEN", "PROCESSES", "AGE"]
    (row,) = [line.split() for line in listed if line.startswith(f"{name} ")]
    assert row[:5] == [name, "edge", "never-connected", "never", "0"]
    assert styrminctl("agents", "list", "-o", "wide", env=env).stdout.splitlines()[0].split()[-1] == "RUNNING"
    assert styrminctl("agents", "revoke", name, "--yes", env=env).returncode == 0
    (row,) = [
        line.split()
        for line in styrminctl("agents", "list", env=env).stdout.splitlines()
        if line.startswith(name)
    ]
    assert row[:3] == [name, "edge", "revoked"]
    nowhere = styrminctl("agents", "list", "--cluster", "nowhere", env=env)
    assert nowhere.returncode == 0 and nowhere.stdout == "No agents match.\n"


def _notes(values: dict[str, object]) -> str:
    rendered = helm.Chart.load(CHART).render(values, name="styrmin", namespace="styrmin", is_install=True)
    return next(text for template, text in rendered.items() if template.endswith("NOTES.txt"))


def notes_register_line(notes: str) -> list[str]:
    """The argv of the NOTES' `styrminctl agents register ...` line, without `styrminctl`."""
    (line,) = [ln.strip() for ln in notes.splitlines() if ln.strip().startswith("styrminctl agents register")]
    return shlex.split(line)[1:]


def test_the_charts_notes_register_the_agent_as_printed(
    live_server: LiveServer,
    env: dict[str, str],  # noqa: F811
) -> None:
    """The NOTES' line exits 0 and prints the kubectl line for the Secret the chart's agent reads."""
    for values, secret, secret_key in (
        ({}, "styrmin-agent", "key"),
        ({"agent": {"key": {"existingSecret": "edge-key", "secretKey": "token"}}}, "edge-key", "token"),
    ):
        argv = notes_register_line(_notes(values))
        # One server for the whole session: a fresh name, and a cluster of its own, whose claim can take
        # no other test's task.
        argv[2] = unique("notes-agent")
        assert argv[argv.index("--cluster") + 1] == "local"
        argv[argv.index("--cluster") + 1] = unique("notes-cluster")
        result = styrminctl(*argv, env=env)
        assert result.returncode == 0, result.stderr
        stored = shlex.split(result.stdout.splitlines()[-1])
        assert stored[:7] == ["kubectl", "create", "secret", "generic", secret, "-n", "styrmin"]
        key = stored[7].removeprefix(f"--from-literal={secret_key}=")
        assert key.startswith("sta_")
        assert "helm install" not in result.stdout  # the full install runs the agent already
        claim = httpx.post(
            f"{live_server.url}/api/v1/agent/claim",
            json={"lease_seconds": 30},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert claim.status_code == 204, claim.text

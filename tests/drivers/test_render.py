"""Rendering with real Helm, then the deployment's image overrides and env on the component containers."""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from styrmin_backend._helm_chart import load_chart, render_loaded
from styrmin_backend.drivers import (
    ConfigurationError,
    DeploymentConfiguration,
    InstallChart,
    RenderError,
    load_driver_spec,
    prepare_install_chart,
    render_deployment,
)
from styrmin_backend.drivers.render import (
    RELEASE_DIGEST_ANNOTATION,
    REPLICAS_ANNOTATION,
    SECRET_CHECKSUM_ANNOTATION,
)
from styrmin_backend.drivers.workloads import CHECKSUM_KEY_ENTRY
from styrmin_drivers.spec import DriverSpec
from tests.drivers.conftest import CHART_TEMPLATE, EXAMPLE_DRIVER, SPEC, MakeDriver

KEY = bytes(range(32))
"""The secret env checksum key of the renders that are compared."""


@pytest.fixture
def demo(make_driver: MakeDriver) -> tuple[Path, DriverSpec]:
    root = make_driver(SPEC, actions=None)
    return root, load_driver_spec(SPEC)


def _workload(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name)


def _as_shown(documents: list[dict[str, Any]], digest: str) -> list[dict[str, Any]]:
    """The documents of an install chart without the release digest, once each component workload
    (and only those) is found to carry ``digest``: the agent's bookkeeping, which previews leave out
    as they leave out Helm's own ownership annotations."""
    shown = copy.deepcopy(documents)
    for document in shown:
        annotations = document.get("metadata", {}).get("annotations") or {}
        if document["kind"] in ("Deployment", "StatefulSet"):
            assert annotations.pop(RELEASE_DIGEST_ANNOTATION) == digest
        assert RELEASE_DIGEST_ANNOTATION not in annotations
    return shown


def _containers(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in workload["spec"]["template"]["spec"]["containers"]}


def test_chart_renders_with_release_namespace_values_and_app_version(demo: tuple[Path, DriverSpec]) -> None:
    root, spec = demo
    manifests = render_deployment(
        root, spec, "shop", "team-a", "2.4.1", DeploymentConfiguration(values={"replicas": 3})
    )

    server = _workload(manifests, "Deployment", "shop-server")
    assert server["spec"]["replicas"] == 3
    assert _containers(server)["server"]["image"] == "example.com/demo/server:2.4.1"
    assert _workload(manifests, "StatefulSet", "shop-worker")


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("registry.local:5000/demo/server:{{ app.version }}", "registry.local:5000/demo/server:3.0.0"),
        (
            "registry.local:5000/demo/server:{{app.version}}-debug",
            "registry.local:5000/demo/server:3.0.0-debug",
        ),
        ("demo/server:{{ app.version }}@sha256:" + "a" * 64, "demo/server:3.0.0@sha256:" + "a" * 64),
        (
            "registry.local:5000/demo/server@sha256:" + "b" * 64,
            "registry.local:5000/demo/server@sha256:" + "b" * 64,
        ),
    ],
)
def test_image_override_goes_to_the_component_container_with_the_app_version(
    demo: tuple[Path, DriverSpec], override: str, expected: str
) -> None:
    root, spec = demo
    configuration = DeploymentConfiguration(images={"server": override})

    manifests = render_deployment(root, spec, "shop", "default", "3.0.0", configuration)

    containers = _containers(_workload(manifests, "Deployment", "shop-server"))
    assert containers["server"]["image"] == expected
    assert containers["sidecar"]["image"] == "example.com/demo/sidecar:1"


def test_component_without_declared_container_gets_overrides_on_its_first(
    demo: tuple[Path, DriverSpec],
) -> None:
    root, spec = demo
    configuration = DeploymentConfiguration(
        images={"worker": "mirror.local/worker:{{ app.version }}"}, env={"worker": {"QUEUE": "fast"}}
    )

    manifests = render_deployment(root, spec, "shop", "default", "1.1.0", configuration)

    worker = _containers(_workload(manifests, "StatefulSet", "shop-worker"))["worker"]
    assert worker["image"] == "mirror.local/worker:1.1.0"
    assert worker["env"] == [{"name": "QUEUE", "value": "fast"}]


def test_env_vars_replace_the_charts_in_place_and_add_new_ones(demo: tuple[Path, DriverSpec]) -> None:
    root, spec = demo
    configuration = DeploymentConfiguration(env={"server": {"LEVEL": "debug", "FEATURE_X": "on"}})

    manifests = render_deployment(root, spec, "shop", "default", "1.0.0", configuration)

    containers = _containers(_workload(manifests, "Deployment", "shop-server"))
    assert containers["server"]["env"] == [
        {"name": "MODE", "value": "normal"},
        {"name": "LEVEL", "value": "debug"},
        {"name": "FEATURE_X", "value": "on"},
    ]
    assert "env" not in containers["sidecar"]


def test_unknown_component_in_the_configuration_is_named(demo: tuple[Path, DriverSpec]) -> None:
    root, spec = demo
    configuration = DeploymentConfiguration(images={"api": "x:1"}, env={"web": {"A": "1"}})

    with pytest.raises(ConfigurationError) as raised:
        render_deployment(root, spec, "shop", "default", "1.0.0", configuration)

    assert raised.value.problems == [
        'images.api: "api" is not a component of driver demo; use server or worker.',
        'env.web: "web" is not a component of driver demo; use server or worker.',
    ]


@pytest.mark.parametrize(
    ("configuration", "message"),
    [
        ({"images": {"server": "shop:{{ .Values.tag }}"}}, "uses a template other than {{ app.version }}"),
        ({"images": {"server": "shop: 1"}}, "is not an image reference"),
        # Taken before, stored and shown, and only failed in the cluster.
        ({"images": {"server": "postgres://u:secret@db/shop"}}, "is not an image reference"),
        ({"images": {"server": "Shop/Server:1"}}, "is not an image reference"),
        ({"images": {"server": "shop:"}}, "is not an image reference"),
        ({"env": {"server": {"1BAD": "x"}}}, '"1BAD" is not an env var name'),
        ({"replicas": 2}, "Extra inputs are not permitted"),
    ],
)
def test_configuration_is_checked(configuration: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}").replace(".", r"\.")):
        DeploymentConfiguration.model_validate(configuration)


@pytest.mark.parametrize(
    "image",
    [
        "nginx",
        "registry.local:5000/shop/server:{{ app.version }}-debug",
        "ghcr.io/org/app:v1.2.3_rc1",
        "[::1]:5000/shop:1",
        "docker.io/library/nginx@sha256:" + "a" * 64,
        "quay.io/org/app:{{ app.version }}@sha256:" + "0" * 64,
    ],
)
def test_every_form_of_image_reference_is_taken(image: str) -> None:
    assert DeploymentConfiguration.model_validate({"images": {"server": image}}).images == {"server": image}


def test_chart_that_fails_shows_helms_message(make_driver: MakeDriver) -> None:
    root = make_driver(SPEC, actions=None, template='{{ fail "set .Values.database" }}\n')

    with pytest.raises(
        RenderError,
        match=r"execution error at \(demo/templates/workloads.yaml:1:3\): "
        r"set \.Values\.database",
    ):
        render_deployment(root, load_driver_spec(SPEC), "shop", "default", "1.0.0", DeploymentConfiguration())


def test_override_of_a_component_the_values_do_not_render_is_an_error(make_driver: MakeDriver) -> None:
    template = (
        "{{ if .Values.worker }}"
        + (Path(__file__).parent / "conftest.py")
        .read_text()
        .split('CHART_TEMPLATE = """\\\n')[1]
        .split('"""')[0]
        + "{{ end }}"
    )
    root = make_driver(SPEC, actions=None, template=template)
    configuration = DeploymentConfiguration(images={"server": "x:1"})

    with pytest.raises(RenderError, match='rendered no Deployment "shop-server" with these values'):
        render_deployment(root, load_driver_spec(SPEC), "shop", "default", "1.0.0", configuration)


def test_invalid_release_name_is_refused(demo: tuple[Path, DriverSpec]) -> None:
    root, spec = demo
    with pytest.raises(RenderError, match='"Shop_1" is not a valid release name'):
        render_deployment(root, spec, "Shop_1", "default", "1.0.0", DeploymentConfiguration())


def test_install_chart_renders_exactly_the_deployments_manifests(
    demo: tuple[Path, DriverSpec], tmp_path: Path
) -> None:
    root, spec = demo
    configuration = DeploymentConfiguration(
        values={"replicas": 2},
        images={"server": "registry.local:5000/demo/server:{{ app.version }}"},
        # Helm braces in a value are the user's text: the install chart never renders them again.
        env={"server": {"LEVEL": "debug", "GREETING": "{{ .Release.Name }} says hi"}},
    )
    expected = render_deployment(root, spec, "shop", "team-a", "2.0.0", configuration)
    containers = _workload(expected, "Deployment", "shop-server")["spec"]["template"]["spec"]["containers"]
    assert {"name": "GREETING", "value": "{{ .Release.Name }} says hi"} in [
        variable for container in containers for variable in container.get("env", [])
    ]

    install = prepare_install_chart(root, spec, "shop", "team-a", "2.0.0", configuration, checksum_key=KEY)

    with helm.Chart.load(install.write(tmp_path / "install")) as chart:
        assert chart.metadata["appVersion"] == "2.0.0"
        assert chart.metadata["name"] == "demo"
        rendered = chart.render(install.values, name="shop", namespace="team-a")
    documents = [d for text in rendered.values() for d in yaml.safe_load_all(text) if d]
    assert _as_shown(documents, install.digest) == expected
    assert install.values == {"replicas": 2}


def test_example_driver_renders_with_an_image_override_at_the_target_version() -> None:
    spec = load_driver_spec((EXAMPLE_DRIVER / "driver.styrmin.yml").read_text())
    configuration = DeploymentConfiguration(
        images={"server": "registry.local:5000/shop/server:{{ app.version }}"}
    )
    manifests = render_deployment(EXAMPLE_DRIVER, spec, "shop", "default", "2.0.0", configuration)

    server = _workload(manifests, "Deployment", "shop-server")
    assert [c["image"] for c in server["spec"]["template"]["spec"]["containers"]] == [
        "example.com/shop/log-shipper:1.0.0",
        "registry.local:5000/shop/server:2.0.0",
    ]
    worker = _workload(manifests, "Deployment", "shop-task-worker")
    assert (
        worker["spec"]["template"]["spec"]["containers"][0]["image"] == "example.com/shop/task-worker:2.0.0"
    )


HOOK = """
---
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-seed
  annotations:
    helm.sh/hook: post-install
spec:
  template:
    spec:
      containers: [{name: seed, image: example.com/demo/seed:1}]
"""

EMPTY_KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n"


def test_helm_installs_the_install_chart_with_hooks_kept_apart(
    make_driver: MakeDriver, tmp_path: Path
) -> None:
    root = make_driver(SPEC, actions=None, template=CHART_TEMPLATE + HOOK)
    configuration = DeploymentConfiguration(
        images={"server": "registry.local:5000/demo/server:{{ app.version }}"}
    )
    install = prepare_install_chart(
        root,
        load_driver_spec(SPEC),
        "shop",
        "team-a",
        "2.0.0",
        configuration,
        checksum_key=KEY,
    )

    with helm.Config(
        storage_driver="memory", namespace="team-a", kubeconfig_content=EMPTY_KUBECONFIG
    ) as config:
        release = config.install(
            str(install.write(tmp_path / "install")),
            "shop",
            install.values,
            dry_run="client",
            namespace="team-a",
        )

    assert (release["chart_name"], release["chart_version"], release["app_version"]) == (
        "demo",
        "0.1.0",
        "2.0.0",
    )
    assert "image: registry.local:5000/demo/server:2.0.0" in release["manifest"]
    assert "shop-seed" not in release["manifest"]  # a hook, which Helm runs apart from the manifest


def test_secret_env_vars_reach_the_container_from_the_releases_secret_only(
    demo: tuple[Path, DriverSpec], tmp_path: Path
) -> None:
    root, spec = demo
    env = {
        "server": {
            "API_TOKEN": "tok-abcdef123",
            "DATABASE": "postgres://shop:s3cr3t-pw@db/shop",
            "LEVEL": "debug",
        }
    }
    configuration = DeploymentConfiguration(env=env)

    manifests = render_deployment(root, spec, "shop", "default", "1.0.0", configuration, checksum_key=KEY)

    secret = _workload(manifests, "Secret", "shop-styrmin-env")
    assert manifests[0] is secret and secret["type"] == "Opaque"
    assert {key: base64.b64decode(value).decode() for key, value in secret["data"].items()} == {
        "server.API_TOKEN": "tok-abcdef123",
        "server.DATABASE": "postgres://shop:s3cr3t-pw@db/shop",
        CHECKSUM_KEY_ENTRY: KEY.hex(),
    }
    server = _workload(manifests, "Deployment", "shop-server")
    assert _containers(server)["server"]["env"] == [
        {"name": "MODE", "value": "normal"},
        {"name": "LEVEL", "value": "debug"},
        {
            "name": "API_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "shop-styrmin-env", "key": "server.API_TOKEN"}},
        },
        {
            "name": "DATABASE",
            "valueFrom": {"secretKeyRef": {"name": "shop-styrmin-env", "key": "server.DATABASE"}},
        },
    ]
    workloads = yaml.safe_dump([m for m in manifests if m["kind"] != "Secret"])
    assert "tok-abcdef123" not in workloads and "s3cr3t-pw" not in workloads
    # A new secret value changes the pod template, so that the workload rolls out with it.
    rotated = DeploymentConfiguration(env={"server": {**env["server"], "API_TOKEN": "tok-rotated"}})
    again = render_deployment(root, spec, "shop", "default", "1.0.0", rotated, checksum_key=KEY)
    template = server["spec"]["template"]
    assert _workload(again, "Deployment", "shop-server")["spec"]["template"] != template
    # The chart the agent installs carries the Secret with the workloads.
    install = prepare_install_chart(root, spec, "shop", "default", "1.0.0", configuration, checksum_key=KEY)
    with helm.Chart.load(install.write(tmp_path / "install")) as chart:
        rendered = chart.render(install.values, name="shop", namespace="default")
    documents = [d for text in rendered.values() for d in yaml.safe_load_all(text) if d]
    assert _as_shown(documents, install.digest) == manifests


def _secret_env_checksum(root: Path, spec: DriverSpec, env: dict[str, str], key: bytes | None) -> str:
    manifests = render_deployment(
        root, spec, "shop", "default", "1.0.0", DeploymentConfiguration(env={"server": env}), checksum_key=key
    )
    template = _workload(manifests, "Deployment", "shop-server")["spec"]["template"]
    checksum: str = template["metadata"]["annotations"][SECRET_CHECKSUM_ANNOTATION]
    return checksum


def test_the_secret_env_checksum_is_keyed_so_a_workload_reader_cannot_test_guesses(
    demo: tuple[Path, DriverSpec],
) -> None:
    root, spec = demo
    env = {"API_TOKEN": "hunter2", "LEVEL": "debug"}
    checksum = _secret_env_checksum(root, spec, env, KEY)

    assert _secret_env_checksum(root, spec, env, KEY) == checksum
    assert _secret_env_checksum(root, spec, env, bytes(32)) != checksum
    assert _secret_env_checksum(root, spec, env, None) != checksum  # a key of the render's own
    # Not the plain digest of the values, which anyone who reads the workload could compute for
    # each guess of the password.
    secret = sorted({"API_TOKEN": "hunter2"}.items())
    assert checksum != hashlib.sha256(json.dumps(secret).encode()).hexdigest()[:16]
    assert checksum == hmac.new(KEY, json.dumps(secret).encode(), hashlib.sha256).hexdigest()[:16]


def test_a_changed_secret_value_changes_the_checksum_and_an_unchanged_one_keeps_it(
    demo: tuple[Path, DriverSpec],
) -> None:
    root, spec = demo
    checksum = _secret_env_checksum(root, spec, {"API_TOKEN": "hunter2", "LEVEL": "debug"}, KEY)

    # Another plain env var changes the container, not the checksum of the secret ones.
    assert _secret_env_checksum(root, spec, {"API_TOKEN": "hunter2", "LEVEL": "info"}, KEY) == checksum
    assert _secret_env_checksum(root, spec, {"API_TOKEN": "hunter3", "LEVEL": "debug"}, KEY) != checksum
    assert _secret_env_checksum(root, spec, {"API_TOKEN": "hunter2", "DB_PASSWORD": "x"}, KEY) != checksum


def test_stopped_components_render_at_zero_replicas_and_every_component_keeps_its_configured_ones() -> None:
    spec = load_driver_spec((EXAMPLE_DRIVER / "driver.styrmin.yml").read_text())
    configuration = DeploymentConfiguration(values={"taskWorker": {"replicas": 2}})
    install = prepare_install_chart(
        EXAMPLE_DRIVER,
        spec,
        "shop",
        "default",
        "1.0.0",
        configuration,
        stopped_components=["task-worker"],
        checksum_key=KEY,
    )
    rendered = list(install.manifests)
    worker = _workload(rendered, "Deployment", "shop-task-worker")
    server = _workload(rendered, "Deployment", "shop-server")
    assert worker["spec"]["replicas"] == 0
    assert worker["metadata"]["annotations"][REPLICAS_ANNOTATION] == "2"
    assert server["metadata"]["annotations"][REPLICAS_ANNOTATION] == str(server["spec"].get("replicas", 1))
    shown = render_deployment(
        EXAMPLE_DRIVER, spec, "shop", "default", "1.0.0", configuration, stopped_components=["task-worker"]
    )
    assert _workload(_as_shown(rendered, install.digest), "Deployment", "shop-task-worker") == _workload(
        shown, "Deployment", "shop-task-worker"
    )


def test_the_release_digest_is_the_same_for_a_stop_or_start_and_changes_with_anything_else() -> None:
    """A stop or start renders the release digest the last apply recorded (the agent may then set
    the replicas in place); any other change to the release renders another one."""
    spec = load_driver_spec((EXAMPLE_DRIVER / "driver.styrmin.yml").read_text())

    def digest(version: str, values: dict[str, Any], stopped: list[str]) -> str:
        install = prepare_install_chart(
            EXAMPLE_DRIVER,
            spec,
            "shop",
            "default",
            version,
            DeploymentConfiguration(values=values),
            stopped_components=stopped,
            checksum_key=KEY,
        )
        assert [w["metadata"]["name"] for w in install.workloads] == ["shop-server", "shop-task-worker"]
        return install.digest

    running = digest("1.0.0", {}, [])
    assert digest("1.0.0", {}, ["task-worker"]) == running
    assert digest("1.0.0", {}, ["task-worker", "server"]) == running
    assert digest("1.1.0", {}, ["task-worker"]) != running
    assert digest("1.0.0", {"taskWorker": {"replicas": 2}}, []) != running


def test_an_output_read_again_gives_objects_of_its_own_that_match_the_first(
    demo: tuple[Path, DriverSpec],
) -> None:
    # The agent renders a chart in its own process for a stop, an upgrade and a start: the objects of
    # an output it read before are a copy it may change without changing the next read's.
    root, _ = demo
    with load_chart(root / "chart", "1.0.0") as chart:
        first = render_loaded(chart, "shop", "default", {})
        untouched = copy.deepcopy(first)
        first[0]["metadata"]["name"] = "changed"
        first.append({"kind": "Extra"})
        second = render_loaded(chart, "shop", "default", {})
        other_release = render_loaded(chart, "other", "default", {})

    assert second == untouched
    assert other_release != untouched


def test_invalid_yaml_is_refused_each_time_it_is_rendered(make_driver: MakeDriver) -> None:
    root = make_driver(SPEC, actions=None, template="kind: [unclosed\n")

    with load_chart(root / "chart", "1.0.0") as chart:
        for _ in range(2):
            with pytest.raises(RenderError, match=r"workloads\.yaml renders invalid YAML"):
                render_loaded(chart, "shop", "default", {})


def test_an_output_past_what_is_kept_parsed_still_reads_whole(make_driver: MakeDriver) -> None:
    # 600 KiB of output, past the size the agent keeps parsed, reads the same each time.
    template = "{{- range $i := until 300 }}\n---\nkind: ConfigMap\nmetadata:\n  name: big-{{ $i }}\n"
    template += 'data:\n  blob: {{ repeat 2000 "x" | quote }}\n{{- end }}\n'
    root = make_driver(SPEC, actions=None, template=template)

    with load_chart(root / "chart", "1.0.0") as chart:
        first = render_loaded(chart, "shop", "default", {})
        first[0]["data"]["blob"] = "changed"
        second = render_loaded(chart, "shop", "default", {})

    assert len(second) == 300
    assert second[0]["data"]["blob"] == "x" * 2000


def _server_image(install: InstallChart) -> str:
    server = next(w for w in install.workloads if w["metadata"]["name"] == "shop-server")
    containers = server["spec"]["template"]["spec"]["containers"]
    return str(next(c for c in containers if c["name"] == "server")["image"])


def test_a_chart_rendered_again_is_the_same_and_a_chart_changed_in_place_renders_its_change(
    demo: tuple[Path, DriverSpec],
) -> None:
    """The agent keeps loaded charts for the next render (a stop, then a start): what it renders
    again must be what a fresh load renders, at each version, and never a chart's older files."""
    root, spec = demo

    def install(version: str) -> InstallChart:
        return prepare_install_chart(
            root,
            spec,
            "shop",
            "team-a",
            version,
            DeploymentConfiguration(),
            checksum_key=KEY,
        )

    first, again, other = install("2.0.0"), install("2.0.0"), install("3.0.0")
    assert again.digest == first.digest and _server_image(again) == "example.com/demo/server:2.0.0"
    assert _server_image(other) == "example.com/demo/server:3.0.0"
    template = root / "chart" / "templates" / "workloads.yaml"
    template.write_text(template.read_text().replace("example.com/demo/server:", "example.com/demo/api:"))
    changed = install("2.0.0")
    assert _server_image(changed) == "example.com/demo/api:2.0.0" and changed.digest != first.digest

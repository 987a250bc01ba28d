"""Drivers written into temporary folders, and the example driver's location."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

EXAMPLE_DRIVER = Path(__file__).resolve().parents[2] / "examples" / "drivers" / "shop"

CHART_YAML = """\
apiVersion: v2
name: demo
version: 0.1.0
appVersion: "0.0.1"
"""

# A server Deployment with a sidecar before its component container, and a worker StatefulSet.
CHART_TEMPLATE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-server
spec:
  replicas: {{ .Values.replicas | default 1 }}
  template:
    spec:
      initContainers:
        - name: wait
          image: example.com/demo/wait:1
      containers:
        - name: sidecar
          image: example.com/demo/sidecar:1
        - name: server
          image: "example.com/demo/server:{{ .Chart.AppVersion }}"
          env:
            - name: MODE
              value: normal
            - name: LEVEL
              value: info
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .Release.Name }}-worker
spec:
  template:
    spec:
      containers:
        - name: worker
          image: "example.com/demo/worker:{{ .Chart.AppVersion }}"
"""

ACTIONS = """\
from prefect import flow


@flow
async def pre_setup(context) -> None:
    pass


@flow
async def upgrade(context, target_version: str) -> None:
    pass
"""

# The seed's example, with the rest of a spec around it.
SPEC = """\
apiVersion: styrmin.io/v1
kind: Driver
metadata:
  name: demo
  version: 1.0.0
spec:
  application:
    name: Demo
    defaultVersion: "1.0.0"
  components:
    - name: server
      workload:
        kind: Deployment
        name: "{{ .Release.Name }}-server"
      container: server
    - name: worker
      workload:
        kind: StatefulSet
        name: "{{ .Release.Name }}-worker"
  actions:
    - name: pre_setup
      hook: setup
      mode: pre
      location: "actions.py::pre_setup"
    - name: upgrade
      hook: upgrade
      mode: core
      location: "actions.py::upgrade"
      description: "Stop workers, run migration, restart, verify"
"""

MakeDriver = Callable[..., Path]


def write_driver(
    root: Path,
    spec: str = SPEC,
    actions: str | None = ACTIONS,
    template: str | None = CHART_TEMPLATE,
    files: dict[str, str] | None = None,
) -> Path:
    """Write a driver (spec, actions.py, chart) into ``root``; each part may be replaced."""
    (root / "chart" / "templates").mkdir(parents=True)
    (root / "driver.styrmin.yml").write_text(textwrap.dedent(spec))
    (root / "chart" / "Chart.yaml").write_text(CHART_YAML)
    if template is not None:
        (root / "chart" / "templates" / "workloads.yaml").write_text(template)
    if actions is not None:
        (root / "actions.py").write_text(actions)
    for name, text in (files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def make_driver(tmp_path: Path) -> MakeDriver:
    """Write drivers into fresh folders under ``tmp_path``, as :func:`write_driver` does."""
    counter = iter(range(1000))

    def make(*args: object, **kwargs: object) -> Path:
        return write_driver(tmp_path / f"driver-{next(counter)}", *args, **kwargs)  # type: ignore[arg-type]

    return make

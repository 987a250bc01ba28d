"""A component's images, as the get_component_images primitive reads them (seed: "Reading a component's images")."""

from __future__ import annotations

from typing import Any

import pytest

from styrmin_backend.drivers import (
    ComponentNotRendered,
    DeploymentConfiguration,
    component_images,
    load_driver_spec,
)
from tests.drivers.conftest import SPEC

POD_TEMPLATE: dict[str, Any] = {
    "spec": {
        "initContainers": [{"name": "wait", "image": "example.com/wait:1"}],
        "containers": [
            {"name": "sidecar", "image": "example.com/sidecar:1"},
            {"name": "metrics", "image": "example.com/metrics:2"},
            {"name": "server", "image": "registry.local:5000/demo/server:1.0@sha256:" + "c" * 64},
        ],
    }
}

spec = load_driver_spec(SPEC)


def test_component_container_first_then_others_in_pod_order_without_init_containers() -> None:
    images = component_images(spec, "server", POD_TEMPLATE, DeploymentConfiguration(), "2.0.0")
    assert images == [
        "registry.local:5000/demo/server:1.0@sha256:" + "c" * 64,
        "example.com/sidecar:1",
        "example.com/metrics:2",
    ]


def test_override_is_the_first_image_with_the_target_version() -> None:
    configuration = DeploymentConfiguration(
        images={"server": "registry.local:5000/mine/server:{{ app.version }}"}
    )
    images = component_images(spec, "server", POD_TEMPLATE, configuration, "2.0.0")
    assert images == [
        "registry.local:5000/mine/server:2.0.0",
        "example.com/sidecar:1",
        "example.com/metrics:2",
    ]


def test_without_a_declared_container_the_pod_order_is_kept() -> None:
    pod = {"spec": {"containers": [{"name": "worker", "image": "w:1"}, {"name": "helper", "image": "h:1"}]}}
    assert component_images(spec, "worker", pod, DeploymentConfiguration(), "1.0.0") == ["w:1", "h:1"]
    configuration = DeploymentConfiguration(images={"worker": "w:{{ app.version }}"})
    assert component_images(spec, "worker", pod, configuration, "3.0.0") == ["w:3.0.0", "h:1"]


def test_missing_component_container_or_component_is_an_error() -> None:
    pod = {"spec": {"containers": [{"name": "other", "image": "o:1"}]}}
    with pytest.raises(ComponentNotRendered, match='has no container "server"; its containers are: other'):
        component_images(spec, "server", pod, DeploymentConfiguration(), "1.0.0")
    with pytest.raises(KeyError):
        component_images(spec, "api", pod, DeploymentConfiguration(), "1.0.0")

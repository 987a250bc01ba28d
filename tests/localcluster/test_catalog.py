"""The image catalog: how image references match entries, and how entries are read."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from styrmin_localcluster import CatalogError, ImageCatalog
from styrmin_localcluster.catalog import split_image

from .conftest import CATALOG


def _catalog(tmp_path: Path, body: str, name: str = "images.yaml") -> ImageCatalog:
    (tmp_path / name).write_text("apiVersion: localcluster.styrmin.io/v1\nkind: ImageCatalog\n" + body)
    return ImageCatalog([tmp_path])


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("nginx", (None, "nginx")),
        ("nginx:1.27", (None, "nginx")),
        ("library/nginx@sha256:abc", (None, "library/nginx")),
        ("example.com/shop/server:1.0", ("example.com", "shop/server")),
        ("registry.local:5000/shop/server:1.0@sha256:abc", ("registry.local:5000", "shop/server")),
        ("localhost/app", ("localhost", "app")),
    ],
)
def test_image_references_split_into_registry_and_repository(
    ref: str, expected: tuple[str | None, str]
) -> None:
    assert split_image(ref) == expected


def test_a_name_with_a_registry_matches_only_that_registry() -> None:
    catalog = ImageCatalog([CATALOG])
    assert catalog.resolve("registry.local:5000/shop/server:2.0@sha256:0123") is not None
    assert catalog.resolve("other.registry/shop/server:2.0") is None
    assert catalog.resolve("shop/server:2.0") is None


def test_a_name_without_a_registry_matches_any_registry() -> None:
    catalog = ImageCatalog([CATALOG])
    for ref in (
        "shop/worker",
        "shop/worker:3",
        "registry.local:5000/shop/worker:1.0",
        "ghcr.io/shop/worker@sha256:1",
    ):
        image = catalog.resolve(ref)
        assert image is not None and image.name == "shop/worker", ref
    assert catalog.resolve("docker.io/library/nginx:1.27").run == "placeholder"
    assert catalog.resolve("nginx").run == "placeholder"


def test_entrypoints_expand_python_and_resolve_scripts_next_to_the_catalog() -> None:
    image = ImageCatalog([CATALOG]).resolve("registry.local:5000/shop/server:1")
    assert image.entrypoint == (sys.executable, str((CATALOG / "server.py").resolve()))
    assert image.cmd == ("--greeting", "hello")
    assert image.run == "process" and image.work_dir == CATALOG.resolve()


def test_catalog_files_added_later_are_picked_up(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, "images: []\n")
    assert catalog.resolve("late/app") is None
    (tmp_path / "more.yaml").write_text(
        "apiVersion: localcluster.styrmin.io/v1\nkind: ImageCatalog\n"
        'images:\n  - name: late/app\n    entrypoint: ["true"]\n'
    )
    assert catalog.resolve("late/app:1") is not None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("images:\n  - entrypoint: [x]\n", "images[0].name: required"),
        (
            "images:\n  - name: app:1.0\n",
            'images[0].name: "app:1.0" must be a repository without tag or digest',
        ),
        ("images:\n  - name: app\n    run: daemon\n", 'images[0].run: "daemon" is not a run mode'),
        (
            "images:\n  - name: app\n    entrypoint: {a: b}\n",
            "images[0].entrypoint: must be a list of strings",
        ),
        ("images: nope\n", "images must be a list"),
    ],
)
def test_broken_catalog_entries_name_the_file_and_field(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(CatalogError) as raised:
        _catalog(tmp_path, body)
    assert message in str(raised.value) and "images.yaml" in str(raised.value)


def test_a_file_of_another_kind_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("apiVersion: v1\nkind: ConfigMap\n")
    with pytest.raises(CatalogError) as raised:
        ImageCatalog([tmp_path])
    assert "apiVersion must be localcluster.styrmin.io/v1 and kind ImageCatalog" in str(raised.value)

"""The image catalog: which local program a container image runs, read from YAML files in folders.

A catalog is a folder; every `*.yaml` file in it is an ImageCatalog (format in docs/localcluster.md).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger("styrmin_localcluster.catalog")

API_VERSION = "localcluster.styrmin.io/v1"
KIND = "ImageCatalog"
RUN_MODES = ("process", "placeholder")


class CatalogError(Exception):
    """A catalog file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class CatalogImage:
    """One catalog entry: an image repository and what running it means on this machine."""

    name: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    run: str
    source: Path
    env: dict[str, str] = field(default_factory=dict)
    working_dir: Path | None = None

    @property
    def folder(self) -> Path:
        return self.source.parent

    @property
    def work_dir(self) -> Path:
        return self.working_dir or self.folder


def split_image(ref: str) -> tuple[str | None, str]:
    """(registry host or None, repository path) of an image reference, tag and digest removed."""
    name = ref.split("@", 1)[0]
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > last_slash:
        name = name[:colon]
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return None, name


def _expand(value: str, folder: Path) -> str:
    return value.replace("{python}", sys.executable).replace("{dir}", str(folder))


def _resolve_paths(values: list[str], folder: Path) -> tuple[str, ...]:
    """Expand placeholders; a relative argument naming a file in the catalog's folder becomes absolute."""
    resolved = []
    for value in values:
        value = _expand(value, folder)
        if value and not value.startswith("-") and not os.path.isabs(value) and (folder / value).exists():
            value = str((folder / value).resolve())
        resolved.append(value)
    return tuple(resolved)


def _string_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise CatalogError(f"{where}: must be a list of strings")
    return [str(v) for v in value]


def load_catalog_file(path: Path) -> list[CatalogImage]:
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError(f"{path}: cannot be read as YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise CatalogError(f"{path}: must be a YAML mapping with apiVersion {API_VERSION} and kind {KIND}")
    if document.get("apiVersion") != API_VERSION or document.get("kind") != KIND:
        raise CatalogError(
            f"{path}: apiVersion must be {API_VERSION} and kind {KIND} "
            f"(found {document.get('apiVersion')!r}, {document.get('kind')!r})"
        )
    images = document.get("images") or []
    if not isinstance(images, list):
        raise CatalogError(f"{path}: images must be a list")
    folder = path.parent.resolve()
    result = []
    for index, entry in enumerate(images):
        where = f"{path}, images[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise CatalogError(f"{where}.name: required: the image repository, e.g. example.com/shop/server")
        name = entry["name"]
        if "@" in name or ":" in name.rsplit("/", 1)[-1]:
            raise CatalogError(f'{where}.name: "{name}" must be a repository without tag or digest')
        run = entry.get("run", "process")
        if run not in RUN_MODES:
            raise CatalogError(f'{where}.run: "{run}" is not a run mode; use process or placeholder')
        entrypoint = _string_list(entry.get("entrypoint"), f"{where}.entrypoint")
        cmd = _string_list(entry.get("cmd"), f"{where}.cmd")
        env = entry.get("env") or {}
        if not isinstance(env, dict):
            raise CatalogError(f"{where}.env: must be a mapping of names to values")
        working_dir = entry.get("workingDir")
        result.append(
            CatalogImage(
                name=name,
                entrypoint=_resolve_paths(entrypoint, folder),
                cmd=_resolve_paths(cmd, folder),
                run=run,
                source=path.resolve(),
                env={str(k): _expand(str(v), folder) for k, v in env.items()},
                working_dir=(folder / _expand(str(working_dir), folder)).resolve() if working_dir else None,
            )
        )
    return result


class ImageCatalog:
    """Resolves image references through the catalog folders, re-reading them when their files change."""

    def __init__(self, folders: list[Path]) -> None:
        self.folders = [Path(f) for f in folders]
        self._signature: tuple[tuple[str, float], ...] = ()
        self._images: list[CatalogImage] = []
        self.reload(strict=True)

    def _files(self) -> list[Path]:
        files: list[Path] = []
        for folder in self.folders:
            if folder.is_dir():
                files.extend(sorted(folder.glob("*.yaml")))
        return files

    def _current_signature(self) -> tuple[tuple[str, float], ...]:
        signature = []
        for path in self._files():
            try:
                signature.append((str(path), path.stat().st_mtime))
            except OSError:
                continue
        return tuple(signature)

    def reload(self, strict: bool = False) -> None:
        """Read every catalog file; with strict, a broken file raises, otherwise it is logged and skipped."""
        images: list[CatalogImage] = []
        for path in self._files():
            try:
                images.extend(load_catalog_file(path))
            except CatalogError as exc:
                if strict:
                    raise
                log.error("%s", exc)
        self._images = images
        self._signature = self._current_signature()

    def images(self) -> list[CatalogImage]:
        return list(self._images)

    def resolve(self, ref: str) -> CatalogImage | None:
        if self._current_signature() != self._signature:
            self.reload()
        host, repository = split_image(ref)
        full = f"{host}/{repository}" if host else repository
        for image in self._images:
            image_host, image_repository = split_image(image.name)
            if image_host is not None:
                if full == f"{image_host}/{image_repository}":
                    return image
            elif repository in (image_repository, f"library/{image_repository}"):
                return image
        return None

    def describe(self) -> str:
        return ", ".join(str(f) for f in self.folders) or "(no catalog folders)"

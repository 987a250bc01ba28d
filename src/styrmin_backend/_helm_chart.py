"""Loading and rendering a Helm chart, with its output bounded; also the process the server renders in.

Helm's Go code cannot be interrupted once a render started, and a chart's templates can loop long or
print gigabytes. So the server renders in a process of its own (``python -m
styrmin_backend._helm_chart``, request as JSON on stdin, answer as JSON on stdout), which limits its
own memory and is killed past the time limit; see ``drivers/render.py``. This module imports only
Helm and PyYAML so that the process starts fast.
"""

from __future__ import annotations

import functools
import json
import pickle
import resource
import sys
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from styrmin_backend.domain.limits import RENDER_MAX_MEMORY_BYTES, RENDER_MAX_NODES, RENDER_MAX_OUTPUT_BYTES
from styrmin_drivers._bounded_yaml import YamlTooLarge, load_all

if TYPE_CHECKING:
    import helm_python as helm


class RenderError(Exception):
    """The chart could not be rendered for a deployment; the message carries Helm's own."""


@contextmanager
def load_chart(chart_dir: Path, app_version: str) -> Iterator[helm.Chart]:
    """Load the chart in ``chart_dir`` with ``.Chart.AppVersion`` set to ``app_version``.

    Raises:
        RenderError: if there is no chart there, or Helm cannot load it; the message is Helm's.
    """
    with _load(chart_dir, app_version) as chart:
        yield chart


def _load(chart_dir: Path, app_version: str) -> helm.Chart:
    """The chart in ``chart_dir`` at ``app_version``, loaded; the caller closes it."""
    # Imported here: Helm's Go library holds about 70 MB once loaded, which a server process, whose
    # renders run in a process of their own, would otherwise keep for its whole life.
    import helm_python as helm

    if not (chart_dir / "Chart.yaml").is_file():
        raise RenderError(
            f"{chart_dir.name}/Chart.yaml is missing: there is no Helm chart in {chart_dir.name}/."
        )
    with tempfile.TemporaryDirectory(prefix="styrmin-chart-") as scratch:
        try:
            # Packaging with app_version is how Helm itself sets appVersion (helm package --app-version).
            archive = helm.package(chart_dir, destination=scratch, app_version=app_version)
            chart = helm.Chart.load(archive)
        except helm.HelmError as error:
            raise RenderError(f"Helm cannot load the chart: {error}") from None
    return chart


_LOADED_KEPT = 8
"""How many loaded charts the agent keeps (``load_chart_kept``): one per deployment it changes in a row."""

_loaded: OrderedDict[tuple[str, str, tuple[tuple[str, int, int], ...]], helm.Chart] = OrderedDict()
_loaded_lock = threading.Lock()


@contextmanager
def load_chart_kept(chart_dir: Path, app_version: str) -> Iterator[helm.Chart]:
    """``load_chart``, kept for the next render of the same chart files at the same app version.

    Loading packages the chart folder and reads the package back: about 4 ms, four times the render
    itself. A stop and a start render the chart the change before them loaded (same files, same
    version), so they load it no more. The files' sizes and times are part of the key: a chart
    changed in place is loaded again. A kept chart serves one render at a time (taken out while in
    use); the least recently used ones are closed past ``_LOADED_KEPT``.

    Raises:
        RenderError: as ``load_chart``.
    """
    key = (str(chart_dir.resolve()), app_version, _files_of(chart_dir))
    with _loaded_lock:
        chart = _loaded.pop(key, None)
    if chart is None:
        chart = _load(chart_dir, app_version)
    try:
        yield chart
    finally:
        _keep(key, chart)


def _keep(key: tuple[str, str, tuple[tuple[str, int, int], ...]], chart: helm.Chart) -> None:
    """Keep ``chart`` as the latest used, closing the ones no longer kept."""
    closing = []
    with _loaded_lock:
        extra = _loaded.pop(key, None)  # another render loaded it meanwhile: keep this one
        if extra is not None:
            closing.append(extra)
        _loaded[key] = chart
        while len(_loaded) > _LOADED_KEPT:
            closing.append(_loaded.popitem(last=False)[1])
    for unkept in closing:
        unkept.close()


def _files_of(chart_dir: Path) -> tuple[tuple[str, int, int], ...]:
    """Each file of the chart folder with its size and modification time (ns)."""
    found = []
    for path in sorted(chart_dir.rglob("*")):
        if path.is_file():
            stat = path.stat()
            found.append((str(path.relative_to(chart_dir)), stat.st_size, stat.st_mtime_ns))
    return tuple(found)


def render_loaded(
    chart: helm.Chart,
    release_name: str,
    namespace: str,
    values: dict[str, Any],
    helm_config: helm.Config | None = None,
    is_upgrade: bool = False,
) -> list[dict[str, Any]]:
    """The manifests the loaded chart renders, in template order.

    Raises:
        RenderError: if the release name is not valid, the chart does not render, or what it renders
            is past the limits or not Kubernetes objects.
    """
    import helm_python as helm

    try:
        helm.validate_release_name(release_name)
    except helm.HelmError as error:
        raise RenderError(f'"{release_name}" is not a valid release name: {error}') from None
    options: dict[str, Any] = {
        "name": release_name,
        "namespace": namespace,
        "is_install": not is_upgrade,
        "is_upgrade": is_upgrade,
    }
    try:
        if helm_config is not None:
            rendered = helm_config.render(chart, values, **options)
        else:
            rendered = chart.render(values, **options)
    except helm.HelmError as error:
        raise RenderError(str(error)) from None
    return parse_rendered(rendered)


_PARSED_KEPT = 16
"""How many of the last distinct outputs the agent keeps parsed (``parse_rendered``)."""
_PARSED_KEPT_UP_TO_BYTES = 512 * 1024
"""The largest output kept parsed: the kept ones hold at most 16 times this, text and objects."""


def parse_rendered(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """The Kubernetes objects in Helm's output, read with bounded work; a fresh copy each time.

    An output read before is not read again: a stop, an upgrade and a start each render the chart,
    and the start renders what the upgrade did, the stop what the last start did (only a stopped
    component's replicas differ, set after this). The bounded YAML reader is pure Python, most of a
    render's time; a copy of the kept objects costs a small part of it.

    Raises:
        RenderError: past ``RENDER_MAX_OUTPUT_BYTES`` or ``RENDER_MAX_NODES``, or for a template that
            renders invalid YAML or something other than Kubernetes objects.
    """
    size = sum(len(text) for text in rendered.values())
    if size > RENDER_MAX_OUTPUT_BYTES:
        raise RenderError(
            f"the chart renders {size / (1024 * 1024):.0f} MiB, more than the "
            f"{RENDER_MAX_OUTPUT_BYTES // (1024 * 1024)} MiB Styrmin applies; render less"
        )
    templates = tuple(sorted(rendered.items()))
    if size > _PARSED_KEPT_UP_TO_BYTES:
        return _parse_templates(templates)
    kept: list[dict[str, Any]] = pickle.loads(_parsed_kept(templates))  # noqa: S301 - pickled here
    return kept


@functools.lru_cache(maxsize=_PARSED_KEPT)
def _parsed_kept(templates: tuple[tuple[str, str], ...]) -> bytes:
    """The objects of ``templates``, pickled: each caller unpickles a copy of its own to change."""
    return pickle.dumps(_parse_templates(templates), protocol=pickle.HIGHEST_PROTOCOL)


def _parse_templates(templates: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    manifests: list[dict[str, Any]] = []
    budget = RENDER_MAX_NODES
    for template, text in templates:
        if template.endswith("NOTES.txt"):
            continue
        try:
            documents = list(load_all(text, budget))
        except YamlTooLarge as error:
            line = f", line {error.problem_mark.line + 1}" if error.problem_mark else ""
            raise RenderError(f"{template}{line} renders too much: {error.problem}") from None
        except (yaml.YAMLError, ValueError) as error:
            raise RenderError(f"{template} renders invalid YAML: {error}") from None
        for document in documents:
            if document is None:
                continue
            if not isinstance(document, dict) or "kind" not in document:
                raise RenderError(f"{template} renders a document that is not a Kubernetes object.")
            manifests.append(document)
        budget -= _count_values(documents)
    return manifests


def _count_values(data: Any) -> int:
    if isinstance(data, dict):
        return 1 + sum(_count_values(k) + _count_values(v) for k, v in data.items())
    if isinstance(data, list):
        return 1 + sum(_count_values(item) for item in data)
    return 1


def main() -> None:
    """Render one chart as the request on stdin says; answer ``{"manifests"}`` or ``{"error"}``."""
    resource.setrlimit(resource.RLIMIT_DATA, (RENDER_MAX_MEMORY_BYTES, RENDER_MAX_MEMORY_BYTES))
    request = json.load(sys.stdin)
    try:
        with load_chart(Path(request["chart_dir"]), request["app_version"]) as chart:
            manifests = render_loaded(chart, request["release_name"], request["namespace"], request["values"])
        answer: dict[str, Any] = {"manifests": manifests}
    except RenderError as error:
        answer = {"error": str(error)}
    except MemoryError:
        answer = {"error": _out_of_memory()}
    json.dump(answer, sys.stdout, default=str)


def _out_of_memory() -> str:
    return (
        f"rendering the chart needs more than {RENDER_MAX_MEMORY_BYTES // (1024 * 1024)} MiB of memory; "
        "render less"
    )


if __name__ == "__main__":
    main()

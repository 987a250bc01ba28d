"""Showing a preview in a terminal: refusal, steps, versions and configuration, images, the diff.

``--dry-run`` on `deployments create|upgrade|set|rollback` and on `apply` print this and record
nothing. Exit codes: 0 when the change would be accepted (or there is nothing to do), 1 when the
request would be refused (the message is the one the request would get).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from styrmin.cli._common import EXIT_FAILED
from styrmin.cli.output import OutputFormat, dump, emit, is_machine, make_console
from styrmin.cli.render import clean

if TYPE_CHECKING:
    from styrmin import Client
    from styrmin.models import Preview

DryRunOption = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Preview the change: its steps, the rendered diff, versions and configuration; record nothing.",
    ),
]

_CHANGE_STYLES = {"added": "green", "changed": "yellow", "removed": "red", "unchanged": "dim"}


def preview_text(shown: Preview) -> Text:
    """The preview as people read it."""
    text = Text()
    if shown.refusal is not None:
        text.append("Refused: ", style="bold red")
        text.append(clean(shown.refusal.message) + "\n")
    elif shown.nothing_to_do:
        text.append(f'Nothing to do: deployment "{shown.deployment}" already asks for this.\n', style="bold")
    if shown.versions_from is not None or shown.versions_to is not None:
        before, after = shown.versions_from, shown.versions_to
        text.append("Versions: ", style="bold")
        if before is not None:
            text.append(f"driver {before.driver_version}, app {before.app_version}")
        if after is not None and after != before:
            text.append(f"{' -> ' if before else ''}driver {after.driver_version}, app {after.app_version}")
        text.append("\n")
    for planned in shown.changes:
        text.append(f"\nChange: {planned.type} (revision {planned.revision})\n", style="bold")
        for number, step in enumerate(planned.steps, start=1):
            text.append(f"  {number}. {clean(step.name)}", style="bold")
            text.append(f": {clean(step.description)}\n")
            for action in step.actions:
                described = f": {clean(action.description)}" if action.description else ""
                text.append(f"       action {clean(action.name)}{described}\n")
        for skipped in planned.skipped:
            text.append(f"  not run: {skipped.hook} {skipped.mode}: {clean(skipped.reason)}\n", style="dim")
    if shown.configuration_from != shown.configuration_to and shown.configuration_to is not None:
        text.append("\nConfiguration from:\n", style="bold")
        text.append(_indented(dump(shown.configuration_from or {}, OutputFormat.YAML)))
        text.append("Configuration to:\n", style="bold")
        text.append(_indented(dump(shown.configuration_to, OutputFormat.YAML)))
    if shown.images:
        text.append(
            "\nImages (as get_component_images sees them, component container first):\n", style="bold"
        )
        for images in shown.images:
            now = ", ".join(images.after) or "-"
            if images.before and images.before != images.after:
                text.append(f"  {images.component}: {', '.join(images.before)} -> {now}\n")
            else:
                text.append(f"  {images.component}: {now}\n")
    if shown.render_error:
        text.append(f"\n{clean(shown.render_error)}\n", style="red")
    if shown.objects:
        since = f" (against revision {shown.baseline_revision})" if shown.baseline_revision else ""
        text.append(f"\nObjects{since}:\n", style="bold")
        for diff in shown.objects:
            text.append(f"  {diff.change:<9} ", style=_CHANGE_STYLES.get(diff.change, ""))
            text.append(f"{diff.kind}/{diff.name}\n")
        for diff in shown.objects:
            if diff.diff:
                text.append("\n")
                for line in diff.diff.splitlines():
                    style = "green" if line.startswith("+") else "red" if line.startswith("-") else ""
                    text.append(clean(line) + "\n", style=style)
                if diff.diff_truncated:
                    text.append("  [the diffs were cut here; see the API's preview for less at once]\n")
    for note in shown.notes:
        text.append(f"\n{clean(note)}\n", style="yellow")
    return text


def _indented(block: str) -> str:
    return "".join(f"  {line}\n" for line in block.splitlines())


def show_preview(client: Client, name: str, change: str, output: OutputFormat, **fields: Any) -> None:
    """Preview ``change`` of deployment ``name``, print it, and exit 1 when it would be refused."""
    shown = client.deployments.preview(name, change, **fields)
    if is_machine(output):
        emit(shown, output)
    else:
        make_console().print(preview_text(shown), soft_wrap=True)
    if shown.refusal is not None:
        raise typer.Exit(EXIT_FAILED)

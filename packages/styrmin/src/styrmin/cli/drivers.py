"""``styrminctl drivers``: validate (offline), push, list and show driver versions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from styrmin.cli._common import (
    EXIT_FAILED,
    PLAIN_HELP,
    GetOutputOption,
    ListOutputOption,
    OutputOption,
    UsageProblem,
    handle_errors,
    state,
)
from styrmin.cli.output import GetFormat, ListFormat, OutputFormat, emit, emit_names, is_machine, make_console
from styrmin.cli.render import clean, driver_detail, drivers_table, report_lines
from styrmin.errors import InvalidDriverError, ValidationError

if TYPE_CHECKING:
    from styrmin.models import DriverReport

app = typer.Typer(
    rich_markup_mode=PLAIN_HELP, help="Drivers: validate, push, list and show them.", no_args_is_help=True
)

PathArgument = Annotated[
    Path,
    typer.Argument(help="A driver folder (with driver.styrmin.yml) or a .tar.gz.", show_default=False),
]


def _local_report(path: Path) -> DriverReport:
    from styrmin.models import DriverReport
    from styrmin_drivers.validation import validate_driver

    return DriverReport.model_validate(validate_driver(path).model_dump(mode="json"))


@app.command()
@handle_errors
def validate(
    path: PathArgument,
    remote: Annotated[
        bool,
        typer.Option(
            "--remote",
            help="Validate on the server instead of on this machine (also renders the chart with Helm).",
        ),
    ] = False,
    output: OutputOption = OutputFormat.TEXT,
) -> None:
    """Check a driver without a server: list every problem (exit 1) or summarise it.

    On this machine the spec and the actions are checked; the chart is rendered (each component's
    workload found) only by the server: with --remote, or when the driver is pushed.
    """
    if remote:
        with state().client() as client:
            report = client.drivers.validate(path)
    else:
        report = _local_report(path)
    if is_machine(output):
        emit(report, output)
    else:
        console = make_console()
        for line in report_lines(report):
            console.print(Text(line), soft_wrap=True)
        if not remote and report.valid:
            console.print(
                Text(
                    "The chart was not rendered here (that needs Helm, on the server): "
                    "--remote checks it, as a push does."
                ),
                soft_wrap=True,
            )
    if not report.valid:
        raise typer.Exit(EXIT_FAILED)


def _invalid_driver(error: ValidationError) -> InvalidDriverError:
    """The server's refusal of a driver as an invalid driver (exit 1, code ``invalid_driver``).

    Every problem is listed under the message, so the message stops at the count of problems rather
    than repeating the first one.
    """
    message = error.message
    if error.errors:
        message = message.removesuffix(f"; the first: {error.errors[0]}")
        message += "" if message.endswith(".") else "."
    return InvalidDriverError(message, status=error.status, field=error.field, errors=error.errors)


@app.command()
@handle_errors
def push(path: PathArgument, output: OutputOption = OutputFormat.TEXT) -> None:
    """Push a driver version (a folder is packed first); pushing the same content again changes nothing."""
    with state().client() as client:
        try:
            pushed = client.drivers.push(path)
        except ValidationError as error:
            raise _invalid_driver(error) from None
    if is_machine(output):
        emit(pushed, output)
        return
    d = pushed.driver
    if pushed.created:
        line = f"Pushed {d.name}@{d.version} ({d.checksum})."
    else:
        line = (
            f"{d.name}@{d.version} is already stored with the same content ({d.checksum}); nothing changed."
        )
    make_console().print(Text(clean(line)), soft_wrap=True)


@app.command("list")
@handle_errors
def list_drivers(
    driver: Annotated[str | None, typer.Option("--driver", help="Only this driver's versions.")] = None,
    output: ListOutputOption = ListFormat.TEXT,
) -> None:
    """List the stored driver versions."""
    with state().client() as client:
        found = client.drivers.list(driver)
    if is_machine(output):
        emit(found, output)
    elif output == ListFormat.NAME:
        emit_names("driver", [f"{d.name}@{d.version}" for d in found])
    elif not found:
        make_console().print("No drivers yet; push one with: styrminctl drivers push PATH", soft_wrap=True)
    else:
        make_console().print(drivers_table(found, wide=output == ListFormat.WIDE))


@app.command()
@handle_errors
def get(
    name: Annotated[str, typer.Argument(help="The driver's name, or NAME@VERSION.", show_default=False)],
    version: Annotated[str | None, typer.Argument(help="The version.", show_default=False)] = None,
    output: GetOutputOption = GetFormat.TEXT,
) -> None:
    """Show a driver version: its application, components and actions."""
    if version is None:
        name, _, version = name.partition("@")
        if not version:
            raise UsageProblem("Give the version: styrminctl drivers get NAME VERSION (or NAME@VERSION).")
    with state().client() as client:
        driver = client.drivers.get(name, version)
    if output == GetFormat.NAME:
        emit_names("driver", [f"{driver.name}@{driver.version}"])
    elif is_machine(output):
        emit(driver, output)
    else:
        make_console().print(driver_detail(driver), soft_wrap=True)

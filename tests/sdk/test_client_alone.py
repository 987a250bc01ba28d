"""The client installs and works without the server: its wheels pull in only the client's dependencies.

The import contracts (``uv run lint-imports``) refuse a static import of the server from the SDK;
these tests also catch an import made at run time, and a dependency the client's wheel declares.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.drivers import EXAMPLE_DRIVER

ROOT = Path(__file__).resolve().parents[2]

CLIENT_DISTRIBUTIONS_ALLOWED = {
    "styrmin",
    "styrmin-drivers",
    # httpx and its own
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "sniffio",
    "idna",
    "certifi",
    # what Typer itself needs (Typer 0.29 in the lock)
    "annotated-doc",
    # pydantic and its own
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-extensions",
    "typing-inspection",
    # Typer, Rich and their own
    "typer",
    "click",
    "shellingham",
    "rich",
    "markdown-it-py",
    "mdurl",
    "pygments",
    "pyyaml",
}

NO_SERVER = textwrap.dedent(
    """
    import importlib.abc, sys

    class NoServer(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("styrmin_backend", "styrmin_localcluster", "fastapi", "prefect"):
                raise ImportError(f"the client imported {name}, which is the server's")
            return None

    sys.meta_path.insert(0, NoServer())
    """
)


def _run_without_server(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_SERVER + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_styrminctl_packs_and_validates_a_driver_without_importing_the_server() -> None:
    result = _run_without_server(
        """
        import sys
        from styrmin import driver_archive
        assert driver_archive(sys.argv[1])[:2] == b"\\x1f\\x8b"  # a .tar.gz
        from typer.testing import CliRunner
        from styrmin.cli import app
        runner = CliRunner()
        for args in (["--help"], ["drivers", "validate", sys.argv[1]], ["deployments", "--help"]):
            outcome = runner.invoke(app, args)
            assert outcome.exit_code == 0, (args, outcome.output, outcome.exception)
        print("ok")
        """,
        str(EXAMPLE_DRIVER),
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert result.stdout.strip().endswith("ok")


@pytest.mark.slow
def test_the_client_wheels_install_alone_into_an_empty_environment(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    for package in ("styrmin", "styrmin-drivers"):
        subprocess.run(
            ["uv", "build", "--quiet", "--wheel", "--package", package, "--out-dir", str(wheels)],
            cwd=ROOT,
            check=True,
            timeout=600,
        )
    venv = tmp_path / "venv"
    subprocess.run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, timeout=300)
    subprocess.run(
        [
            "uv",
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin" / "python"),
            *map(str, wheels.glob("*.whl")),
        ],
        check=True,
        timeout=900,
    )
    listed = subprocess.run(
        ["uv", "pip", "list", "--python", str(venv / "bin" / "python"), "--format", "freeze"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    installed = {line.split("==")[0].lower().replace("_", "-") for line in listed.splitlines() if line}
    assert installed - CLIENT_DISTRIBUTIONS_ALLOWED == set(), "the client pulled in more than its own"
    assert {"styrmin", "styrmin-drivers", "httpx", "typer"} <= installed

    help_result = subprocess.run(
        [str(venv / "bin" / "styrminctl"), "--help"], capture_output=True, text=True, timeout=300
    )
    assert help_result.returncode == 0, help_result.stderr
    validated = subprocess.run(
        [str(venv / "bin" / "styrminctl"), "drivers", "validate", str(EXAMPLE_DRIVER)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert validated.returncode == 0, validated.stdout + validated.stderr
    no_server = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import styrmin_backend"], capture_output=True, timeout=300
    )
    assert no_server.returncode != 0, "the server is importable where only the client was installed"

"""The installed `styrminctl` as a process: exit codes, NO_COLOR and shell completion."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sdk.server import LiveServer, run_task, unique

SCRIPT = Path(sys.executable).with_name("styrminctl")
_SGR = re.compile(r"\x1b\[([0-9;]*)m")
_COLOURS = {str(n) for n in [*range(30, 39), *range(40, 49), *range(90, 98)]}


def styrminctl(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("STYRMIN", "NO_COLOR", "FORCE_COLOR", "_STYRMINCTL"))
    }
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "styrmin.cli"]
    return subprocess.run(
        [*command, *args],
        env={**base, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def env(live_server: LiveServer, tmp_path: Path) -> dict[str, str]:
    return {
        "STYRMIN_URL": live_server.url,
        "STYRMIN_TOKEN": live_server.admin_token(),
        "STYRMINCTL_CONFIG": str(tmp_path / "styrminctl.yaml"),
        "COLUMNS": "200",
    }


def _failed_task(server: LiveServer, env: dict[str, str]) -> int:
    name = unique("shop")
    created = styrminctl("deployments", "create", name, "--driver", "demo@1.0.0", "-o", "json", env=env)
    assert created.returncode == 0, created.stderr
    task_id: int = json.loads(created.stdout)["task"]["id"]
    run_task(server, task_id, fail=True, output="the end\n", truncated=True)
    return task_id


def test_the_console_script_is_installed() -> None:
    assert SCRIPT.exists(), f"{SCRIPT} is missing: pyproject.toml declares styrminctl = styrmin.cli:app"
    result = styrminctl("--version")
    assert result.returncode == 0 and result.stdout.startswith("styrminctl ")


def test_exit_codes(live_server: LiveServer, env: dict[str, str]) -> None:
    assert styrminctl("whoami", env=env).returncode == 0
    failed = _failed_task(live_server, env)
    # `get` read the task: 0 even though the task failed (`tasks get ID -o json | jq` under set -e);
    # waiting for it is what reports the failure.
    assert styrminctl("tasks", "get", str(failed), env=env).returncode == 0
    assert styrminctl("tasks", "wait", str(failed), env=env).returncode == 1
    assert styrminctl("tasks", "get", "999999", env=env).returncode == 1  # the server refused
    assert styrminctl("deployments", "frobnicate", env=env).returncode == 2  # usage
    assert styrminctl("tasks", "get", "not-a-number", env=env).returncode == 2  # usage
    unreachable = styrminctl(
        "--request-timeout", "1", "whoami", env={**env, "STYRMIN_URL": "http://127.0.0.1:9"}
    )
    assert unreachable.returncode == 2 and "cannot be reached" in unreachable.stderr
    # A person at a terminal hears what it waits for, and for 15 s rather than the SDK's 90 s.
    assert "Waiting up to 15 s for Styrmin at http://127.0.0.1:9" in unreachable.stderr
    assert styrminctl("whoami", env={k: v for k, v in env.items() if k != "STYRMIN_URL"}).returncode == 2
    assert "Traceback" not in unreachable.stderr


def test_colour_unless_no_color(live_server: LiveServer, env: dict[str, str]) -> None:
    failed = _failed_task(live_server, env)
    coloured = styrminctl("tasks", "get", str(failed), env={**env, "FORCE_COLOR": "1"})
    codes = {code for match in _SGR.findall(coloured.stdout) for code in match.split(";")}
    assert codes & _COLOURS, "a failed status is shown in colour on a terminal"
    plain = styrminctl("tasks", "get", str(failed), env={**env, "FORCE_COLOR": "1", "NO_COLOR": "1"})
    codes = {code for match in _SGR.findall(plain.stdout) for code in match.split(";")}
    assert not codes & _COLOURS, "NO_COLOR removes every colour"
    assert "Earlier output was cut; this is the end of it." in _SGR.sub("", plain.stdout)
    piped = styrminctl("tasks", "get", str(failed), env=env)
    assert "\x1b" not in piped.stdout  # not a terminal: no escape codes at all


def _complete(config: Path, words: str, **env: str) -> list[str]:
    """What bash completion offers for the command line ``words`` (the cursor at its end)."""
    result = styrminctl(
        env={
            "_STYRMINCTL_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split(" ")) - 1),
            "STYRMINCTL_CONFIG": str(config),
            **env,
        }
    )
    return result.stdout.split()


def test_shell_completion(tmp_path: Path) -> None:
    config = tmp_path / "styrminctl.yaml"
    config.write_text(
        "contexts:\n- {name: prod, server: 'https://a'}\n- {name: staging, server: 'https://b'}\n"
    )
    script = styrminctl("--show-completion", "bash")
    assert script.returncode == 0 and "_STYRMINCTL_COMPLETE=complete_bash" in script.stdout

    def complete(words: str) -> list[str]:
        return _complete(config, words)

    assert complete("styrminctl dep") == ["deployments"]
    assert complete("styrminctl config use-context ") == ["prod", "staging"]
    assert complete("styrminctl config use-context st") == ["staging"]
    assert complete("styrminctl tasks list --status ") == [
        "pending",
        "running",
        "succeeded",
        "failed",
        "cancelled",
    ]
    assert complete("styrminctl users set-role bob ") == ["admin", "read-write", "read-only"]


def _at_a_terminal(args: list[str], env: dict[str, str], prompt: bytes, answer: bytes) -> tuple[int, str]:
    """Run styrminctl on a pseudo-terminal, type ``answer`` once ``prompt`` shows, and return its exit
    code and everything it wrote (stdout and stderr share the terminal)."""
    import pty
    import select

    base = {k: v for k, v in os.environ.items() if not k.startswith(("STYRMIN", "NO_COLOR", "FORCE_COLOR"))}
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "styrmin.cli"]
    pid, fd = pty.fork()
    if pid == 0:  # the child: its controlling terminal is the pty, so \x03 becomes SIGINT
        os.execve(command[0], [*command, *args], {**base, **env, "NO_COLOR": "1"})  # noqa: S606
    seen = b""
    answered = False
    while True:
        ready, _, _ = select.select([fd], [], [], 120)
        if not ready:
            os.kill(pid, 9)
            raise AssertionError(f"styrminctl went silent; it wrote: {seen!r}")
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child ended and closed the terminal
            break
        if not chunk:
            break
        seen += chunk
        if not answered and prompt in seen:
            os.write(fd, answer)
            answered = True
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert answered, f"the prompt {prompt!r} never showed; styrminctl wrote: {seen!r}"
    return os.waitstatus_to_exitcode(status), seen.decode(errors="replace")


def test_ctrl_c_at_a_question_exits_130_and_answering_no_exits_1(
    live_server: LiveServer, env: dict[str, str]
) -> None:
    name = unique("shop")
    created = styrminctl("deployments", "create", name, "--driver", "demo@1.0.0", env=env)
    assert created.returncode == 0, created.stderr
    delete = ["deployments", "delete", name]

    interrupted = _at_a_terminal(delete, env, b"[y/N]", b"\x03")
    declined = _at_a_terminal(delete, env, b"[y/N]", b"n\r")
    ended = _at_a_terminal(delete, env, b"[y/N]", b"\x04")  # Ctrl-D: no answer
    password = _at_a_terminal(["login", live_server.url, "-u", "alice"], env, b"Password", b"\x03")
    still_there = styrminctl("deployments", "get", name, "-o", "json", env=env)

    assert interrupted[0] == 130 and "Interrupted." in interrupted[1], interrupted
    assert "Aborted" not in interrupted[1]
    assert declined[0] == 1 and "Nothing was changed." in declined[1], declined
    assert ended[0] == 1 and "Standard input ended before an answer" in ended[1], ended
    assert password[0] == 130 and "Interrupted." in password[1], password
    assert json.loads(still_there.stdout)["status"] != "deleting"


def test_completion_asks_the_server_the_global_options_name(
    live_server: LiveServer, env: dict[str, str], tmp_path: Path
) -> None:
    name = unique("shop")
    created = styrminctl("deployments", "create", name, "--driver", "demo@1.0.0", env=env)
    assert created.returncode == 0, created.stderr
    config = tmp_path / "completion.yaml"
    config.write_text(
        "current-context: away\ncontexts:\n"
        "- {name: away, server: 'http://127.0.0.1:9', token: nope}\n"
        f"- {{name: live, server: '{live_server.url}', token: '{env['STYRMIN_TOKEN']}'}}\n"
    )
    config.chmod(0o600)

    def complete(words: str) -> list[str]:
        return _complete(config, words, STYRMIN_RETRY_SECONDS="0")

    by_context = complete(f"styrminctl --context live deployments get {name[:-2]}")
    by_server = complete(
        f"styrminctl --server {live_server.url} --token {env['STYRMIN_TOKEN']} deployments get {name[:-2]}"
    )
    current = complete(f"styrminctl deployments get {name[:-2]}")
    contexts = styrminctl(
        env={
            "_STYRMINCTL_COMPLETE": "complete_bash",
            "COMP_WORDS": f"styrminctl --config {config} config use-context ",
            "COMP_CWORD": "5",
        }
    )

    assert by_context == [name]
    assert by_server == [name]
    assert current == []  # the current context's server cannot be reached: nothing offered
    assert contexts.stdout.split() == ["away", "live"]

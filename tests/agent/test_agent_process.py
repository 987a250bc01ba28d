"""The agent of ``styrmin up`` and of the harness runs in a process of its own beside the server: its
key is in no command line and no environment, its log records reach the process that started it,
a Ctrl-C is left to that process and SIGTERM stops it cleanly, and it dies with that process."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pydantic import SecretStr

import styrmin
from styrmin_backend.agent.process import AgentProcessStart, RelayedLine
from styrmin_backend.agent.settings import AgentSettings
from styrmin_backend.testing import StyrminStack
from tests.support.waiting import wait_for

from .conftest import Stack

pytestmark = pytest.mark.slow

AGENT_MODULE = "styrmin_backend.agent"


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        found += [int(child) for child in children]
    return found


def _command_line(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status  # ended, not yet reaped by whoever adopted it


def test_the_stacks_agent_runs_apart_with_its_key_out_of_sight(whole_stack: StyrminStack) -> None:
    agents = [pid for pid in _children(os.getpid()) if AGENT_MODULE in _command_line(pid)]

    assert len(agents) == 1, "the stack runs one agent process, a child of the process that started it"
    (agent,) = agents
    command = _command_line(agent)
    assert command[1:3] == ["-m", AGENT_MODULE]
    environment = Path(f"/proc/{agent}/environ").read_bytes().decode(errors="replace")
    for seen in (" ".join(command), environment):
        assert "sta_" not in seen  # an agent key's prefix: the key came on stdin
        assert "STYRMIN_AGENT_KEY" not in seen


def test_the_stacks_agent_process_is_listed_as_connected(whole_stack: StyrminStack) -> None:
    def listed() -> list[styrmin.AgentProcess]:
        return [process for agent in whole_stack.client.agents.list() for process in agent.processes]

    wait_for(lambda: len(listed()) == 1, timeout=60, message="the agent's process in the agents list")
    (process,) = listed()
    assert process.instance.startswith("styrmin-agent:")
    assert process.connected_at <= process.seen_at


def test_the_agents_log_records_reach_the_process_that_started_it(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    stack.push("8.9.0")
    body = {"name": "relayed", "namespace": "relayed", "driver": "shop", "driver_version": "8.9.0"}
    created = stack.http.post("/api/v1/deployments", json=body)
    assert created.status_code == 202, created.text
    task_id = created.json()["task"]["id"]
    assert stack.wait(task_id)["status"] == "succeeded"

    said = f"Task {task_id}: create of relayed"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        records = [r for r in caplog.records if r.name == "styrmin.agent" and said in r.getMessage()]
        if records:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"no record {said!r} from the agent's process: {caplog.text[-2000:]}")
    assert records[0].levelno == logging.INFO
    assert records[0].process == os.getpid()  # logged here, by this process's handlers


def _start(stack: Stack, tmp: Path, parent: str | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """The agent process for a cluster of its own (its settings on stdin), started by this process or,
    with ``parent``, by a Python process running that code (which prints the agent's pid)."""
    cluster = f"apart-{time.monotonic_ns()}"
    made = stack.http.post("/api/v1/agents", json={"name": cluster, "cluster": cluster})
    assert made.status_code == 201, made.text
    settings = AgentSettings(
        server_url=stack.url,
        key=SecretStr(made.json()["key"]),
        kubeconfig=stack.cluster.kubeconfig_path,
        prefect_api_url=stack.prefect_api_url,
        data_dir=tmp / "agent",
        poll_seconds=0.2,
    )
    start = AgentProcessStart(settings=settings, log_levels={"": logging.INFO}).model_dump_json()
    ours, theirs = os.pipe()
    if parent is None:
        command = [sys.executable, "-m", AGENT_MODULE, str(os.getpid()), str(theirs)]
    else:
        command = [sys.executable, "-c", parent, str(theirs)]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(theirs,), start_new_session=True
    )
    os.close(theirs)
    assert process.stdin is not None
    with process.stdin as stdin:
        stdin.write(start.encode())
    return process, ours


def _wait_warm(fd: int, timeout: float = 180) -> None:
    warm = threading.Event()

    def read() -> None:
        with open(fd, encoding="utf-8") as lines:
            for text in lines:
                if RelayedLine.model_validate_json(text).warm:
                    warm.set()

    threading.Thread(target=read, daemon=True).start()
    assert warm.wait(timeout), "the agent process never said it was warm"


def test_a_ctrl_c_is_left_to_its_starter_and_sigterm_stops_it_cleanly(stack: Stack, tmp_path: Path) -> None:
    process, relayed = _start(stack, tmp_path)
    try:
        _wait_warm(relayed)
        process.send_signal(signal.SIGINT)  # what a Ctrl-C in `styrmin up`'s terminal would send
        process.send_signal(signal.SIGTERM)  # what `styrmin up` sends once its server stops claims
        assert process.wait(120) == 0  # a SIGINT acted on would have ended it with an error
    finally:
        if process.poll() is None:
            process.kill()


PARENT = """
import os, subprocess, sys, time
fd = int(sys.argv[1])
agent = subprocess.Popen(
    [sys.executable, "-m", "styrmin_backend.agent", str(os.getpid()), str(fd)],
    stdin=sys.stdin, pass_fds=(fd,), start_new_session=True,
)
print(agent.pid, flush=True)
time.sleep(600)
"""


def test_the_agent_process_dies_with_the_process_that_started_it(stack: Stack, tmp_path: Path) -> None:
    parent, relayed = _start(stack, tmp_path, parent=PARENT)
    assert parent.stdout is not None
    agent = int(parent.stdout.readline())
    try:
        _wait_warm(relayed)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 60
        while not _gone(agent) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(agent), "the agent outlived the process that started it"
    finally:
        if not _gone(agent):
            os.kill(agent, signal.SIGKILL)

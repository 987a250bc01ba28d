"""Benchmark: the example driver's real upgrade under Styrmin, beside the same upgrade done with Helm.

One run starts the stack `styrmin up` runs (server, embedded local cluster, Prefect server, agent,
through ``styrmin_backend.local.run_locally`` as the driver authors' harness does) in a temporary data
dir, and times on that one local cluster:

- Styrmin: the example driver's ``upgrade`` action (stop the task worker, upgrade the chart, run
  ``shop migrate`` in a Job with the new image, start the task worker), from the upgrade request to
  the task's end;
- Helm, what a user would do instead: ``helm upgrade --wait`` with the task worker at 0 replicas and a
  post-upgrade hook Job running ``shop migrate``, then ``helm upgrade --wait`` with the worker at 1
  (helm_python, the same chart, its own namespace and database, the CLI's ten revisions kept).

Each Styrmin upgrade is requested and waited for from an operator's process of its own, one per
deployment (``_figures.Operator``), as ``styrminctl upgrade --wait`` or an operator's script sends it:
a client in the stack's own process would take turns with the server and agent for the interpreter,
which no real client does. Helm runs in the benchmark's process, and its CPU counts beside the
stack's; the operator's CPU is printed apart.

Each round starts once the agent's pool of pre-started action processes is full again, as an
operator's upgrade finds it (a round says how long it waited, when it did). It prints each round, the
medians and the ratio beside its target (<= 2x), then: the first upgrade
after the stack is ready (<= 3x Helm), an upgrade while another deployment's upgrade runs, and one
empty action (an upgrade whose only hook step runs an action that does nothing; <= 0.5 s). Last, the
rhythms of issue 23 (after a rest, one right after another, two at once; <= 1.5x Helm), and the CPU of
the stack's processes per upgrade after a rest, by part, beside the same count for the Helm upgrade.

``--profile`` prints, instead, the timelines of four upgrades (the first after the stack is ready, a
later one, and two after a rest of 6 s): every HTTP request the agent and the action's process send (to Styrmin, Prefect and the
cluster), the claims, the hand-over of the job to the pre-started process, the reading of
``actions.py``, the agent's work that sends no HTTP request of its own (rendering the chart, each Helm
call, the Prefect health check, the wait for replicas), the Styrmin task's and step's recorded times,
the tasks the primitives start, and the flow run's states, each with the gap since the mark before.

    uv run python bench/vs_helm.py [--rounds 10] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml
from _figures import (
    OPERATORS,
    ROLES,
    Operator,
    command_line,
    cpu_by_role,
    cpu_seconds,
    operators,
    process_tree,
)

import styrmin
from styrmin_backend.cluster.helm import BURST as HELM_BURST
from styrmin_backend.cluster.helm import QPS as HELM_QPS
from styrmin_backend.testing import StyrminStack

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "drivers" / "shop"
TIMELINE_DIR = Path(__file__).resolve().parent / "_timeline"
HELM_NAMESPACE = "helm-shop"
HELM_CLI_HISTORY_MAX = 10
"""The revisions ``helm upgrade`` keeps by default (``--history-max``); Helm's library keeps all unless
told, and reads every one it keeps at each upgrade."""
POLL_SECONDS = 0.02
"""How often the benchmark reads a task it waits for: small beside the figures."""

MIGRATE_HOOK = """{{- if .Values.migrateHook }}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-migrate
  annotations:
    "helm.sh/hook": post-install,post-upgrade
    "helm.sh/hook-delete-policy": before-hook-creation
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: migrate
          image: "{{ .Values.server.image.repository }}:{{ .Values.server.image.tag }}"
          command: ["shop", "migrate"]
          env:
            {{- include "shop.env" . | nindent 12 }}
{{- end }}
"""

EMPTY_ACTIONS = """from prefect import flow

from styrmin_backend.actions import GlobalContext


@flow
async def empty(context: GlobalContext) -> None:
    return None
"""


# --- Styrmin -------------------------------------------------------------------------------------


def wait_task(stack: StyrminStack, task_id: int) -> styrmin.Task:
    return stack.client.tasks.wait(task_id, interval=POLL_SECONDS, timeout=300)


def styrmin_upgrade(stack: StyrminStack, name: str, version: str) -> tuple[float, styrmin.Task]:
    """Seconds from the upgrade request to the task's end, and the ended task (which must succeed)."""
    started = time.perf_counter()
    change = stack.client.deployments.upgrade(name, app_version=version)
    assert change.task is not None
    task = wait_task(stack, change.task.id)
    elapsed = time.perf_counter() - started
    if task.status != styrmin.TaskStatus.SUCCEEDED:
        from styrmin_backend.testing import describe

        raise SystemExit(f"The upgrade of {name} to {version} failed:\n{describe(task)}")
    return elapsed, task


def empty_action_driver(tmp: Path, version: str, with_action: bool) -> Path:
    """The example driver at ``version`` whose only action (if any) is an empty upgrade core action."""
    folder = tmp / f"shop-empty-{version}"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "actions.py").write_text(EMPTY_ACTIONS)
    spec = yaml.safe_load((folder / "driver.styrmin.yml").read_text())
    spec["metadata"]["version"] = version
    spec["spec"]["actions"] = (
        [{"name": "empty", "hook": "upgrade", "mode": "core", "location": "actions.py::empty"}]
        if with_action
        else []
    )
    (folder / "driver.styrmin.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder


def empty_action_upgrade(stack: StyrminStack, operator: Operator, tmp: Path, version: str) -> float:
    stack.client.drivers.push(empty_action_driver(tmp, version, with_action=True))
    return operator.upgrade("empty", version, POLL_SECONDS, driver=True)


# --- Helm ----------------------------------------------------------------------------------------


class HelmShop:
    """The example chart with a post-upgrade hook Job running the migration, under Helm."""

    def __init__(self, kubeconfig: Path, tmp: Path, namespace: str = HELM_NAMESPACE) -> None:
        self.namespace = namespace
        self.chart = tmp / f"helm-chart-{namespace}"
        shutil.copytree(EXAMPLE / "chart", self.chart)
        (self.chart / "templates" / "migrate-hook.yaml").write_text(MIGRATE_HOOK)
        # The client-side request rate Styrmin's own Helm configs have. Helm's library allows 5
        # requests a second after a burst, shared by the configs of one kubeconfig in a process: two
        # releases upgraded at once here, with old revisions to prune, waited 0.2 s per request, 3 s
        # an upgrade, where two `helm` processes would each start with a burst of their own.
        self.config = helm.Config(
            kubeconfig_path=str(kubeconfig), namespace=namespace, qps=HELM_QPS, burst_limit=HELM_BURST
        )

    @staticmethod
    def values(version: str, workers: int, migrate: bool) -> dict[str, Any]:
        return {
            "server": {"image": {"tag": version}},
            "taskWorker": {"replicas": workers, "image": {"tag": version}},
            "migrateHook": migrate,
        }

    def install(self, version: str, migrate: bool = True) -> None:
        self.config.install(
            str(self.chart),
            "shop",
            self.values(version, 1, migrate),
            namespace=self.namespace,
            create_namespace=True,
            wait="watcher",
            timeout=120,
        )

    def upgrade(self, version: str) -> float:
        """Seconds for the two `helm upgrade --wait`: worker stopped and migration hook, then worker back."""
        started = time.perf_counter()
        for workers, migrate in ((0, True), (1, False)):
            self.config.upgrade(
                str(self.chart),
                "shop",
                self.values(version, workers, migrate),
                namespace=self.namespace,
                wait="watcher",
                timeout=120,
                max_history=HELM_CLI_HISTORY_MAX,
            )
        return time.perf_counter() - started

    def upgrade_once(self, version: str) -> float:
        """Seconds for one `helm upgrade --wait` to a new image tag, no hook: what an empty action's
        upgrade applies."""
        started = time.perf_counter()
        self.config.upgrade(
            str(self.chart),
            "shop",
            self.values(version, 1, False),
            namespace=self.namespace,
            wait="watcher",
            timeout=120,
            max_history=HELM_CLI_HISTORY_MAX,
        )
        return time.perf_counter() - started


# --- the run -------------------------------------------------------------------------------------


def wait_for_a_full_pool(timeout: float = 300) -> float:
    """Wait until the agent's action fork server runs (only after it died: the stack starts warm); returns
    the wait."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if any("agent.prefect._process" in command_line(pid) for pid in process_tree(os.getpid())):
            break
        time.sleep(0.1)
    return time.perf_counter() - started


def pool_note(waited: float) -> str:
    return f" (waited {waited:.1f} s for the action fork server)" if waited > 1 else ""


RHYTHM_TARGET = 1.5
"""Each rhythm's Styrmin upgrade within this many times Helm's (issue 23)."""


def verdict(value: float, target: float) -> str:
    return "met" if value <= target else "NOT met"


def deploy(stack: StyrminStack, name: str) -> None:
    task = stack.create(name, driver="shop", driver_version="1.0.0", app_version="1.0.0")
    assert task.status == styrmin.TaskStatus.SUCCEEDED, task


def allow_a_slow_prefect_start(seconds: float) -> None:
    """Give the local Prefect server ``seconds`` to start: on a busy machine its first start (imports and
    migrations) can take longer than the default two minutes."""
    from styrmin_backend.agent.prefect import server

    start = server.LocalPrefectServer.start

    def patient_start(self: server.LocalPrefectServer, timeout: float = seconds) -> None:
        start(self, timeout)

    server.LocalPrefectServer.start = patient_start  # type: ignore[method-assign]


def run(args: argparse.Namespace, tmp: Path) -> None:
    catalogs = [EXAMPLE / "catalog"]
    allow_a_slow_prefect_start(600)
    with StyrminStack.start(tmp / "data", catalogs) as stack:
        print(f"stack ready in {time.perf_counter() - T0:.1f} s", flush=True)
        stack.client.drivers.push(EXAMPLE)
        deploy(stack, "shop")
        if args.profile:
            profile_four_upgrades(stack, tmp)
            return
        assert stack.client.token is not None
        # Each deployment's upgrades come from an operator's process of its own, as operators' scripts
        # send them (``_figures.Operator``); started before the first upgrade, their start is not timed.
        with operators(stack.url, stack.client.token, 3) as (shop, other, empty):
            compare(stack, tmp, args, {"shop": shop, "other": other, "empty": empty})


def profile_four_upgrades(stack: StyrminStack, tmp: Path) -> None:
    """``--profile``: the timelines of the first upgrade after ready, a later one and two after a rest."""
    profile(stack, "1.1.0", "the first upgrade after the stack is ready")
    helm_shop = HelmShop(stack.cluster.kubeconfig_path, tmp)
    helm_shop.install("1.0.0")
    print(f"first Helm upgrade: {helm_shop.upgrade('1.1.0'):.2f} s", flush=True)
    wait_for_a_full_pool()
    profile(stack, "1.2.0", "a later upgrade")
    for version in ("1.3.0", "1.4.0"):
        time.sleep(6)
        profile(stack, version, "an upgrade after a rest of 6 s")


def compare(stack: StyrminStack, tmp: Path, args: argparse.Namespace, team: dict[str, Operator]) -> None:
    """Every figure beside Helm's, each Styrmin upgrade sent and waited for by ``team[deployment]``."""
    first = team["shop"].upgrade("shop", "1.1.0", POLL_SECONDS)
    print(f"first upgrade after the stack is ready: {first:.2f} s", flush=True)
    helm_shop = HelmShop(stack.cluster.kubeconfig_path, tmp)
    helm_shop.install("1.0.0")
    helm_first = helm_shop.upgrade("1.1.0")
    print(f"first Helm upgrade: {helm_first:.2f} s", flush=True)
    deploy(stack, "other")
    stack.client.drivers.push(empty_action_driver(tmp, "100.0.0", with_action=False))
    empty = stack.create("empty", driver="shop", driver_version="100.0.0")
    assert empty.status == styrmin.TaskStatus.SUCCEEDED, empty
    wait_for_a_full_pool()
    styrmin_times: list[float] = []
    helm_times: list[float] = []
    for index in range(args.rounds):
        version = f"1.{index + 2}.0"
        waited = wait_for_a_full_pool()
        seconds = team["shop"].upgrade("shop", version, POLL_SECONDS)
        helm_seconds = helm_shop.upgrade(version)
        styrmin_times.append(seconds)
        helm_times.append(helm_seconds)
        print(
            f"round {index + 1}: styrmin {seconds:.2f} s, helm+hook {helm_seconds:.2f} s, "
            f"ratio {seconds / helm_seconds:.2f}{pool_note(waited)}",
            flush=True,
        )
    concurrent = []
    empties = []
    with ThreadPoolExecutor(1) as beside:
        for index in range(max(3, args.rounds // 3)):
            version = f"1.{args.rounds + index + 2}.0"
            wait_for_a_full_pool()
            other = beside.submit(team["other"].upgrade, "other", version, POLL_SECONDS)
            time.sleep(0.3)  # the other upgrade's action is running
            concurrent.append(team["shop"].upgrade("shop", version, POLL_SECONDS))
            other.result()
            wait_for_a_full_pool()
            empties.append(empty_action_upgrade(stack, team["empty"], tmp, f"100.{index + 1}.0"))
    rhythms = measure_rhythms(stack, helm_shop, tmp, args, team)
    median_styrmin = statistics.median(styrmin_times)
    median_helm = statistics.median(helm_times)
    ratio = median_styrmin / median_helm
    print()
    print(
        f"styrmin upgrade (example driver):  median {median_styrmin:.2f} s over {len(styrmin_times)} rounds"
    )
    print(f"helm upgrade + post-upgrade hook:  median {median_helm:.2f} s")
    print(f"ratio: {ratio:.2f}   (target <= 2: {verdict(ratio, 2)})")
    first_ratio = first / median_helm
    print(
        f"first upgrade after ready: {first:.2f} s, {first_ratio:.2f}x helm   (target <= 3: {verdict(first_ratio, 3)})"
    )
    print(
        f"upgrade while another deployment's upgrade runs: median {statistics.median(concurrent):.2f} s, "
        f"{statistics.median(concurrent) / median_helm:.2f}x helm"
    )
    median_empty = statistics.median(empties)
    print(
        f"one empty action, request to task end: median {median_empty:.3f} s   (target <= 0.5 s: {verdict(median_empty, 0.5)})"
    )
    print_rhythms(rhythms)


# --- rhythms (issue 23) --------------------------------------------------------------------------


def measure_rhythms(
    stack: StyrminStack, helm_shop: HelmShop, tmp: Path, args: argparse.Namespace, team: dict[str, Operator]
) -> dict[str, Any]:
    """Styrmin beside Helm in the rhythms an operator scripting upgrades has: after a rest, one right
    after another, and two deployments at once against two Helm releases at once; with the stack's CPU
    per Styrmin upgrade (the operator's process apart)."""
    rounds = max(3, args.rounds // 2)
    helm_other = HelmShop(stack.cluster.kubeconfig_path, tmp, namespace=HELM_NAMESPACE + "-2")
    helm_other.install("1.0.0")
    figures: dict[str, Any] = {
        "rest": ([], []),
        "back to back": ([], []),
        "two at once": ([], []),
        "cpu": [],
        "helm cpu": [],
        "operator cpu": [],
    }
    version_index = iter(range(500, 10_000))

    def next_version() -> str:
        return f"2.{next(version_index)}.0"

    for _ in range(rounds):
        time.sleep(6)
        version = next_version()
        before, operator_before = cpu_by_role(OPERATORS), cpu_seconds(team["shop"].pid)
        seconds = team["shop"].upgrade("shop", version, POLL_SECONDS)
        after, operator_after = cpu_by_role(OPERATORS), cpu_seconds(team["shop"].pid)
        figures["cpu"].append({role: after[role] - before[role] for role in ROLES})
        figures["operator cpu"].append(operator_after - operator_before)
        time.sleep(6)
        figures["rest"][0].append(seconds)
        before = cpu_by_role(OPERATORS)
        figures["rest"][1].append(helm_shop.upgrade(version))
        after = cpu_by_role(OPERATORS)
        figures["helm cpu"].append({role: after[role] - before[role] for role in ROLES})
    styrmin_versions = [next_version() for _ in range(rounds)]
    figures["back to back"][0].extend(team["shop"].upgrade("shop", v, POLL_SECONDS) for v in styrmin_versions)
    figures["back to back"][1].extend(helm_shop.upgrade(v) for v in styrmin_versions)
    with ThreadPoolExecutor(2) as pool:
        # As many pairs as --rounds: the rhythm that sits nearest its target needs the most rounds.
        for _ in range(max(rounds, args.rounds)):
            version = next_version()
            started = time.perf_counter()
            list(
                pool.map(lambda name, v=version: team[name].upgrade(name, v, POLL_SECONDS), ["shop", "other"])
            )
            figures["two at once"][0].append(time.perf_counter() - started)
            started = time.perf_counter()
            list(pool.map(lambda release, v=version: release.upgrade(v), [helm_shop, helm_other]))
            figures["two at once"][1].append(time.perf_counter() - started)
    return figures


def print_rhythms(figures: dict[str, Any]) -> None:
    one, five, _ = os.getloadavg()
    print(
        f"\nrhythms (issue 23; load average {one:.2f}, {five:.2f} over 1 and 5 min; target <= {RHYTHM_TARGET}x helm):"
    )
    for name in ("rest", "back to back", "two at once"):
        ours, theirs = figures[name]
        ratio = statistics.median(ours) / statistics.median(theirs)
        label = {
            "rest": "after a rest of 6 s",
            "back to back": "one right after another",
            "two at once": "two deployments at once vs two releases",
        }[name]
        print(
            f"  {label}: styrmin median {statistics.median(ours):.2f} s (min {min(ours):.2f}, max {max(ours):.2f}), "
            f"helm {statistics.median(theirs):.2f} s (min {min(theirs):.2f}, max {max(theirs):.2f}): "
            f"{ratio:.2f}x   ({verdict(ratio, RHYTHM_TARGET)})"
        )
        if name != "back to back":  # the other two run Styrmin's round and Helm's one right after another
            paired = [a / b for a, b in zip(ours, theirs, strict=True)]
            print(
                f"    each round against its own Helm round (both saw the machine at the same speed):"
                f" median {statistics.median(paired):.2f}x, {min(paired):.2f}-{max(paired):.2f}x over"
                f" {len(paired)} rounds"
            )
    cpu, by_part = _cpu_figures(figures["cpu"])
    helm_cpu, helm_by_part = _cpu_figures(figures["helm cpu"])
    print(
        f"  CPU of the whole stack per example upgrade: median {statistics.median(cpu):.2f} s (max {max(cpu):.2f});"
        f" by part (medians, s): {by_part}"
    )
    print(
        f"  CPU per Helm upgrade + hook, counted the same way (its Helm runs in the benchmark's process, the"
        f" idle stack's polls included): median {statistics.median(helm_cpu):.2f} s (max {max(helm_cpu):.2f});"
        f" by part: {helm_by_part}; Styrmin's is {statistics.median(cpu) / statistics.median(helm_cpu):.2f}x"
    )
    # A mean: /proc counts CPU in ticks of 10 ms, more than an operator's process spends per upgrade.
    print(
        f"  CPU of the operator's process per Styrmin upgrade (its request and its wait for the task's"
        f" end; not counted above): mean {statistics.mean(figures['operator cpu']):.3f} s"
    )
    # Two at once can end no sooner than the CPU both need spread over every core: when that floor is
    # past 1.5x Helm's, the rhythm is bound by the CPU per upgrade, not by any wait.
    cores = os.cpu_count() or 1
    ours_floor = 2 * statistics.median(cpu) / min(2, cores)
    helm_floor = 2 * statistics.median(helm_cpu) / min(2, cores)
    print(
        f"  two at once cannot take less than the CPU of two upgrades over {min(2, cores)} cores: styrmin"
        f" {ours_floor:.2f} s, helm {helm_floor:.2f} s ({ours_floor / helm_floor:.2f}x); the runs above took"
        f" {statistics.median(figures['two at once'][0]):.2f} s and {statistics.median(figures['two at once'][1]):.2f} s"
    )


def _cpu_figures(rounds: list[dict[str, float]]) -> tuple[list[float], str]:
    """Each round's CPU seconds, and the medians of the stack's parts that did work, as a line."""
    totals = [sum(parts.values()) for parts in rounds]
    parts = ", ".join(f"{role} {statistics.median(r[role] for r in rounds):.3f}" for role in ROLES[:4])
    return totals, parts


# --- --profile -----------------------------------------------------------------------------------


def _timed(owner: Any, name: str, label: str, mark: Callable[..., None]) -> Callable[[], None]:
    """Mark the start and end of ``owner.name`` (a function or method, sync or async); returns the undo."""
    original = getattr(owner, name)
    if asyncio.iscoroutinefunction(original):

        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            mark(f"agent: {label} ...")
            try:
                return await original(*args, **kwargs)
            finally:
                mark(f"agent: ... {label} done")

        wrapper: Any = timed_async
    else:

        def timed_sync(*args: Any, **kwargs: Any) -> Any:
            mark(f"agent: {label} ...")
            try:
                return original(*args, **kwargs)
            finally:
                mark(f"agent: ... {label} done")

        wrapper = timed_sync
    setattr(owner, name, wrapper)
    return lambda: setattr(owner, name, original)


@contextmanager
def agent_marks(mark: Callable[..., None]) -> Iterator[None]:
    """Mark, in this process (where the agent runs), the hand-over of a job to a runner process and
    the agent's own work that sends no HTTP request through httpx: Helm (Go), the chart's rendering,
    the claims it gets."""
    from styrmin_backend.agent import adapters, server_api
    from styrmin_backend.agent.prefect import _pool, health, runner
    from styrmin_backend.cluster import helm as agent_helm
    from styrmin_backend.cluster import kube
    from styrmin_backend.drivers import render

    original_send = _pool.ActionProcess.send_job
    original_claim = server_api.ServerApi.claim

    def send_job(self: Any, job: dict[str, Any]) -> None:
        mark("agent: job sent to the forked process")
        original_send(self, job)

    async def claim(self: Any, *args: Any, **kwargs: Any) -> Any:
        claimed = await original_claim(self, *args, **kwargs)
        if claimed is not None:
            mark(f"agent: claimed task {claimed.task_id} ({claimed.change_type})")
        return claimed

    _pool.ActionProcess.send_job = send_job  # type: ignore[method-assign]
    server_api.ServerApi.claim = claim  # type: ignore[method-assign]
    undo = [
        _timed(runner.ActionRunner, "run_action", "run_action", mark),
        _timed(adapters, "prepare_install_chart", "render the chart", mark),
        _timed(render, "set_component_replicas", "stopped components at 0", mark),
        _timed(agent_helm.HelmReleases, "apply", "helm: apply (lock, thread, ...)", mark),
        _timed(helm.Config, "__init__", "helm: new Config", mark),
        _timed(helm.Config, "status", "helm: status", mark),
        _timed(helm.Config, "close", "helm: close Config", mark),
        _timed(helm.Config, "upgrade", "helm: upgrade --wait", mark),
        _timed(kube.ClusterAccess, "wait_scaled", "wait for the replicas", mark),
        _timed(health.PrefectWatch, "check", "Prefect health check", mark),
    ]
    try:
        yield
    finally:
        _pool.ActionProcess.send_job = original_send  # type: ignore[method-assign]
        server_api.ServerApi.claim = original_claim  # type: ignore[method-assign]
        for step in undo:
            step()


def _stamp(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def profile(stack: StyrminStack, version: str, which: str) -> None:
    marks_file = Path(os.environ["VS_HELM_TIMELINE"])
    sys.path.insert(0, str(TIMELINE_DIR))
    import sitecustomize  # the tracer, here only for its mark() and HTTP wrappers

    sitecustomize._PATH = str(marks_file)
    marks_file.write_text("")
    with agent_marks(sitecustomize.mark):
        requested = time.time()
        seconds, task = styrmin_upgrade(stack, "shop", version)
        ended = time.time()
    events: list[tuple[float, str]] = [(requested, "bench: upgrade requested")]
    for line in marks_file.read_text().splitlines():
        mark = json.loads(line)
        if not requested <= mark["t"] <= ended + 1:
            continue
        who = "agent" if mark["pid"] == os.getpid() else f"process {mark['pid']}"
        if "argv" in mark:
            mark["what"] += f" ({mark['argv']})"
        if who == "agent" and mark.get("sync"):
            continue  # the benchmark's own reads of the task
        if mark["what"] == "http":
            events.append((mark["started"], f"{who}: -> {_label(mark['request'], stack)}"))
            events.append((mark["t"], f"{who}: <- {mark['status']} ({mark['t'] - mark['started']:.3f} s)"))
        else:
            events.append(
                (
                    mark["t"],
                    mark["what"] if mark["what"].startswith("agent") else f"{who}: {mark['what'][9:]}",
                )
            )
    for label, value in (("task started", task.started_at), ("task ended", task.ended_at)):
        if (t := _stamp(value)) is not None:
            events.append((t, f"styrmin: {label} ({task.type.value} {task.id})"))
    for step in task.steps:
        for label, value in (("started", step.started_at), ("ended", step.ended_at)):
            if (t := _stamp(value)) is not None:
                events.append((t, f"styrmin: step {step.name!r} {label}"))
        for started in step.started_tasks:
            child = stack.client.tasks.get(started.id)
            for label, value in (("started", child.started_at), ("ended", child.ended_at)):
                if (t := _stamp(value)) is not None:
                    events.append((t, f"styrmin: started task {child.id} ({child.type.value}) {label}"))
        if step.flow_run_id:
            events.extend(asyncio.run(_flow_run_states(stack.prefect_api_url, step.flow_run_id)))
    events.append((ended, "bench: saw the task ended"))
    events.sort()
    print(f"\ntimeline of {which} ({seconds:.2f} s, request to task end); gap = time since the line before")
    previous = requested
    for t, what in events:
        print(f"{t - requested:7.3f} s  +{t - previous:6.3f}  {what}")
        previous = t


def _label(request: str, stack: StyrminStack) -> str:
    method, _, rest = request.partition(" ")
    host, _, path = rest.partition("/")
    where = {
        stack.url.split("//", 1)[1].rstrip("/"): "styrmin",
        stack.prefect_api_url.split("//", 1)[1].split("/", 1)[0]: "prefect",
    }.get(host, "cluster")
    return f"{where} {method} /{path}"


async def _flow_run_states(api_url: str, flow_run_id: str) -> list[tuple[float, str]]:
    from uuid import UUID

    from prefect.client.orchestration import PrefectClient

    async with PrefectClient(api_url) as client:
        states = await client.read_flow_run_states(UUID(flow_run_id))
        flow_run = await client.read_flow_run(UUID(flow_run_id))
    events = [(flow_run.created.timestamp(), "prefect: flow run created")] if flow_run.created else []
    events += [(state.timestamp.timestamp(), f"prefect: flow run {state.name}") for state in states]
    return events


T0 = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--profile", action="store_true", help="print the timelines of two upgrades instead")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="styrmin-bench-helm-"))
    if args.profile:
        # Every process started from here on (the agent's action processes) marks its timeline.
        os.environ["VS_HELM_TIMELINE"] = str(tmp / "timeline.jsonl")
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(TIMELINE_DIR), os.environ.get("PYTHONPATH")])
        )
    try:
        run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

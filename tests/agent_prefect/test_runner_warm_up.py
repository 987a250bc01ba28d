"""A runner process prepares ahead what a flow run would compute while the action starts; what the
flows get must not change."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ACTIONS = '''
from prefect import flow

from styrmin_backend.actions import GlobalContext


@flow
async def upgrade(context: GlobalContext, target_version: str) -> None:
    pass


@flow
async def post_setup(context: GlobalContext) -> None:
    pass


@flow
async def with_defaults(context: GlobalContext, retries: int = 1, strict: bool = True) -> None:
    """Does a thing.

    Args:
        retries: how many times to try.
    """


@flow
async def same_names_other_defaults(context: GlobalContext, retries: int = 2, strict: bool = 1) -> None:
    """Does a thing.

    Args:
        retries: how many times to try.
    """
'''

CHECK = """
import sys
from pathlib import Path

from prefect.utilities.callables import parameter_schema

from styrmin_backend.agent.prefect._process import _warm_up
from styrmin_backend.drivers.loading import load_action_flow

_warm_up()
driver = Path(sys.argv[1])
for name in ("upgrade", "post_setup", "with_defaults", "same_names_other_defaults"):
    action = load_action_flow(driver, f"actions.py::{name}")
    expected = parameter_schema(action.fn)
    assert action.parameters == expected, (name, action.parameters, expected)
    assert action.parameters is not load_action_flow(driver, f"actions.py::{name}").parameters
print("same schemas")
"""


def test_flows_loaded_in_a_runner_process_get_the_parameter_schemas_prefect_computes(tmp_path: Path) -> None:
    (tmp_path / "actions.py").write_text(textwrap.dedent(ACTIONS))
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "same schemas" in done.stdout


WITHOUT_HELM = """
import sys
from pathlib import Path

from styrmin_backend.agent.prefect._process import _warm_up
from styrmin_backend.drivers.loading import load_action_flow

_warm_up()
load_action_flow(Path(sys.argv[1]), "actions.py::upgrade")
print("helm loaded" if "helm_python" in sys.modules else "no helm")
"""


def test_the_fork_server_does_without_helms_library(tmp_path: Path) -> None:
    """Helm's Go library holds about 30 MB in each process that loads it; an action never calls Helm
    (its primitives ask the agent), so the fork server and the actions' processes must not load it."""
    (tmp_path / "actions.py").write_text(textwrap.dedent(ACTIONS))
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_HELM, str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "no helm"


DECODED = """
import json
import sys

from lightkube.core.decoders import decode_list, decode_object
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod

if sys.argv[1] == "warmed":
    from styrmin_backend.agent.prefect._process import _warm_up

    _warm_up()
deployment = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "shop-server", "labels": {"a": "b"}},
    "spec": {
        "replicas": 2, "selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{
            "name": "server", "image": "shop:1.0.0", "env": [{"name": "LEVEL", "value": "debug"},
            {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        }]}},
    },
}
job = {"metadata": {"name": "shop-migrate-7f3c"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
pod = {"metadata": {"name": "p"}, "status": {"containerStatuses": [{
    "name": "command", "image": "i", "imageID": "", "ready": False, "restartCount": 0,
    "state": {"terminated": {"exitCode": 3}},
}]}}
print(json.dumps([
    decode_object(json.dumps(deployment).encode(), Deployment).to_dict(),
    [j.to_dict() for j in decode_list(json.dumps({"items": [job]}).encode(), Job)[2]],
    [p.to_dict() for p in decode_list(json.dumps({"items": [pod]}).encode(), Pod)[2]],
], sort_keys=True))
"""


def test_the_cluster_objects_an_action_reads_decode_the_same_after_the_warm_up() -> None:
    """The fork server builds lightkube's decoders before actions run: what they decode must not change."""
    answers = [
        subprocess.run([sys.executable, "-c", DECODED, how], capture_output=True, text=True, timeout=600)
        for how in ("cold", "warmed")
    ]
    for done in answers:
        assert done.returncode == 0, done.stderr[-3000:]
    cold, warmed = (done.stdout for done in answers)
    assert '"exitCode": 3' in cold and '"secretKeyRef"' in cold
    assert warmed == cold

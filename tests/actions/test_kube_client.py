"""The cluster client of an action's process: made ahead by the fork server for the agent's kubeconfig,
taken by the action that runs with that very file, and never for a file changed since."""

from __future__ import annotations

from pathlib import Path

import pytest

from styrmin_backend.actions import _kube
from styrmin_backend.actions._kube import kube_client, prepare_kube_client
from styrmin_backend.cluster.connection import SERVICE_ACCOUNT_ENV

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
  - name: local
    cluster:
      server: https://127.0.0.1:6443
      insecure-skip-tls-verify: true
contexts:
  - name: local
    context: {cluster: local, user: agent}
current-context: local
users:
  - name: agent
    user: {token: not-a-real-token}
"""


@pytest.fixture
def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv(SERVICE_ACCOUNT_ENV, raising=False)
    monkeypatch.setattr(_kube, "_prepared", {})
    return path


async def test_an_action_takes_the_client_made_ahead_for_its_kubeconfig(kubeconfig: Path) -> None:
    prepare_kube_client()
    [made] = _kube._prepared.values()
    assert kube_client() is made
    assert kube_client() is made and _kube._prepared == {}  # taken once, then this loop's own


async def test_a_kubeconfig_changed_since_the_client_was_made_is_read_again(kubeconfig: Path) -> None:
    prepare_kube_client()
    [made] = _kube._prepared.values()
    kubeconfig.write_text(KUBECONFIG.replace("not-a-real-token", "a-rotated-token"))
    fresh = kube_client()
    assert fresh is not made
    assert fresh.config.user.token == "a-rotated-token"  # type: ignore[attr-defined]


def test_no_client_is_made_ahead_for_a_service_account_whose_token_rotates(
    kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SERVICE_ACCOUNT_ENV, "/var/run/secrets/kubernetes.io/serviceaccount")
    prepare_kube_client()
    assert _kube._prepared == {}

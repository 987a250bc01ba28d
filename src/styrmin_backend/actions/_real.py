"""The backend the agent's actions use: the Styrmin API through the SDK, the cluster through lightkube."""

from __future__ import annotations

import logging

from styrmin_backend.actions._api import SdkApi
from styrmin_backend.actions._backend import set_default_backend
from styrmin_backend.actions._kube import LightkubeCluster, prepare_decoders, prepare_kube_client

_log = logging.getLogger("styrmin.actions")


def wire_real_backend() -> None:
    """Make the primitives of this process's actions use the real backend (the action process's entry
    point calls it)."""
    set_default_backend(lambda context: RealBackend(context.api_url))


def prepare_real_backend() -> None:
    """Do, once before actions run, the work the real backend's first calls would do in each action."""
    prepare_decoders()
    prepare_kube_client()


class RealBackend:
    """The Styrmin API at ``api_url`` and the cluster of KUBECONFIG; clients are shared per event loop."""

    def __init__(self, api_url: str) -> None:
        self.api = SdkApi(api_url)
        self.cluster = LightkubeCluster()

    def log(self, message: str) -> None:
        """Log to the action's flow run (shown in the Prefect UI), else to Python's log."""
        try:
            from prefect import get_run_logger

            get_run_logger().info(message)
        except Exception:  # not in a flow run (a test calling the primitive directly)
            _log.info(message)

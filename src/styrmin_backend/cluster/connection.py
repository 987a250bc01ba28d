"""How the agent and its actions reach their cluster: a kubeconfig, or the pod's service account."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightkube import KubeConfig

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where Kubernetes mounts a pod's service-account token, CA (ca.crt) and namespace."""

SERVICE_ACCOUNT_ENV = "STYRMIN_SERVICE_ACCOUNT_DIR"
"""The variable that tells an action's process which service-account folder to use."""


class NoClusterAccess(Exception):
    """Neither a kubeconfig nor a service account was found; the message says what to set."""


@dataclass(frozen=True)
class ClusterConnection:
    """One way to reach a cluster: exactly one of a kubeconfig file and a service-account folder."""

    kubeconfig: Path | None = None
    service_account_dir: Path | None = None

    @classmethod
    def find(
        cls, kubeconfig: Path | None, service_account_dir: Path = SERVICE_ACCOUNT_DIR
    ) -> ClusterConnection:
        """The kubeconfig given (setting, then KUBECONFIG); else the pod's service account; else ~/.kube/config."""
        if kubeconfig is not None:
            return cls(kubeconfig=kubeconfig)
        if os.environ.get("KUBECONFIG"):
            return cls(kubeconfig=Path(os.environ["KUBECONFIG"].split(os.pathsep)[0]))
        if (service_account_dir / "token").is_file():
            return cls(service_account_dir=service_account_dir)
        default = Path.home() / ".kube" / "config"
        if default.is_file():
            return cls(kubeconfig=default)
        raise NoClusterAccess(
            f"The agent found no way to reach its cluster: no kubeconfig (STYRMIN_AGENT_KUBECONFIG, "
            f"KUBECONFIG, {default}) and no service-account token in {service_account_dir}. Set "
            "STYRMIN_AGENT_KUBECONFIG, or run the agent in a pod with a service account."
        )

    @property
    def in_cluster(self) -> bool:
        """Whether the cluster is reached through a service account (the agent runs in a pod)."""
        return self.service_account_dir is not None

    def describe(self) -> str:
        """Which kubeconfig or service account, for the agent's log."""
        if self.service_account_dir is not None:
            return f"the service account in {self.service_account_dir} (API server {self._api_server()})"
        return f"kubeconfig {self.kubeconfig}"

    def lightkube_config(self) -> KubeConfig:
        """The configuration of a lightkube client."""
        from lightkube import KubeConfig  # on first use: a process that only reads settings needs none

        if self.service_account_dir is not None:
            return KubeConfig.from_service_account(self.service_account_dir)
        assert self.kubeconfig is not None  # one of the two is always set
        return KubeConfig.from_file(self.kubeconfig)

    def helm_options(self) -> dict[str, Any]:
        """Keyword arguments of ``helm_python.Config`` reaching the same cluster.

        The token is read at each call: Kubernetes rotates projected service-account tokens.
        """
        folder = self.service_account_dir
        if folder is None:
            return {"kubeconfig_path": self.kubeconfig}
        return {
            "kube_apiserver": self._api_server(),
            "kube_token": (folder / "token").read_text().strip(),
            "kube_ca_file": folder / "ca.crt",
        }

    def action_env(self) -> dict[str, str]:
        """What an action's process needs in its environment to reach the same cluster."""
        if self.service_account_dir is not None:
            return {SERVICE_ACCOUNT_ENV: str(self.service_account_dir)}
        return {"KUBECONFIG": str(self.kubeconfig)}

    @staticmethod
    def _api_server() -> str:
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise NoClusterAccess(
                "KUBERNETES_SERVICE_HOST is not set: Kubernetes sets it in every pod; outside a pod, "
                "give the agent a kubeconfig (STYRMIN_AGENT_KUBECONFIG) instead."
            )
        return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"

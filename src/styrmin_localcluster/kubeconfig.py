"""The kubeconfig through which every client, Styrmin's included, reaches the local cluster."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml

CONTEXT = "localcluster"


def kubeconfig_text(
    url: str, token: str | None, ca_pem: bytes | None = None, namespace: str = "default"
) -> str:
    user: dict[str, str] = {"token": token} if token else {}
    cluster: dict[str, str] = {"server": url}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": user}],
        "contexts": [
            {"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace}}
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }
    return yaml.safe_dump(document, sort_keys=False)


def write_kubeconfig(path: Path, url: str, token: str | None, ca_pem: bytes | None = None) -> None:
    """Write the kubeconfig readable by its owner only (it holds the token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(kubeconfig_text(url, token, ca_pem))
    os.replace(temporary, path)

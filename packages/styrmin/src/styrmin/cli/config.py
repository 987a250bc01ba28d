"""styrminctl's config file: named contexts, each a server and the token to call it with.

The file is YAML, kept with mode 0600 (it holds tokens) at ``$STYRMINCTL_CONFIG``, else
``$XDG_CONFIG_HOME/styrmin/styrminctl.yaml``, else ``~/.config/styrmin/styrminctl.yaml``::

    apiVersion: styrminctl/v1
    current-context: prod
    contexts:
    - name: prod
      server: https://styrmin.example.com
      user: alice
      token: ...
      token-expires-at: '2025-07-01T12:00:00Z'
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CONFIG_ENV = "STYRMINCTL_CONFIG"
API_VERSION = "styrminctl/v1"
_HEADER = (
    "# styrminctl's contexts: each names a Styrmin server and the token to call it with.\n"
    "# It holds API tokens: keep it private (mode 0600). Edit with `styrminctl login` and `styrminctl config`.\n"
)


class ConfigFileError(Exception):
    """The config file cannot be read or written; the message says which file and why."""


@dataclass
class Context:
    """A named server, and the user and token styrminctl calls it with."""

    name: str
    server: str
    user: str | None = None
    token: str | None = None
    token_expires_at: str | None = None

    def to_yaml(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "server": self.server}
        if self.user:
            data["user"] = self.user
        if self.token:
            data["token"] = self.token
        if self.token_expires_at:
            data["token-expires-at"] = self.token_expires_at
        return data


@dataclass
class Config:
    """The contexts of a config file and which one is current."""

    path: Path
    contexts: dict[str, Context] = field(default_factory=dict)
    current_context: str | None = None
    loose_permissions: bool = False

    @property
    def current(self) -> Context | None:
        return self.contexts.get(self.current_context) if self.current_context else None

    def save(self) -> None:
        """Write the file atomically with mode 0600 (its folder is made 0700 when new)."""
        data = {
            "apiVersion": API_VERSION,
            "current-context": self.current_context,
            "contexts": [c.to_yaml() for c in self.contexts.values()],
        }
        import yaml

        text = _HEADER + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            descriptor, scratch = tempfile.mkstemp(prefix=".styrminctl-", dir=folder)
            try:
                os.fchmod(descriptor, 0o600)
                with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                    handle.write(text)
                os.replace(scratch, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(scratch)
                raise
        except OSError as error:
            raise ConfigFileError(
                f"Cannot write the config file {self.path}: {error.strerror or error}."
            ) from None
        self.loose_permissions = False


def default_path() -> Path:
    """Where the config file is: ``$STYRMINCTL_CONFIG``, else under ``$XDG_CONFIG_HOME`` or ~/.config."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "styrmin" / "styrminctl.yaml"


def load(path: Path | None = None) -> Config:
    """The config at ``path`` (default: :func:`default_path`); empty when the file does not exist."""
    path = path or default_path()
    try:
        text = path.read_text(encoding="utf-8")
        mode = path.stat().st_mode
    except FileNotFoundError:
        return Config(path=path)
    except OSError as error:
        raise ConfigFileError(f"Cannot read the config file {path}: {error.strerror or error}.") from None
    import yaml  # only when there is a file to read: `styrminctl --help` starts faster without it

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ConfigFileError(f"The config file {path} is not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"The config file {path} is not a styrminctl config (no mapping at the top).")
    contexts: dict[str, Context] = {}
    for index, entry in enumerate(data.get("contexts") or []):
        if not isinstance(entry, dict) or not entry.get("name") or not entry.get("server"):
            raise ConfigFileError(
                f"The config file {path}: contexts[{index}] needs a name and a server; fix or remove it."
            )
        contexts[str(entry["name"])] = Context(
            name=str(entry["name"]),
            server=str(entry["server"]),
            user=_optional(entry.get("user")),
            token=_optional(entry.get("token")),
            token_expires_at=_optional(entry.get("token-expires-at")),
        )
    current = _optional(data.get("current-context"))
    return Config(
        path=path,
        contexts=contexts,
        current_context=current,
        loose_permissions=bool(stat.S_IMODE(mode) & 0o077),
    )


def _optional(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def context_name_for(server: str) -> str:
    """The default context name for a server: its host and port (``styrmin.example.com``, ``127.0.0.1:8080``)."""
    parts = urlsplit(server)
    return parts.netloc or server


def same_server(a: str, b: str) -> bool:
    """Whether two server URLs name the same server (ignoring a trailing ``/`` and ``/api/v1``)."""

    def norm(url: str) -> str:
        return url.strip().rstrip("/").removesuffix("/api/v1").lower()

    return norm(a) == norm(b)

"""How Styrmin reaches a Prefect server: its URL, credentials and TLS, from Prefect's own settings.

Both the agent (``agent/prefect/_rest.py``) and the server, which reads actions' log lines from
Prefect for its users (``prefect_logs.py``), call Prefect's REST API without Prefect's client
library, whose import holds 32 MB for a process's whole life. They send what Prefect's client
sends: the API version header and ``PREFECT_API_KEY`` as a bearer token or
``PREFECT_API_AUTH_STRING`` as basic auth, over TLS as ``PREFECT_API_SSL_CERT_FILE`` and
``PREFECT_API_TLS_INSECURE_SKIP_VERIFY`` say. The settings come from the environment; where a
Prefect profiles file exists, Prefect's own settings module reads them, profiles included.
"""

from __future__ import annotations

import base64
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

API_VERSION = "0.8.4"
"""The ``X-PREFECT-API-VERSION`` header Prefect's client sends (``prefect.client.constants``)."""

_SETTINGS = (
    "PREFECT_API_URL",
    "PREFECT_API_KEY",
    "PREFECT_API_AUTH_STRING",
    "PREFECT_API_SSL_CERT_FILE",
    "PREFECT_API_TLS_INSECURE_SKIP_VERIFY",
)


@dataclass(frozen=True)
class PrefectConnection:
    """Where the Prefect server is and how to reach it."""

    api_url: str | None
    api_key: str | None = None
    auth_string: str | None = None
    ssl_cert_file: str | None = None
    tls_insecure_skip_verify: bool = False

    @classmethod
    def from_settings(cls, api_url: str | None = None) -> PrefectConnection:
        """Prefect's settings as Prefect's client reads them; ``api_url`` overrides ``PREFECT_API_URL``."""
        values = _prefects_settings() if _has_profiles() else {n: os.environ.get(n) for n in _SETTINGS}
        return cls(
            api_url=api_url or values["PREFECT_API_URL"] or None,
            api_key=values["PREFECT_API_KEY"] or None,
            auth_string=values["PREFECT_API_AUTH_STRING"] or None,
            ssl_cert_file=values["PREFECT_API_SSL_CERT_FILE"] or None,
            tls_insecure_skip_verify=str(values["PREFECT_API_TLS_INSECURE_SKIP_VERIFY"] or "").lower()
            in ("1", "true", "yes", "on"),
        )

    def headers(self) -> dict[str, str]:
        """The headers of every call: the API version, and the credentials (an auth string first)."""
        headers = {"X-PREFECT-API-VERSION": API_VERSION}
        if self.auth_string:
            headers["Authorization"] = "Basic " + base64.b64encode(self.auth_string.encode()).decode()
        elif self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def verify(self) -> ssl.SSLContext | bool:
        if self.tls_insecure_skip_verify:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        if self.ssl_cert_file:
            return ssl.create_default_context(cafile=self.ssl_cert_file)
        return True


def _has_profiles() -> bool:
    """Whether a Prefect profiles file exists, which may set what the environment does not."""
    path = os.environ.get("PREFECT_PROFILES_PATH")
    if path:
        return Path(path).expanduser().is_file()
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    return (home / "profiles.toml").is_file()


def _prefects_settings() -> dict[str, Any]:
    """The settings through Prefect's own settings module: environment, then the active profile."""
    import prefect.settings as settings

    return {name: getattr(settings, name).value() for name in _SETTINGS}

"""The local Prefect server that ``styrmin up`` and the tests start."""

from __future__ import annotations

import httpx
import pytest

from styrmin_backend.agent.prefect import LocalPrefectServer

pytestmark = pytest.mark.slow


def test_local_prefect_server_serves_its_ui(prefect_server: LocalPrefectServer) -> None:
    response = httpx.get(prefect_server.url, timeout=10)

    assert response.status_code == 200
    assert "<html" in response.text.lower()
    assert prefect_server.start_seconds is not None
    assert (prefect_server.data_dir / "prefect.db").is_file()

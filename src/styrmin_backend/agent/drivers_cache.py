"""Driver versions the agent has fetched from the server, unpacked once on its disk."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from styrmin_backend.agent.server_api import ServerApi
from styrmin_backend.drivers import DriverPackage, DriverSpec, read_driver_archive


class DriverCache:
    """Fetch each driver version once; keep it unpacked under ``root``."""

    def __init__(self, api: ServerApi, root: Path) -> None:
        self._api = api
        self._root = root
        self._packages: dict[tuple[str, str], DriverPackage] = {}
        self._lock = asyncio.Lock()

    async def get(self, name: str, version: str) -> DriverPackage:
        """The driver ``name@version``, fetched from the server the first time."""
        async with self._lock:
            key = (name, version)
            if key not in self._packages:
                archive = await self._api.driver_archive(name, version)
                package = await asyncio.to_thread(read_driver_archive, archive)
                folder = self._root / f"{name}-{version}"
                if folder.exists():
                    shutil.rmtree(folder)
                await asyncio.to_thread(package.extract_to, folder)
                self._packages[key] = package
            return self._packages[key]

    async def spec(self, name: str, version: str) -> DriverSpec:
        """The spec of ``name@version``."""
        return (await self.get(name, version)).spec

    async def folder(self, name: str, version: str) -> Path:
        """Where ``name@version`` is unpacked."""
        await self.get(name, version)
        return self._root / f"{name}-{version}"

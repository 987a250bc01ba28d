"""Benchmark: hostile driver uploads against the real server, one fresh `styrmin server` per bomb.

Each bomb is sent to POST /api/v1/drivers/validate as a Read-only user (gzip-x6: six at once) while
another client keeps asking GET /api/v1/deployments. Prints, per bomb: the answer's
status, how long it took, the slowest GET /api/v1/deployments meanwhile, and how much the server's
peak resident memory (VmHWM) rose above its idle peak. Targets: a 4xx within 10 s, other requests
answered within 2 s, at most 200 MiB more memory.

    uv run python bench/driver_bombs.py [--only alias,nesting,...] [--timeout 60]

To measure another checkout's code, put its src first: PYTHONPATH=/path/to/checkout/src.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tarfile
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from _figures import styrmin_server

PASSWORD = "bench-password"  # noqa: S105 (the throwaway admin of a throwaway server)
TARGET_SECONDS = 10.0
TARGET_OTHER_SECONDS = 2.0
TARGET_MEMORY_MIB = 200.0

SPEC = """\
apiVersion: styrmin.io/v1
kind: Driver
metadata:
  name: bomb
  version: 1.0.0
spec:
  application:
    name: Bomb
    defaultVersion: "1.0.0"
  components:
    - name: server
      workload:
        kind: Deployment
        name: "{{ .Release.Name }}-server"
"""

CHART_YAML = "apiVersion: v2\nname: bomb\nversion: 0.1.0\n"

WORKLOAD = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-server
spec:
  template:
    spec:
      containers:
        - name: server
          image: example.com/bomb:1
"""

# The classic "billion laughs", about 700 bytes: 9 levels of 9 aliases each.
ALIAS_BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{','.join([f'*{previous}'] * 9)}]\n"
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True)
)

# A chart whose one template renders about 100 MB: 1,000 ConfigMaps of 100 kB each.
BIG_TEMPLATE = """\
{{- range $i := until 1000 }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: big-{{ $i }}
data:
  blob: {{ repeat 100000 "a" | quote }}
{{- end }}
"""


def _tar(files: dict[str, bytes], *, directories: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in directories:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            archive.addfile(info)
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _driver(
    spec: str = SPEC, template: str = WORKLOAD, files: dict[str, bytes] | None = None
) -> dict[str, bytes]:
    return {
        "driver.styrmin.yml": spec.encode(),
        "chart/Chart.yaml": CHART_YAML.encode(),
        "chart/templates/workload.yaml": template.encode(),
        **(files or {}),
    }


def alias_bomb() -> bytes:
    """driver.styrmin.yml with a 700-byte alias bomb."""
    return _tar(_driver(SPEC + ALIAS_BOMB))


def nesting_bomb() -> bytes:
    """driver.styrmin.yml with a value nested 50,000 deep."""
    return _tar(_driver(SPEC + "x: " + "[" * 50_000 + "]" * 50_000 + "\n"))


def values_alias_bomb() -> bytes:
    """The chart's values.yaml holds the alias bomb."""
    return _tar(_driver(files={"chart/values.yaml": ALIAS_BOMB.encode()}))


def template_alias_bomb() -> bytes:
    """A chart template that renders the alias bomb into a ConfigMap."""
    bomb = "".join(f"  {line}\n" for line in ALIAS_BOMB.splitlines())
    template = WORKLOAD + "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\ndata:\n" + bomb
    return _tar(_driver(template=template))


def gzip_bomb() -> bytes:
    """About 1 MB of gzip that unpacks to a 1 GiB file (zeros) beside a valid driver."""
    size = 1024**3
    members = []
    for name, content in _driver().items():  # the headers and contents, without an end-of-archive
        info = tarfile.TarInfo(name)
        info.size = len(content)
        members.append(info.tobuf(tarfile.GNU_FORMAT) + content + b"\0" * (-len(content) % 512))
    header = tarfile.TarInfo("chart/zeros")
    header.size = size
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [compressor.compress(b"".join(members) + header.tobuf(tarfile.GNU_FORMAT))]
    zeros = b"\0" * (1024 * 1024)
    for _ in range(size // len(zeros) + 1):  # the file, then the end-of-archive blocks
        out.append(compressor.compress(zeros))
    out.append(compressor.flush())
    return b"".join(out)


def file_and_folder() -> bytes:
    """A tar that holds both a file ``chart/x`` and a file ``chart/x/y``."""
    return _tar(_driver(files={"chart/x": b"file", "chart/x/y": b"file inside"}))


def big_render() -> bytes:
    """A chart whose templates render about 100 MB."""
    return _tar(_driver(template=WORKLOAD + "---\n" + BIG_TEMPLATE))


BOMBS: dict[str, Callable[[], bytes]] = {
    "alias": alias_bomb,
    "nesting": nesting_bomb,
    "values-alias": values_alias_bomb,
    "template-alias": template_alias_bomb,
    "gzip": gzip_bomb,
    "file-and-folder": file_and_folder,
    "render-100mb": big_render,
}
COPIES = {"gzip-x6": ("gzip", 6)}
"""Bombs sent several at once: (bomb, how many)."""


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _server_pid(port: str) -> int:
    """The pid of the process listening on ``port`` (the server itself, not a launcher)."""
    inode_hex = f":{int(port):04X}"
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1].endswith(inode_hex) and fields[3] == "0A":
                inodes.add(fields[9])
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    return int(entry.name)
        except OSError:
            continue
    raise RuntimeError(f"no process listens on port {port}")


def _token(url: str, username: str, role: str, admin: str) -> str:
    headers = {"Authorization": f"Bearer {admin}"}
    httpx.post(
        f"{url}/api/v1/users",
        json={"username": username, "role": role, "password": PASSWORD},
        headers=headers,
    ).raise_for_status()
    login = httpx.post(f"{url}/api/v1/auth/login", json={"username": username, "password": PASSWORD})
    login.raise_for_status()
    token: str = login.json()["token"]
    return token


def run_bomb(name: str, archive: bytes, timeout: float, copies: int = 1) -> None:
    with tempfile.TemporaryDirectory(prefix="styrmin-bench-bombs-") as data_dir:
        env = {"STYRMIN_DATA_DIR": data_dir, "STYRMIN_ADMIN_PASSWORD": PASSWORD}
        with styrmin_server(env) as url:
            pid = _server_pid(url.rsplit(":", 1)[1])
            login = httpx.post(f"{url}/api/v1/auth/login", json={"username": "admin", "password": PASSWORD})
            admin = login.json()["token"]
            reader = _token(url, "reader", "read-only", admin)
            headers = {"Authorization": f"Bearer {reader}"}
            for _ in range(5):  # warm-up
                httpx.get(f"{url}/api/v1/deployments", headers=headers)
            idle_peak = _peak_rss_mib(pid)

            stop = threading.Event()
            others: list[float] = []

            def ask_others() -> None:
                with httpx.Client(timeout=timeout) as client:
                    while not stop.is_set():
                        started = time.perf_counter()
                        with contextlib.suppress(httpx.TimeoutException):
                            client.get(f"{url}/api/v1/deployments", headers=headers)
                        others.append(time.perf_counter() - started)
                        time.sleep(0.1)

            watcher = threading.Thread(target=ask_others, daemon=True)
            watcher.start()

            def send(_: int) -> tuple[str, str]:
                try:
                    answer = httpx.post(
                        f"{url}/api/v1/drivers/validate",
                        content=archive,
                        headers={**headers, "Content-Type": "application/gzip"},
                        timeout=timeout,
                    )
                except httpx.TimeoutException:
                    return "none", f"no answer within {timeout:.0f} s"
                body = answer.json()
                return str(answer.status_code), str(body.get("message") or body.get("problems", ""))[:100]

            started = time.perf_counter()
            with ThreadPoolExecutor(copies) as pool:
                answers = list(pool.map(send, range(copies)))
            statuses = sorted(status for status, _ in answers)
            status = statuses[0] if copies == 1 else ",".join(statuses)
            message = answers[0][1]
            elapsed = time.perf_counter() - started
            stop.set()
            watcher.join(timeout=timeout + 5)
            peak = _peak_rss_mib(pid) - idle_peak
            slowest = max(others) if others else float("nan")
            print(
                f"{name:16s} {len(archive) / 1024:8.1f} KiB  status {status} "
                f"time {elapsed:6.2f} s (target <= {TARGET_SECONDS:.0f} s)  "
                f"slowest other request {slowest:6.2f} s (target <= {TARGET_OTHER_SECONDS:.0f} s)  "
                f"peak memory +{peak:6.1f} MiB (target <= {TARGET_MEMORY_MIB:.0f} MiB)  {message}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default=",".join([*BOMBS, *COPIES]), help="Comma-separated bombs to send.")
    parser.add_argument("--timeout", type=float, default=60.0, help="Seconds to wait for each answer.")
    arguments = parser.parse_args()
    for name in arguments.only.split(","):
        bomb, copies = COPIES.get(name, (name, 1))
        run_bomb(name, BOMBS[bomb](), arguments.timeout, copies)


if __name__ == "__main__":
    main()

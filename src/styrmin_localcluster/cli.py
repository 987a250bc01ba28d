"""`styrmin-localcluster`: serve a local cluster on loopback and write its kubeconfig."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from .catalog import CatalogError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="styrmin-localcluster",
        description="Serve a Kubernetes-API-compatible local cluster on loopback whose pods run as local "
        "processes, and write a kubeconfig for it.",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        required=True,
        help="folder for logs, pod folders, the token and (by default) the kubeconfig",
    )
    parser.add_argument(
        "--catalog",
        type=Path,
        action="append",
        default=[],
        metavar="FOLDER",
        help="an image catalog folder (repeat for several)",
    )
    parser.add_argument(
        "--state-file", type=Path, help="keep the cluster's objects in this file across restarts"
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free port)")
    parser.add_argument(
        "--kubeconfig", type=Path, help="where to write the kubeconfig (default: DATA_DIR/kubeconfig)"
    )
    parser.add_argument("--ready-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--exit-with-parent", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    from .server import ClusterServer

    try:
        server = ClusterServer(
            args.data_dir, args.catalog, args.state_file, port=args.port, kubeconfig_path=args.kubeconfig
        )
    except (CatalogError, ValueError) as exc:
        print(f"styrmin-localcluster: {exc}", file=sys.stderr)
        return 2

    def ready(url: str) -> None:
        if args.ready_file is not None:
            temporary = args.ready_file.with_name(args.ready_file.name + ".tmp")
            temporary.write_text(url)
            os.replace(temporary, args.ready_file)
        print(f"Local cluster serving on {url}", flush=True)
        print(
            f"Kubeconfig: {server.kubeconfig_path}  (export KUBECONFIG={server.kubeconfig_path})", flush=True
        )

    async def stop_with_parent(parent: int) -> None:
        # A cluster started by LocalCluster must not outlive its caller, even one killed abruptly.
        while os.getppid() == parent:
            await asyncio.sleep(1.0)
        server.stop()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, server.stop)
        watcher = asyncio.create_task(stop_with_parent(os.getppid())) if args.exit_with_parent else None
        await server.serve(ready)
        if watcher is not None:
            watcher.cancel()

    try:
        asyncio.run(run())
    except OSError as exc:
        print(
            f"styrmin-localcluster: cannot serve on 127.0.0.1:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    except ValueError as exc:
        print(f"styrmin-localcluster: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A long-running test server: says where and how it runs, then waits to be stopped."""

import os
import signal
import sys
import time


def main() -> None:
    print(f"server started with args {sys.argv[1:]} in {os.getcwd()}", flush=True)
    print(f"image={os.environ.get('LOCALCLUSTER_IMAGE')} message={os.environ.get('MESSAGE', '')}", flush=True)
    data_dir = os.environ.get("LOCALCLUSTER_DATA_DIR")
    if data_dir and os.environ.get("HOSTNAME"):
        with open(os.path.join(data_dir, f"{os.environ['HOSTNAME']}.pid"), "w") as handle:
            handle.write(str(os.getpid()))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()

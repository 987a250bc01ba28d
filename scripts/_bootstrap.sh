# Shared set-up steps of scripts/up and scripts/test (sourced, not run).

UV_VERSION="0.13.8"

ensure_uv() {
  if ! command -v uv >/dev/null 2>&1 || [ "$(uv --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    python3 -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
  fi
}

# Installs the locked dependencies with their bytecode compiled, and compiles Styrmin's own modules:
# with PYTHONDONTWRITEBYTECODE set (as on these machines) Python would otherwise compile every module
# on each process start, and each action process, Prefect server and CLI call would pay for it
# (importing Prefect took 12 s without bytecode and 3 s with it here).
sync_with_bytecode() {
  uv sync --frozen --compile-bytecode --quiet "$@"
  uv run --frozen --no-sync python -m compileall -q -j 0 src packages >/dev/null
}

# The tests use the machine's PostgreSQL 15 (127.0.0.1:5432, trust auth, database "test").
ensure_postgres() {
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    pg_ctlcluster --skip-systemctl-redirect 15 main start
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && return 0; sleep 1; done
    echo "PostgreSQL did not start on 127.0.0.1:5432" >&2
    return 1
  fi
}

# The web UI's tests drive Debian's Chromium through Playwright (no browser download).
ensure_chromium() {
  if [ ! -x /usr/bin/chromium ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
}

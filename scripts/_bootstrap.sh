# Shared set-up steps of scripts/up and scripts/test (sourced, not run).

UV_VERSION="0.13.8"

ensure_uv() {
  if ! command -v uv >/dev/null 2>&1 || [ "$(uv --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    python3 -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
  fi
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

# One image for `styrmin server`, `styrmin agent` and the Prefect server the agent runs actions on.
# Build: docker build -t styrmin:0.1.0 .   (the chart in deploy/chart/ runs it; see docs/production.md)

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ghcr.io/astral-sh/uv:0.13.8 AS uv

# --- build: resolve the locked dependencies and install Styrmin into /opt/styrmin ----------------
FROM ${PYTHON_IMAGE} AS build
COPY --from=uv /uv /usr/local/bin/uv
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/opt/styrmin
WORKDIR /src
# Dependencies first, in a layer of their own: it is rebuilt only when uv.lock changes. The server
# (with its s3 extra for backups to S3) depends on the workspace's client and driver library.
COPY pyproject.toml uv.lock ./
COPY packages/styrmin/pyproject.toml packages/styrmin/
COPY packages/styrmin-drivers/pyproject.toml packages/styrmin-drivers/
RUN uv sync --frozen --no-dev --extra s3 --no-install-workspace
COPY README.md ./
COPY src ./src
COPY packages ./packages
RUN uv sync --frozen --no-dev --extra s3 --no-editable

# --- final: the interpreter, the virtual environment, a non-root user; no uv, no compilers -------
FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 styrmin \
    && useradd --system --uid 10001 --gid styrmin --no-create-home --home-dir /tmp styrmin
COPY --from=build /opt/styrmin /opt/styrmin
# Everything the processes write goes under /tmp and /data, so the root filesystem can be
# read-only: mount an emptyDir (or a volume) on each.
ENV PATH=/opt/styrmin/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    PREFECT_HOME=/tmp/prefect \
    STYRMIN_DATA_DIR=/data/server \
    STYRMIN_AGENT_DATA_DIR=/data/agent \
    STYRMIN_HOST=0.0.0.0 \
    STYRMIN_LOG_FORMAT=json
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080 4200
ENTRYPOINT ["styrmin"]
CMD ["server"]

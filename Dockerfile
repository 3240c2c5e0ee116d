# One image per service, from the repository root:
#   docker build --build-arg SERVICE=node-labeller -t hostaffinity/node-labeller .
# SERVICE is the service's folder under services/ (its console script is hostaffinity-$SERVICE).
# Every image also carries the hostaffinity CLI (compose's vcsim-seed runs seed-vcsim from the
# node-labeller image; `hostaffinity events` helps in any container).
#
# BASE is the Python both stages start from: the public slim image by default; `make images`
# (scripts/images.sh) passes a local Debian bookworm image with python3 where that one cannot be
# pulled. Whatever it is, it must have python3.11 and pip (a base that marks its Python
# "externally managed", as Debian's does, sets PIP_BREAK_SYSTEM_PACKAGES itself).
# VERSION, REVISION and SOURCE fill the OCI labels (scripts/images.sh passes the service's
# version and `git rev-parse HEAD`).
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ARG SERVICE
RUN python3 -m pip install --no-cache-dir uv==0.13.9 \
    && apt-get update -qq && apt-get install -y -qq --no-install-recommends binutils >/dev/null \
    && rm -rf /var/lib/apt/lists/*
# Built where it runs: the console scripts' shebangs name the virtualenv's absolute path.
WORKDIR /app
# Bytecode in the image: a read-only root file system can keep none, and a service would
# otherwise compile every module at each start (~1.5 s more).
ENV UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never UV_COMPILE_BYTECODE=1
COPY pyproject.toml uv.lock ./
COPY libs libs
COPY services services
# The uv cache survives across builds (a source change re-installs without downloading).
# Then what makes the image small (~50 MB less): the extension modules stripped of symbols, and
# kubernetes_asyncio's generated API and model classes (47 MB of docstrings and their bytecode)
# kept as bytecode alone, compiled without docstrings (-o 2; that generated code asserts nothing).
RUN --mount=type=cache,target=/root/.cache/uv \
    : "${SERVICE:?build with --build-arg SERVICE=<folder under services/>}" \
    && uv sync --frozen --no-dev --no-editable \
        --package "hostaffinity-$SERVICE" --package hostaffinity-cli \
    && ln -s "hostaffinity-$SERVICE" .venv/bin/hostaffinity-service \
    && find .venv -name '*.so*' -type f -exec strip --strip-unneeded {} + \
    && for generated in .venv/lib/python3*/site-packages/kubernetes_asyncio/client/api \
                        .venv/lib/python3*/site-packages/kubernetes_asyncio/client/models; do \
         find "$generated" -name __pycache__ -prune -exec rm -rf {} + \
         && python3 -m compileall -q -b -o 2 "$generated" \
         && find "$generated" -name '*.py' -delete; \
       done \
    && .venv/bin/python -c 'import kubernetes_asyncio.client'

FROM ${BASE}
COPY --from=build /app/.venv /app/.venv
# Nothing is written at run time: the root file system may be read-only (compiled bytecode is
# in the image; Python writes no .pyc).
ENV PATH=/app/.venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
# Health and metrics; a service's own ports (the extender's 8888, the webhook's 8443) are
# declared where they are published: compose.yaml and the Deployments.
EXPOSE 8080
# Exec form: the service is PID 1 and gets SIGTERM itself (the runner drains on it). No default
# arguments: the Deployments pass their --config files, compose configures through the environment.
ENTRYPOINT ["hostaffinity-service"]
# Last, so a new revision rebuilds only this layer.
ARG BASE
ARG SERVICE
ARG VERSION=unknown
ARG REVISION=unknown
ARG SOURCE=https://github.com/hostaffinity/hostaffinity
LABEL org.opencontainers.image.title="hostaffinity-${SERVICE}" \
      org.opencontainers.image.base.name="${BASE}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"

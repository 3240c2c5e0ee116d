#!/usr/bin/env bash
# Installs everything the project needs on a fresh Debian machine: a pinned uv (with pip), the
# Python dependencies from uv.lock, the tools the documented install steps use (curl, unzip,
# openssl), our vcsim build and the Go example subscriber (both install the Debian packages they
# need) and Debian's prometheus (promtool and a Prometheus for the monitoring tests).
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.9
if ! command -v uv >/dev/null || [ "$(uv --version | awk '{print $2}')" != "$UV_VERSION" ]; then
  echo "setup: installing uv $UV_VERSION"
  python3 -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
uv sync --all-packages --frozen --quiet
bash scripts/install-tools.sh
bash scripts/build-vcsim.sh
bash scripts/build-go-subscriber.sh
bash scripts/install-prometheus.sh

#!/usr/bin/env bash
# The project's one test command (`make test`): set-up, lint, type-check, layer contracts, the
# docs build, the container images (scripts/images.sh), tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ruff"
uv run --frozen ruff check .
uv run --frozen ruff format --check libs services tests bench
echo "== mypy --strict (libs and services)"
uv run --frozen mypy --strict libs/*/src services/*/src
echo "== import-linter"
uv run --frozen lint-imports
echo "== docs (generated pages current, mkdocs --strict)"
uv run --frozen python scripts/docs_reference.py --check
uv run --frozen python scripts/draw_cores.py --check
uv run --frozen mkdocs build --strict
echo "== container images (podman)"
bash scripts/images.sh
echo "== pytest"
uv run --frozen pytest "$@"

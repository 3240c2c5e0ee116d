.PHONY: setup test test-fast images dev demo docs proto bench release

setup:
	bash scripts/setup.sh

test:
	bash scripts/test.sh

# The fast loop: the unit and contract tests (kinds by place: tests/kinds.py), no server started.
test-fast:
	uv run --frozen pytest -m "unit or contract" -q $(PYTEST_ARGS)

images:
	bash scripts/images.sh

dev:
	bash scripts/dev.sh

# Plays the scenarios on what `make dev` started (run it in a second terminal).
demo:
	uv run --frozen hostaffinity demo --nats nats://127.0.0.1:$${NATS_PORT:-4222} \
	  --nats-seed $${DEV_STATE:-.cache/dev}/nats/cli.nk \
	  --vcenter http://user:pass@$${VCSIM_LISTEN:-127.0.0.1:8989}/sdk

# Regenerates docs/configuration.md, docs/events.md and docs/cores.md from the code, then builds
# docs/ strictly.
docs:
	uv run --frozen python scripts/docs_reference.py
	uv run --frozen python scripts/draw_cores.py
	uv run --frozen mkdocs build --strict

proto:
	uv run --frozen python -m hostaffinity.schema.proto proto

bench:
	bash scripts/bench.sh

# Versioned install manifests (one per variant), the CLI's wheels and their constraints, in dist/.
release:
	uv run --frozen python -m scripts.release

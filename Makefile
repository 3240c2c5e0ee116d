.PHONY: setup test images dev demo proto bench

setup:
	bash scripts/setup.sh

test:
	bash scripts/test.sh

images:
	bash scripts/images.sh

dev:
	bash scripts/dev.sh

# Plays the scenarios on what `make dev` started (run it in a second terminal).
demo:
	uv run --frozen hostaffinity demo --nats-seed .cache/dev/nats/cli.nk

proto:
	uv run --frozen python -m hostaffinity.schema.proto proto

bench:
	bash scripts/bench.sh

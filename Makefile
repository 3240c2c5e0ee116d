.PHONY: setup test images dev proto bench

setup:
	bash scripts/setup.sh

test:
	bash scripts/test.sh

images:
	bash scripts/images.sh

dev:
	bash scripts/dev.sh

proto:
	uv run --frozen python -m hostaffinity.schema.proto proto

bench:
	bash scripts/bench.sh

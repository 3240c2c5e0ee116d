#!/usr/bin/env bash
# All benchmarks at full scale (`make bench`); they print figures and never fail on timing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
for bench in affinity_bench extender_bench node_labeller_bench drs_bench webhook_bench descheduler_bench cli_bench topology_watch_bench events_bench pod_memory_bench reaction_bench; do
  echo "== bench/$bench.py"
  uv run --frozen python "bench/$bench.py"
done

#!/usr/bin/env bash
# The main job without Docker (`make dev`): the services as local processes, with an embedded
# nats-server (JetStream) and our vcsim, against whatever cluster KUBECONFIG points at.
# Ctrl-C stops everything. State lives in .cache/dev.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
state=.cache/dev
mkdir -p "$state"
NATS_PORT=${NATS_PORT:-4222}
VCSIM_LISTEN=${VCSIM_LISTEN:-127.0.0.1:8989}
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

.venv/bin/nats-server -js -a 127.0.0.1 -p "$NATS_PORT" -sd "$state/jetstream" -m 8222 \
  >"$state/nats.log" 2>&1 &
pids+=($!)
echo "dev: nats-server on nats://127.0.0.1:$NATS_PORT (JetStream in $state/jetstream)"

build/vcsim -listen "$VCSIM_LISTEN" -clusters 1 -hosts 3 -vms "${VCSIM_VMS:-6}" \
  >"$state/vcsim.out" 2>"$state/vcsim.log" &
pids+=($!)
for _ in $(seq 100); do grep -q VCSIM_URL "$state/vcsim.out" && break; sleep 0.1; done
echo "dev: vcsim at $(sed -n 's/^VCSIM_URL=//p' "$state/vcsim.out")"
echo "dev: KUBECONFIG=${KUBECONFIG:-<unset: in-cluster or ~/.kube/config>}"
echo "dev: running; Ctrl-C stops everything"
wait -n "${pids[@]}"

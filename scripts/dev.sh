#!/usr/bin/env bash
# The main job without Docker (`make dev`): the five services as local processes, with an embedded
# nats-server (JetStream) and our vcsim, against whatever cluster KUBECONFIG points at.
# vcsim gets one VM per cluster node (spread over its hosts, matched by name), since kind and k3s
# have no vSphere behind them. Without a usable cluster it stops at once saying what is missing.
# Ctrl-C stops everything. Logs and state live in .cache/dev.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
state=${DEV_STATE:-.cache/dev}
mkdir -p "$state"
NATS_PORT=${NATS_PORT:-4222}
NATS_MONITOR_PORT=${NATS_MONITOR_PORT:-8222}
VCSIM_LISTEN=${VCSIM_LISTEN:-127.0.0.1:8989}
LABELLER_HEALTH_PORT=${LABELLER_HEALTH_PORT:-8081}
EXTENDER_HEALTH_PORT=${EXTENDER_HEALTH_PORT:-8082}
DRS_HEALTH_PORT=${DRS_HEALTH_PORT:-8083}
DESCHEDULER_HEALTH_PORT=${DESCHEDULER_HEALTH_PORT:-8084}
EXTENDER_PORT=${EXTENDER_PORT:-8888}
WEBHOOK_HEALTH_PORT=${WEBHOOK_HEALTH_PORT:-8085}
WEBHOOK_PORT=${WEBHOOK_PORT:-8443}
# Where the cluster's API server reaches this machine's webhook, e.g. https://172.17.0.1:8443/mutate
# for kind (the docker bridge); unset: the webhook runs but is not registered.
DEV_WEBHOOK_URL=${DEV_WEBHOOK_URL:-}
# Before anything starts: an API server that answers, or one line naming what is missing. The
# descheduler's KubeVirt side (live migrations) runs where the cluster serves KubeVirt's API.
cluster=$(.venv/bin/hostaffinity check-cluster)
echo "$cluster"
kubevirt=false
case $cluster in
  *"KubeVirt's API is served"*) kubevirt=true ;;
esac
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "dev: stopped"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The bus as Kubernetes runs it, on one server without TLS: the shipped local.conf with the same
# users and permissions (auth.conf), one nkey per identity under $state/nats (kept across runs).
# The server runs from copies in $state/nats, beside the subscribers.conf that `hostaffinity bus
# subscriber add` writes there; it signals a reload through the pid file.
.venv/bin/hostaffinity bus credentials --dir "$state/nats" >/dev/null
cp k8s/base/nats/local.conf k8s/base/nats/auth.conf "$state/nats/"
(set -a && . "$state/nats/nats-server.env" && exec .venv/bin/nats-server \
  -c "$state/nats/local.conf" -a 127.0.0.1 -p "$NATS_PORT" -m "$NATS_MONITOR_PORT" \
  -sd "$state/jetstream" -P "$state/nats/nats.pid") >"$state/nats.log" 2>&1 &
pids+=($!)
echo "dev: nats-server on nats://127.0.0.1:$NATS_PORT (JetStream in $state/jetstream," \
  "monitor on :$NATS_MONITOR_PORT, identities in $state/nats)"
export HOSTAFFINITY_NATS__SERVERS="[\"nats://127.0.0.1:$NATS_PORT\"]"
# Each process connects as its own identity (the nkey seed file named after it). Run in a
# subshell, the command replaces it: the pid kept is the service's own, so stopping it stops it.
as_identity() {
  export HOSTAFFINITY_NATS__IDENTITY=$1 HOSTAFFINITY_NATS__NKEY_SEED_FILE="$state/nats/$1.nk"
  exec "${@:2}"
}
# start IDENTITY COMMAND...: a service in the background, logging to $state/IDENTITY.log.
start() {
  (as_identity "$@") >"$state/$1.log" 2>&1 &
  pids+=($!)
}
(as_identity provision .venv/bin/hostaffinity bus provision --connect-timeout 30)

build/vcsim -listen "$VCSIM_LISTEN" -clusters 1 -hosts 3 -vms 0 \
  >"$state/vcsim.out" 2>"$state/vcsim.log" &
pids+=($!)
for _ in $(seq 100); do grep -q VCSIM_URL "$state/vcsim.out" && break; sleep 0.1; done
vcsim_url=$(sed -n 's/^VCSIM_URL=//p' "$state/vcsim.out")
[ -n "$vcsim_url" ] || { echo "dev: vcsim did not start; see $state/vcsim.log" >&2; exit 1; }
echo "dev: vcsim at $vcsim_url"

echo "dev: KUBECONFIG=${KUBECONFIG:-<unset: ~/.kube/config>}"
.venv/bin/hostaffinity seed-vcsim --vcenter "$vcsim_url" ${KUBECONFIG:+--kubeconfig "$KUBECONFIG"}

vc_hostport=${vcsim_url#*@}; vc_hostport=${vc_hostport%%/*}
${KUBECONFIG:+export HOSTAFFINITY_KUBERNETES__KUBECONFIG="$KUBECONFIG"}

# node-labeller and drs-translator watch and write the same vcsim; the leader-elected services
# keep their Leases in kube-system, which every cluster has.
export HOSTAFFINITY_LEASE__NAMESPACE=kube-system
vcenter=(HOSTAFFINITY_VCENTERS__0__HOST="${vc_hostport%:*}"
  HOSTAFFINITY_VCENTERS__0__PORT="${vc_hostport##*:}" HOSTAFFINITY_VCENTERS__0__PROTOCOL=http HOSTAFFINITY_VCENTERS__0__USERNAME=user
  HOSTAFFINITY_VCENTERS__0__PASSWORD=pass)
start node-labeller env "${vcenter[@]}" HOSTAFFINITY_HEALTH__PORT="$LABELLER_HEALTH_PORT" \
  .venv/bin/hostaffinity-node-labeller
echo "dev: node-labeller (health on :$LABELLER_HEALTH_PORT, log $state/node-labeller.log)"
start drs-translator env "${vcenter[@]}" HOSTAFFINITY_HEALTH__PORT="$DRS_HEALTH_PORT" \
  .venv/bin/hostaffinity-drs-translator
echo "dev: drs-translator (health on :$DRS_HEALTH_PORT, log $state/drs-translator.log)"
start descheduler env HOSTAFFINITY_HEALTH__PORT="$DESCHEDULER_HEALTH_PORT" \
  HOSTAFFINITY_DESCHEDULER__KUBEVIRT="$kubevirt" \
  .venv/bin/hostaffinity-descheduler --config scripts/dev/descheduler.yaml
echo "dev: descheduler with every strategy (scripts/dev/descheduler-policy.yaml; health on" \
  ":$DESCHEDULER_HEALTH_PORT, log $state/descheduler.log)"
unset HOSTAFFINITY_LEASE__NAMESPACE

if [ -n "$DEV_WEBHOOK_URL" ]; then
  # The shipped configuration, pointed at this machine by URL; the service writes its caBundle.
  webhook_host=${DEV_WEBHOOK_URL#https://}; webhook_host=${webhook_host%%[:/]*}
  kubectl apply -f k8s/base/admission-webhook/mutatingwebhookconfiguration.yaml
  kubectl patch mutatingwebhookconfiguration hostaffinity-pod-host-terms --type json -p \
    "[{\"op\": \"remove\", \"path\": \"/webhooks/0/clientConfig/service\"},
      {\"op\": \"add\", \"path\": \"/webhooks/0/clientConfig/url\", \"value\": \"$DEV_WEBHOOK_URL\"}]"
fi
# Self-signed webhook certificate (kept in a Secret in the default namespace) for 127.0.0.1 and
# the host the API server dials.
HOSTAFFINITY_HEALTH__PORT=$WEBHOOK_HEALTH_PORT HOSTAFFINITY_WEBHOOK__PORT=$WEBHOOK_PORT \
HOSTAFFINITY_KUBERNETES__NAMESPACE=default \
HOSTAFFINITY_WEBHOOK__EXTRA_HOSTNAMES="[\"127.0.0.1\"${webhook_host:+, \"$webhook_host\"}]" \
  start admission-webhook .venv/bin/hostaffinity-admission-webhook
echo "dev: admission webhook on :$WEBHOOK_PORT (health on :$WEBHOOK_HEALTH_PORT)"
HOSTAFFINITY_HEALTH__PORT=$EXTENDER_HEALTH_PORT HOSTAFFINITY_EXTENDER__PORT=$EXTENDER_PORT \
  start scheduler-extender .venv/bin/hostaffinity-scheduler-extender
echo "dev: scheduler-extender on :$EXTENDER_PORT (health on :$EXTENDER_HEALTH_PORT)"
echo "dev: follow events with: .venv/bin/hostaffinity events --nats nats://127.0.0.1:$NATS_PORT" \
  "--nats-seed $state/nats/cli.nk"
answers() { .venv/bin/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
  "http://127.0.0.1:$1" 2>/dev/null; }
# Unregistered (no DEV_WEBHOOK_URL), the webhook is never ready, since kube-apiserver cannot call
# it: it is waited for as alive (/healthz) instead.
webhook_check=$WEBHOOK_HEALTH_PORT/readyz
[ -n "$DEV_WEBHOOK_URL" ] || webhook_check=$WEBHOOK_HEALTH_PORT/healthz
for check in "$LABELLER_HEALTH_PORT/readyz" "$DRS_HEALTH_PORT/readyz" \
  "$DESCHEDULER_HEALTH_PORT/readyz" "$webhook_check" "$EXTENDER_HEALTH_PORT/readyz"; do
  until answers "$check"; do
    kill -0 "${pids[@]}" 2>/dev/null || { echo "dev: a process exited; see the logs in $state" >&2; exit 1; }
    sleep 0.5
  done
done
if [ -n "$DEV_WEBHOOK_URL" ]; then
  echo "dev: all five services ready (/readyz)"
else
  echo "dev: four services ready (/readyz); the admission webhook is up but not registered" \
    "(DEV_WEBHOOK_URL unset), so not ready"
fi
echo "dev: try: .venv/bin/hostaffinity topology --nats nats://127.0.0.1:$NATS_PORT" \
  "--nats-seed $state/nats/cli.nk"
echo "dev: running; Ctrl-C stops everything"
wait -n "${pids[@]}"
echo "dev: a process exited; see the logs in $state" >&2
exit 1

